"""PythonSandbox behaviour (not attacks): REPL-like output, errors, sessions, mode selection."""

import logging

import pytest

from mojax.rollout.tools import PythonSandbox, ToolResult


@pytest.fixture(scope="module", params=["bwrap", "fallback"])
def sandbox(request):
    if request.param == "bwrap":
        probe = PythonSandbox(mode="auto")
        if probe.mode != "bwrap":
            pytest.skip(f"bubblewrap unusable here: {probe.fallback_reason}")
    return PythonSandbox(timeout_s=3.0, memory_mb=512, mode=request.param)


def test_prints_and_echoes_the_last_expression(sandbox):
    result = sandbox.run("x = 3\nprint('x is', x)\nx ** 2")
    assert (result.output, result.error, result.exit_reason) == ("x is 3\n9\n", None, "ok")
    assert sandbox.run("None").output == ""
    quiet = PythonSandbox(mode=sandbox.mode, print_last_expr=False)
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
    result = sandbox.run(
        "import numpy as np, sympy\nprint(np.arange(4).sum(), sympy.factor('x**2-1'))"
    )
    assert result.output == "6 (x - 1)*(x + 1)\n", result


def test_timeout_observation_names_the_reason(sandbox):
    result = PythonSandbox(timeout_s=1.0, mode=sandbox.mode).run(
        "print('started', flush=True)\nwhile True:\n    pass"
    )
    assert result.timed_out and result.output == "started\n"
    assert result.observation == "started\ntimeout: exceeded 1 s wall clock"


def test_session_replays_earlier_cells(sandbox):
    sandbox = PythonSandbox(timeout_s=1.0, mode=sandbox.mode)
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


def test_missing_bwrap_falls_back_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        sb = PythonSandbox(bwrap="/nonexistent/bwrap", mode="auto")
        assert sb.mode == "fallback"
    assert "not found" in sb.fallback_reason
    assert any("bubblewrap unusable" in r.getMessage() for r in caplog.records)
    assert sb.run("print(2 + 2)").output == "4\n"
    with pytest.raises(RuntimeError, match="bubblewrap is unusable"):
        PythonSandbox(bwrap="/nonexistent/bwrap", mode="bwrap").run("1")


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="timeout_s"):
        PythonSandbox(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        PythonSandbox(memory_mb=-1)
    with pytest.raises(ValueError, match="mode"):
        PythonSandbox(mode="docker")
    with pytest.raises(TypeError, match="code must be str"):
        PythonSandbox(mode="fallback").run(b"print(1)")
    with pytest.raises(ValueError, match="exit_reason"):
        ToolResult(output="", exit_reason="weird")
    with pytest.raises(KeyError, match="history"):
        PythonSandbox(mode="fallback").session().load_state_dict({})


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
