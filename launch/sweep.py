"""Sweep driver: the cartesian product of flag values, one run (workdir) per point.

    python launch/sweep.py --config=configs/saw.py:mode=gdpo --workdir=/runs/saw_sweep \
        --sweep=config.seed=0,1,2 --sweep=config.optim.lr=1e-6,3e-6 [--dry] [--launcher="sbatch ..."]

Each point runs ``python -m mojax.main --config=... --workdir=<root>/<name> --config.key=value ...``
(or ``<launcher> <that command>``), sequentially unless a launcher submits jobs. The list of points and
their workdirs is written to ``<root>/sweep.json``; points whose workdir holds ``done`` are skipped, so a
sweep can be re-run after failures.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys

from absl import app, flags

_CONFIG = flags.DEFINE_string("config", None, "Config file (with optional :arg).", required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Root directory of the sweep.", required=True)
_SWEEP = flags.DEFINE_multi_string("sweep", [], "KEY=V1,V2,... (repeat for a product).")
_LAUNCHER = flags.DEFINE_string("launcher", "", "Prefix command that submits a run, e.g. 'sbatch'.")
_DRY = flags.DEFINE_bool("dry", False, "Print the commands only.")


def points(sweeps: list[str]) -> list[dict[str, str]]:
    """The cartesian product of ``KEY=V1,V2`` specs as a list of {key: value} dicts."""
    axes = []
    for spec in sweeps:
        key, sep, values = spec.partition("=")
        if not sep or not key.startswith("config.") or not values:
            raise app.UsageError(f"--sweep {spec!r}: expected config.KEY=V1,V2,...")
        axes.append([(key, v) for v in values.split(",")])
    return [dict(p) for p in itertools.product(*axes)] if axes else [{}]


def main(argv):
    del argv
    os.makedirs(_WORKDIR.value, exist_ok=True)
    runs = []
    for point in points(_SWEEP.value):
        name = "_".join(
            f"{k.removeprefix('config.').replace('.', '-')}={v}" for k, v in point.items()
        )
        workdir = os.path.join(_WORKDIR.value, name or "run")
        cmd = [
            sys.executable,
            "-m",
            "mojax.main",
            f"--config={_CONFIG.value}",
            f"--workdir={workdir}",
        ]
        cmd += [f"--{k}={v}" for k, v in point.items()]
        runs.append({"point": point, "workdir": workdir, "command": shlex.join(cmd)})
    with open(os.path.join(_WORKDIR.value, "sweep.json"), "w") as f:
        json.dump(runs, f, indent=1)
    for run in runs:
        if os.path.exists(os.path.join(run["workdir"], "done")):
            print(f"skip (done): {run['workdir']}")
            continue
        command = f"{_LAUNCHER.value} {run['command']}".strip()
        print(command, flush=True)
        if not _DRY.value:
            subprocess.run(command, shell=True, check=not _LAUNCHER.value)


if __name__ == "__main__":
    app.run(main)
