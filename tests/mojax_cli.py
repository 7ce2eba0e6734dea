"""``python -m mojax.main`` run in this test process: the CLI's refusals (exit codes, the one
error block on stderr) without a new Python process that imports JAX again for each.

``run_cli`` does what ``app.run(main, flags_parser=parse_flags)`` does (the module's ``__main__``
block): ``mojax.main.parse_flags`` then ``mojax.main.main``. absl's flags are process-wide, so
every flag is reset before and after, the ``--config.*`` override flags that ml_collections
defines while parsing are deleted, and ``sys.argv``, the working directory and absl's logging
verbosity are put back. The one real subprocess of the CLI is
``tests/system/spec/test_bad_input.py::test_cli_subprocess_smoke_infinite_learning_rate_exits_2``.
"""

import contextlib
import io
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def _reset_flags(flag_values) -> None:
    for name in [n for n in flag_values if n.startswith("config.")]:
        delattr(flag_values, name)
    flag_values.unparse_flags()


def run_cli(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    """``python -m mojax.main *args`` in-process, run from ``cwd``; returns its exit code
    (0 when ``main`` returns) and what it wrote to stdout and stderr."""
    from absl import flags, logging

    from mojax import main

    argv = ["mojax.main", *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd, verbosity = sys.argv, os.getcwd(), logging.get_verbosity()
    sys.argv = argv  # ml_collections reads the --config.* overrides from sys.argv
    _reset_flags(flags.FLAGS)
    code = 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main.main(main.parse_flags(argv))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
        _reset_flags(flags.FLAGS)
        logging.set_verbosity(verbosity)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
