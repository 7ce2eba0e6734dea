"""Shared benchmark harness: each side in its own process, sides alternating, >= 3 rounds.

Every script in ``benchmarks/`` uses this module so that all of them measure the same way:

* ``check_load`` refuses to start when the 1-minute load average exceeds the number of cores (other
  processes would be timed too); ``--force`` runs anyway and prints a loud warning in the output.
* ``alternate`` runs each side as a fresh worker process (``<script> --worker <side> ...``), in the
  order A B, B A, A B, ... for ``--rounds`` rounds (at least 3), so slow drift hits both sides alike
  and no thread pool or allocator of one framework is alive while the other is timed.
* a worker times its callables in-process (``time_calls``: warm-up first, then the min of a few
  calls) and prints one ``RESULT_JSON {...}`` line (``emit``) that the driver parses.
* ``report`` prints min / median / max over rounds of each side and of the per-round ratio
  ``anchor / subject`` (> 1: the subject is faster).

Usage in a script::

    ap = argparse.ArgumentParser(); _harness.add_args(ap); args = ap.parse_args()
    if args.worker: ... _harness.emit({"fwd": secs}); return
    _harness.check_load(args.force)
    runs = _harness.alternate(__file__, {"torch": [...], "mojax": [...]}, args.rounds)
    _harness.report("fwd", runs, "fwd", anchor="torch", subjects=["mojax"])
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_ROUNDS = 3
_TAG = "RESULT_JSON "


def add_args(parser, rounds: int = MIN_ROUNDS) -> None:
    """Adds ``--rounds``, ``--force`` and the hidden ``--worker`` to an argparse parser."""
    parser.add_argument(
        "--rounds", type=int, default=rounds, help=f"alternating rounds (>= {MIN_ROUNDS})"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even when the 1-minute load average exceeds the core count (numbers unreliable)",
    )
    parser.add_argument("--worker", default=None, help="internal: run one side in this process")


def cpu_model() -> str:
    """The CPU's model name and widest x86 vector extension from ``/proc/cpuinfo`` ("" elsewhere).

    Two VMs of the same "2-core x86_64" kind can differ here (e.g. AVX2 vs AVX-512), which moves
    XLA's and torch's kernels by different amounts, so every log names it.
    """
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return ""
    name, flags = "", []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not name:
            name = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = value.split()
    vec = next((v for v in ("avx512f", "avx2", "avx") if v in flags), "")
    return f"{name} ({vec})" if vec else name


def machine_info() -> str:
    """One line: host, CPU, cores, load, Python and the date (UTC), for the table headers."""
    load1 = os.getloadavg()[0]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = cpu_model()
    return (
        f"machine: {platform.node()} {platform.machine()} {platform.processor() or ''}".rstrip()
        + (f", {cpu}" if cpu else "")
        + f", {os.cpu_count()} cores, load1 {load1:.2f}, python {platform.python_version()}, {now}"
    )


def check_load(force: bool, rounds: int | None = None) -> None:
    """Exits (status 2) when the 1-minute load average exceeds the core count, unless ``force``.

    Also rejects fewer than ``MIN_ROUNDS`` rounds unless ``force``.
    """
    load1, cores = os.getloadavg()[0], os.cpu_count() or 1
    problems = []
    if load1 > cores:
        problems.append(
            f"1-minute load average {load1:.2f} exceeds the {cores} cores: other processes are "
            "competing for the CPU and the timings below would not be reproducible"
        )
    if rounds is not None and rounds < MIN_ROUNDS:
        problems.append(f"--rounds={rounds} is below the minimum of {MIN_ROUNDS}")
    if not problems:
        return
    bar = "!" * 100
    text = "\n".join([bar, *("WARNING: " + p for p in problems), bar])
    if not force:
        sys.exit(
            text + "\nRefusing to run; pass --force to run anyway (numbers are then not valid)."
        )
    print(text + "\n--force given: running anyway. DO NOT QUOTE THESE NUMBERS.", flush=True)
    print(text, file=sys.stderr, flush=True)


def time_calls(fn: Callable[[], object], iters: int, warmup: int = 1) -> float:
    """Min wall seconds of ``fn()`` over ``iters`` calls after ``warmup`` untimed calls.

    ``fn`` must block until its work is done (``jax.block_until_ready``, ``torch.cuda.synchronize``).
    The min is the in-process estimate; the spread across processes is what ``report`` shows.
    """
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(max(1, iters)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def emit(result: Mapping) -> None:
    """Prints the worker's result line (parsed by ``run_worker``)."""
    print(_TAG + json.dumps(dict(result)), flush=True)


def worker_env(extra: Mapping[str, str] | None = None) -> dict:
    """The parent's environment with the repository on ``PYTHONPATH`` and ``extra`` on top."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_worker(
    script: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    python: str | None = None,
) -> dict:
    """Runs ``python script *argv`` in a fresh process and returns its ``RESULT_JSON`` dict.

    ``python``: the interpreter (default this one's), e.g. another virtualenv's for a peer framework.
    """
    cmd = [python or sys.executable, script, *argv]
    proc = subprocess.run(cmd, env=env or worker_env(), capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_TAG)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise RuntimeError(f"worker failed (exit {proc.returncode}): {' '.join(cmd)}")
    return json.loads(lines[-1][len(_TAG) :])


def alternate(
    script: str,
    sides: Mapping[str, Sequence[str]],
    rounds: int,
    env: Mapping[str, str] | None = None,
    envs: Mapping[str, Mapping[str, str]] | None = None,
    pythons: Mapping[str, str] | None = None,
) -> dict[str, list[dict]]:
    """Runs every side once per round, each in a fresh process, alternating the order.

    Args:
      script: the benchmark script (re-invoked as the worker).
      sides: side name -> worker argv (``--worker <name>`` is added in front).
      rounds: number of rounds; round r runs the sides forwards if r is even, backwards if odd.
      env: environment for every worker (default ``worker_env()``); ``envs``: per-side extras.
      pythons: per-side interpreters (default this one's), e.g. each framework's virtualenv.

    Returns:
      side -> list of per-round result dicts.
    """
    names = list(sides)
    out: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            side_env = dict(env or worker_env())
            side_env.update((envs or {}).get(name, {}))
            t0 = time.perf_counter()
            python = (pythons or {}).get(name)
            res = run_worker(script, ["--worker", name, *sides[name]], side_env, python)
            out[name].append(res)
            print(f"  round {r + 1}/{rounds} {name:<28s} done in {time.perf_counter() - t0:6.1f}s "
                  f"{json.dumps(res)[:160]}", flush=True)  # fmt: skip
    return out


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def report(
    title: str,
    runs: Mapping[str, list[dict]],
    metric: str,
    anchor: str,
    subjects: Sequence[str],
    scale: float = 1e3,
    unit: str = "ms",
    target: float | None = None,
) -> dict[str, tuple[float, float, float]]:
    """Prints min / median / max of ``metric`` (seconds) per side and of ``anchor / subject``.

    The ratio is taken per round (round r of the anchor over round r of the subject), so a slow
    round of the machine affects both terms of that ratio. Returns subject -> ratio spread.
    """
    print(f"\n{title}  [{metric}, {len(runs[anchor])} rounds, separate processes]")
    print(f"  {'side':<30s}{'min':>11s}{'median':>11s}{'max':>11s}  ({unit})")
    for name, res in runs.items():
        lo, med, hi = spread([x[metric] * scale for x in res])
        print(f"  {name:<30s}{lo:>11.3f}{med:>11.3f}{hi:>11.3f}")
    ratios = {}
    for name in subjects:
        rat = [a[metric] / s[metric] for a, s in zip(runs[anchor], runs[name])]
        ratios[name] = lo, med, hi = spread(rat)
        verdict = ""
        if target is not None:
            verdict = f"  target >= {target:g}x: {'MET' if med >= target else 'MISSED'} (median)"
        print(
            f"  ratio {anchor} / {name}: min {lo:.2f}x  median {med:.2f}x  max {hi:.2f}x{verdict}"
        )
    return ratios
