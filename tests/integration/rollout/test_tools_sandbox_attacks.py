"""Attack suite against ``PythonSandbox`` (issue 7), in both modes (bwrap on the bundled binary).

The attacks added by issue 14 (ctypes, /proc/self/mem, ptrace, signals, symlinks, rlimits, other
sandboxes, surviving descendants, no bwrap at all) are in ``test_tools_sandbox_escapes.py``.

Each attack must end within its limit, leave the host untouched and leave this (the caller's)
process working. Which mechanism contains each attack:

- infinite loop: wall-clock timeout kills the sandbox; RLIMIT_CPU (both modes).
- fork bomb: bwrap -- RLIMIT_NPROC, counted in the call's own user namespace (and a pids cgroup
  where there is one), and the PID namespace dies with its init; fallback -- the audit guard
  refuses os.fork (plus RLIMIT_NPROC when not root).
- memory hog: RLIMIT_AS -> MemoryError (both modes); memory spread over processes or put in tmpfs
  is in ``test_tools_sandbox_resources.py``.
- writing outside: bwrap -- read-only binds, private tmpfs /tmp, repository not mounted; fallback --
  the audit guard allows writes only in the temp cwd.
- reading /etc/shadow: bwrap -- not mounted; fallback -- the audit guard (and file permissions when
  not root).
- reading the repository: bwrap -- not mounted; fallback -- the audit guard (reads only under the
  interpreter's own trees and the temp cwd).
- network: bwrap -- network namespace (its own loopback only); fallback -- the audit guard refuses
  socket creation.
- environment secrets: bwrap -- --clearenv, the parent's /proc entry is invisible (PID namespace);
  fallback -- empty environment, the guard refuses /proc/<other pid>.
- printing 100 MB: incremental read, capped, sandbox killed (both modes).
- os.kill(parent): bwrap -- the parent is not in the PID namespace; fallback -- the audit guard
  refuses os.kill of other pids.

The fallback's guard is a PEP 578 audit hook: it stops these direct attacks, not a determined
attacker (ctypes tricks); the module docstring of ``python_sandbox`` says so. On a root host the
fallback runs as uid 65534, which is what still contains a determined attacker there.
"""

import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest
from sandbox_support import MODES, assert_none_left, make_sandbox, pids_with_cmdline

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", params=MODES)
def mode(request):
    return request.param


@pytest.fixture(scope="module")
def sandbox(mode):
    return make_sandbox(mode, timeout_s=2.0, memory_mb=256, max_output_bytes=8192)


def _sandbox_pids():
    return pids_with_cmdline("EXIT_MEMORY = 3")


def _assert_no_leftovers():
    assert_none_left()


def _rss_mb():
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_mode_is_what_was_asked(sandbox, mode):
    assert sandbox.mode == mode
    result = sandbox.run("print(6 * 7)")
    assert (result.output, result.error, result.exit_reason) == ("42\n", None, "ok")


def test_infinite_loop_hits_wall_clock(sandbox):
    start = time.monotonic()
    result = sandbox.run("while True:\n    pass")
    assert time.monotonic() - start < 2.0 + 1.5
    assert result.timed_out and result.exit_reason == "timeout"
    assert result.error == "timeout: exceeded 2 s wall clock"
    _assert_no_leftovers()


def test_cpu_limit_stops_a_busy_loop(mode):
    sb = make_sandbox(mode, timeout_s=10.0, memory_mb=256, cpu_s=1)
    start = time.monotonic()
    result = sb.run("while True:\n    pass")
    assert time.monotonic() - start < 5.0  # well before the 10 s wall clock
    assert result.timed_out and result.exit_reason == "cpu_limit", result
    assert "CPU" in result.error


def test_fork_bomb_is_contained(sandbox):
    code = (
        "import os\n"
        "n = 0\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            continue\n"
        "        n += 1\n"
        "    except OSError:\n"
        "        pass\n"
    )
    result = sandbox.run(code)
    assert result.timed_out and result.exit_reason == "timeout"
    _assert_no_leftovers()
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still fork


def test_fork_bomb_stays_under_nproc(mode):
    """While the bomb runs, at most ``max_processes`` sandbox interpreters exist (+ bwrap init)."""
    sb = make_sandbox(mode, timeout_s=2.0, memory_mb=256, max_processes=8)
    code = (
        "import os, time\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
        "time.sleep(10)\n"
    )
    peak = []
    thread = threading.Thread(target=lambda: peak.append(sb.run(code)))
    thread.start()
    counts = []
    while thread.is_alive():
        counts.append(len(_sandbox_pids()))
        time.sleep(0.05)
    thread.join()
    assert peak[0].exit_reason == "timeout"
    assert max(counts) <= 8 + 2, counts
    _assert_no_leftovers()


def test_memory_hog_hits_rlimit_as(sandbox):
    before = _rss_mb()
    result = sandbox.run("x = []\nwhile True:\n    x.append(bytearray(10**7))")
    assert result.exit_reason == "memory_limit" and not result.timed_out
    assert result.error == "memory limit: exceeded 256 MB (MemoryError)"
    assert _rss_mb() - before < 50


def test_writes_outside_the_sandbox_do_not_reach_the_host(sandbox, tmp_path):
    tag = uuid.uuid4().hex
    targets = [
        REPO / f"pwned_{tag}.txt",
        tmp_path / f"pwned_{tag}.txt",
        pathlib.Path(f"/tmp/pwned_{tag}"),
    ]
    code = "\n".join(
        f"try:\n    open({str(t)!r}, 'w').write('pwned')\n    print('wrote', {str(t)!r})\n"
        f"except OSError as e:\n    print('refused', type(e).__name__)"
        for t in targets
    )
    result = sandbox.run(code)
    assert result.exit_reason == "ok", result
    for target in targets:
        assert not target.exists(), f"sandbox wrote {target} on the host"
    # the repository is invisible or read-only; bwrap's private /tmp takes the /tmp write harmlessly
    assert result.output.count("refused") >= 2


def test_reading_etc_shadow_fails(sandbox):
    result = sandbox.run("print(open('/etc/shadow').read())")
    assert result.exit_reason == "error"
    assert result.error.startswith(("FileNotFoundError", "PermissionError")), result.error
    assert "root:" not in result.output


def test_the_repository_is_unreadable(sandbox):
    target = REPO / "pyproject.toml"
    assert target.is_file()
    result = sandbox.run(f"print(open({str(target)!r}).read())")
    assert result.exit_reason == "error"
    assert result.error.startswith(("FileNotFoundError", "PermissionError")), result.error
    assert "[tool.ruff]" not in result.output


def test_network_connection_is_refused(sandbox):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        code = (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).send(b'x')"
        )
        result = sandbox.run(code)
        with pytest.raises(TimeoutError):
            server.accept()  # nothing ever reached the host's listener
    assert result.exit_reason == "error"
    assert result.error.startswith(("ConnectionRefusedError", "PermissionError", "OSError"))


def test_parent_environment_secrets_are_invisible(sandbox, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("MOJAX_TEST_SECRET", secret)
    code = (
        "import os\n"
        "print(dict(os.environ))\n"
        f"for pid in ({os.getpid()}, os.getppid(), 1):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as e:\n"
        "        print('refused', pid, type(e).__name__)\n"
    )
    result = sandbox.run(code)
    assert result.exit_reason == "ok", result
    assert secret not in result.output
    assert "MOJAX_TEST_SECRET" not in result.output
    assert f"refused {os.getpid()}" in result.output


def test_printing_100_mb_is_truncated(sandbox):
    before = _rss_mb()
    start = time.monotonic()
    result = sandbox.run("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))")
    assert time.monotonic() - start < 2.0
    assert result.exit_reason == "output_limit" and result.truncated
    assert 0 < len(result.output) <= 8192
    assert _rss_mb() - before < 50
    _assert_no_leftovers()


def test_killing_the_parent_fails(sandbox):
    received = []
    old = signal.signal(signal.SIGUSR1, lambda *_: received.append(1))
    try:
        code = (
            "import os, signal\n"
            f"for pid in ({os.getpid()}, os.getppid()):\n"
            "    try:\n"
            "        os.kill(pid, signal.SIGUSR1)\n"
            "        print('sent', pid)\n"
            "    except OSError as e:\n"
            "        print('refused', pid, type(e).__name__)\n"
        )
        result = sandbox.run(code)
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert received == [], "the sandbox signalled the test process"
    assert f"refused {os.getpid()}" in result.output
    assert f"sent {os.getpid()}" not in result.output


def test_caller_still_works_after_the_attacks(sandbox):
    result = sandbox.run("import math\nmath.factorial(20)")
    assert (result.output, result.error) == ("2432902008176640000\n", None)
