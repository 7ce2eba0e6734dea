"""Sweep driver: the cartesian product of flag values, one run (workdir) per point.

    python launch/sweep.py --config=configs/saw.py:mode=gdpo --workdir=/runs/saw_sweep \
        --sweep=config.seed=0,1,2 --sweep=config.optimizer.learning_rate=1e-6,3e-6 \
        --sweep='config.eval.ks=(1,2,4),(1,4)' [--dry] [--launcher="sbatch launch/slurm.sh"]

Values are split on the commas outside brackets and quotes, so a tuple value is written as it is on the
``mojax.main`` command line. Every point's config (the config file with the point's overrides) is
loaded and validated (``mojax.spec.validate``, without the checks that need the run's devices)
before anything is launched; one bad point stops the sweep before its first run, listing every bad
point. ``--dry`` does the same, prints the commands and writes nothing.

Each point runs ``python -m mojax.main --config=... --workdir=<root>/<name> --config.key=value ...``
sequentially, or is handed to ``--launcher``:

- a launch script (``launch/slurm.sh``, ``launch/tpu_vm.sh``: a launcher whose last word ends in
  ``.sh``) gets its own arguments ``CONFIG WORKDIR --config.key=value ...`` appended, e.g.
  ``--launcher="sbatch --nodes=4 launch/slurm.sh"``;
- any other launcher prefixes the whole python command (``--launcher=nohup``).

``--launcher_args=python|script`` overrides that choice. A point that fails (a non-zero exit of its
run or of the launcher) does not stop the others; the failures are listed at the end and the sweep
exits 1. The points and their workdirs are written to ``<root>/sweep.json``; points whose workdir holds
``done`` are skipped, so a sweep can be re-run after failures.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys

from absl import app, flags

_CONFIG = flags.DEFINE_string("config", None, "Config file (with optional :arg).", required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Root directory of the sweep.", required=True)
_SWEEP = flags.DEFINE_multi_string("sweep", [], "KEY=V1,V2,... (repeat for a product).")
_LAUNCHER = flags.DEFINE_string(
    "launcher", "", "Command that runs or submits a point, e.g. 'sbatch launch/slurm.sh'."
)
_LAUNCHER_ARGS = flags.DEFINE_enum(
    "launcher_args",
    "auto",
    ["auto", "python", "script"],
    "What the launcher gets: 'python' the whole python command, 'script' CONFIG WORKDIR FLAGS "
    "(the launch/*.sh convention); 'auto': 'script' when the launcher's last word ends in .sh.",
)
_DRY = flags.DEFINE_bool("dry", False, "Validate every point and print the commands only.")

_OPEN, _CLOSE = "([{", ")]}"


def split_values(text: str) -> list[str]:
    """``"1,(1,2),'a,b'"`` -> ``["1", "(1,2)", "'a,b'"]``: commas outside brackets and quotes.

    Raises:
      ValueError: unbalanced brackets or quotes.
    """
    out, cur, stack, quote = [], [], [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            stack.append(_CLOSE[_OPEN.index(ch)])
        elif ch in _CLOSE:
            if not stack or stack.pop() != ch:
                raise ValueError(f"unbalanced {ch!r} in {text!r}")
        elif ch == "," and not stack:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if stack or quote:
        raise ValueError(f"unclosed {(quote or stack[-1])!r} in {text!r}")
    return out + ["".join(cur)]


def points(sweeps: list[str]) -> list[dict[str, str]]:
    """The cartesian product of ``config.KEY=V1,V2`` specs as a list of {key: value} dicts."""
    axes = []
    for spec in sweeps:
        key, sep, values = spec.partition("=")
        if not sep or not key.startswith("config.") or not values:
            raise app.UsageError(f"--sweep {spec!r}: expected config.KEY=V1,V2,...")
        try:
            vals = split_values(values)
        except ValueError as e:
            raise app.UsageError(f"--sweep {spec!r}: {e}") from None
        if any(not v for v in vals):
            raise app.UsageError(f"--sweep {spec!r}: empty value")
        if any(key == a[0][0] for a in axes):
            raise app.UsageError(f"--sweep {key} is given twice")
        axes.append([(key, v) for v in vals])
    return [dict(p) for p in itertools.product(*axes)] if axes else [{}]


def point_name(point: dict[str, str]) -> str:
    """A workdir name for ``point``: ``seed=0_optimizer-learning_rate=1e-06`` ("run" if empty)."""
    parts = []
    for k, v in point.items():
        value = re.sub(r"[^A-Za-z0-9.+=-]+", "-", v).strip("-") or "_"
        parts.append(f"{k.removeprefix('config.').replace('.', '-')}={value}")
    return "_".join(parts) or "run"


def overrides(point: dict[str, str]) -> list[str]:
    return [f"--{k}={v}" for k, v in point.items()]


def load_config(config: str, flag_args: list[str]):
    """The config ``mojax.main`` would run: ``config`` (path[:arg]) with ``--config.*`` flags."""
    from ml_collections import ConfigDict, config_flags

    argv = ["mojax.main", f"--config={config}", *flag_args]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=argv)
    fv(argv)
    cfg = fv["config"].value
    if not isinstance(cfg, ConfigDict):  # config_flags defers a file's load error to first use
        cfg.to_dict()
    return cfg


def point_errors(config: str, flag_args: list[str]) -> list[str]:
    """Why the run of ``config`` + ``flag_args`` would be refused (empty if it validates).

    The checks that need the run's devices (the mesh against the device count) are left to the run.
    """
    from mojax import spec as spec_lib
    from mojax.config import ConfigError

    try:
        cfg = load_config(config, flag_args)
        spec_lib.validate(cfg, num_devices=None)
    except ConfigError as e:
        return list(e.errors)
    except KeyError as e:  # an unknown --config.* key
        name = str(e.args[0]).strip("'\"") if e.args else "?"
        pattern = rf"\.{re.escape(name)}(\.|=)"
        flag = next((a for a in flag_args if re.search(pattern, a)), "--config")
        return [f"{flag}: no such config key {name!r}"]
    except Exception as e:  # noqa: BLE001 - a bad value, file or config arg: report and go on
        return [f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else e}"]
    return []


def launch_command(config: str, workdir: str, point: dict[str, str]) -> list[str]:
    """The argv of one point: the python command, or the launcher with its arguments."""
    python = [sys.executable, "-m", "mojax.main", f"--config={config}", f"--workdir={workdir}"]
    python += overrides(point)
    launcher = shlex.split(_LAUNCHER.value)
    if not launcher:
        return python
    style = _LAUNCHER_ARGS.value
    if style == "auto":
        style = "script" if launcher[-1].endswith(".sh") else "python"
    if style == "script":
        return launcher + [config, workdir, *overrides(point)]
    return launcher + python


def plan(root: str, config: str, sweeps: list[str]) -> list[dict]:
    """One entry per point: its overrides, workdir and command (as a list and as shell text)."""
    runs, seen = [], {}
    for point in points(sweeps):
        workdir = os.path.join(root, point_name(point))
        if workdir in seen:
            raise app.UsageError(f"points {seen[workdir]} and {point} share workdir {workdir}")
        seen[workdir] = point
        argv = launch_command(config, workdir, point)
        runs.append({"point": point, "workdir": workdir, "argv": argv, "command": shlex.join(argv)})
    return runs


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from mojax.infra.workdir import DONE_FILE

    runs = plan(_WORKDIR.value, _CONFIG.value, _SWEEP.value)
    bad = {}
    for run in runs:
        errors = point_errors(_CONFIG.value, overrides(run["point"]))
        if errors:
            bad[run["workdir"]] = errors
    if bad:
        print(
            f"sweep: {len(bad)} of {len(runs)} point(s) invalid; nothing launched", file=sys.stderr
        )
        for workdir, errors in bad.items():
            print(f"  {os.path.basename(workdir)}:", file=sys.stderr)
            for line in errors:
                print(f"    {line}", file=sys.stderr)
        return 2
    if not _DRY.value:
        os.makedirs(_WORKDIR.value, exist_ok=True)
        with open(os.path.join(_WORKDIR.value, "sweep.json"), "w") as f:
            json.dump(
                [{k: r[k] for k in ("point", "workdir", "command")} for r in runs], f, indent=1
            )
    failed = []
    for run in runs:
        if os.path.exists(os.path.join(run["workdir"], DONE_FILE)):
            print(f"skip (done): {run['workdir']}", flush=True)
            continue
        print(run["command"], flush=True)
        if _DRY.value:
            continue
        rc = subprocess.run(run["argv"]).returncode
        if rc != 0:
            print(f"sweep: point failed (exit {rc}): {run['workdir']}", file=sys.stderr, flush=True)
            failed.append((run["workdir"], rc))
    if failed:
        print(f"sweep: {len(failed)} of {len(runs)} point(s) failed:", file=sys.stderr)
        for workdir, rc in failed:
            print(f"  exit {rc}: {workdir}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    app.run(main)
