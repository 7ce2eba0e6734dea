"""Running a (method x seed) grid through the project's own CLI, one workdir per cell.

Layout under ``root``::

    root/sft/s<seed>/            the shared SFT warm start of that seed (configs/sft.py)
    root/<method>/s<seed>/       one RL run: metrics.jsonl, run.log, cmd.txt, commit.txt, done
    root/jax_cache/              the XLA compilation cache the cells share

Every cell is ``python -m mojax.main --config=... --workdir=root/<method>/s<seed> --config.seed=<seed>
...``, run under ``nice -n 10``, one cell at a time. A cell whose workdir holds ``done`` is skipped,
so a grid resumes where it stopped. Before a cell starts, the SFT warm start of its seed
(``checkpoints_sft``, trained once by a ``configs/sft.py`` run with the same SFT keys) is copied into
its workdir and its fingerprint written to ``warm_start.txt`` (``record_warm_start``); ``mojax.rl.warm_start.sft`` then restores it instead of training, which the cell's
log (no ``SFT i/N loss`` line) and missing ``sft_metrics.jsonl`` show (checked after the run). The
self-built tokenizer is rebuilt by each cell (deterministic in the config and seed). Because a workdir that already holds a
checkpoint and no ``config.json`` is refused by ``mojax.infra.workdir``, cells run with
``--config.resume=force``: in an empty workdir (a rerun of the printed command elsewhere) that
flag changes nothing and the cell trains its own, identical, warm start.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from mojax.infra.jsonl import read_metrics
from mojax.spec import input_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Method:
    """A grid row: a config (``configs/x.py[:arg]``) and its ``--config.key=value`` overrides."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    warm_start: bool = True  # shares the seed's SFT checkpoint (calculator / maze configs)


@dataclasses.dataclass(frozen=True)
class Grid:
    """The settings every cell of a claim shares (added to each cell's command)."""

    root: str
    seeds: tuple[int, ...]
    # keys the SFT run and every cell share: the SFT schedule and whatever shapes the data and the
    # self-built tokenizer (trained on every split's prompts, e.g. --config.task.num_eval=16)
    common: tuple[str, ...] = ()
    rl: tuple[str, ...] = ()  # keys of the RL cells only (e.g. --config.steps=40)
    sft_config: str = "configs/sft.py"
    sft: tuple[str, ...] = ()  # keys of the SFT runs only (e.g. --config.steps=0)


def command(config: str, workdir: str, seed: int, flags: tuple[str, ...]) -> list[str]:
    """The ``python -m mojax.main`` argv of one run."""
    return [
        "python",
        "-m",
        "mojax.main",
        f"--config={config}",
        f"--workdir={workdir}",
        f"--config.seed={seed}",
        *flags,
    ]


def cell_dir(grid: Grid, method: str, seed: int) -> str:
    return os.path.join(grid.root, method, f"s{seed}")


def cell_command(grid: Grid, m: Method, seed: int) -> list[str]:
    flags = (*grid.common, *grid.rl, *m.overrides)
    if m.warm_start:
        flags += ("--config.resume=force",)
    return command(m.config, cell_dir(grid, m.name, seed), seed, flags)


def sft_command(grid: Grid, seed: int) -> list[str]:
    return command(grid.sft_config, cell_dir(grid, "sft", seed), seed, (*grid.common, *grid.sft))


def shell(argv: list[str]) -> str:
    """The argv as one copy-pasteable shell line."""
    return " ".join(shlex.quote(a) for a in argv)


def _run(argv: list[str], workdir: str) -> float:
    """Runs one mojax command (nice'd) with its output in ``<workdir>/run.log``; seconds taken."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "cmd.txt"), "w") as f:
        f.write(shell(argv) + "\n")
    with open(os.path.join(workdir, "commit.txt"), "w") as f:  # the code the cell ran
        f.write(code_commit() + "\n")
    # one persistent XLA compilation cache for the grid: cells of the same shapes skip recompiling
    # (the same executables, so the same numbers as an uncached run of the printed command)
    cache = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(workdir))), "jax_cache")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("JAX_COMPILATION_CACHE_DIR", cache)
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # the many small programs too
    python = [sys.executable, *argv[1:]]
    t0 = time.time()
    with open(os.path.join(workdir, "run.log"), "a") as log:
        rc = subprocess.call(
            ["nice", "-n", "10", *python], cwd=REPO, stdout=log, stderr=log, env=env
        )
    if rc != 0:
        tail = open(os.path.join(workdir, "run.log")).read()[-3000:]
        raise RuntimeError(f"run failed (exit {rc}): {shell(argv)}\n{tail}")
    return time.time() - t0


def _git(*args: str, repo: str = REPO) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def code_commit(repo: str = REPO) -> str:
    """The commit a cell runs, ``+dirty`` when a file outside ``docs/results`` differs from it
    (the archive and pages the grid itself writes there are not the code)."""
    dirty = _git("status", "--porcelain", "--", ".", ":(exclude)docs/results", repo=repo)
    return _git("rev-parse", "HEAD", repo=repo) + ("+dirty" if dirty else "")


def _done(workdir: str) -> bool:
    return os.path.isfile(os.path.join(workdir, "done"))


def ensure_sft(grid: Grid, seed: int) -> str:
    """The seed's shared SFT workdir, trained on first use."""
    wd = cell_dir(grid, "sft", seed)
    if not _done(wd):
        took = _run(sft_command(grid, seed), wd)
        print(f"  sft s{seed}: {took:.0f}s", flush=True)
    return wd


def run_cell(grid: Grid, m: Method, seed: int) -> list[dict]:
    """Runs one cell unless done; returns its metrics rows."""
    wd = cell_dir(grid, m.name, seed)
    if not _done(wd):
        if m.warm_start:
            sft = os.path.join(ensure_sft(grid, seed), "checkpoints_sft")
            dst = os.path.join(wd, "checkpoints_sft")
            if not os.path.isdir(dst):
                shutil.copytree(sft, dst)
            record_warm_start(wd)
        took = _run(cell_command(grid, m, seed), wd)
        print(f"  {m.name} s{seed}: {took:.0f}s", flush=True)
        if m.warm_start and trained_sft(wd):
            raise RuntimeError(f"{wd} trained its own SFT instead of restoring the shared one")
    return read_metrics(wd)


WARM_START_FILE = "warm_start.txt"  # the fingerprint of the warm start a cell restores


def record_warm_start(workdir: str) -> str:
    """Writes the fingerprint of ``<workdir>/checkpoints_sft`` (``input_files.fingerprint``: its
    files' paths, sizes and contents) to ``<workdir>/warm_start.txt`` and returns it. Copies of one
    warm start have one fingerprint; a warm start trained again has another (its checkpoint's
    file names and timestamps differ), so equal fingerprints mean the same warm start."""
    digest = input_files.fingerprint(os.path.join(workdir, "checkpoints_sft"))
    with open(os.path.join(workdir, WARM_START_FILE), "w") as f:
        f.write(digest + "\n")
    return digest


def trained_sft(workdir: str) -> bool:
    """Whether the run in ``workdir`` trained an SFT warm start (its ``SFT i/N loss`` progress
    lines and ``sft_metrics.jsonl``) rather than restoring one."""
    log = os.path.join(workdir, "run.log")
    text = open(log, encoding="utf-8").read() if os.path.isfile(log) else ""
    progress = re.search(r"^SFT \d+/\d+ loss", text, flags=re.M)
    return bool(progress) or os.path.exists(os.path.join(workdir, "sft_metrics.jsonl"))


def run_grid(grid: Grid, methods: list[Method]) -> dict[str, dict[int, list[dict]]]:
    """Every cell, ``{method: {seed: rows}}``: the seeds' SFT warm starts first, then method-major
    in the given order (an interrupted grid has every seed of its first methods)."""
    if any(m.warm_start for m in methods):
        for seed in grid.seeds:
            ensure_sft(grid, seed)
    return {m.name: {seed: run_cell(grid, m, seed) for seed in grid.seeds} for m in methods}


def finished(grid: Grid, methods: list[Method]) -> tuple[dict, list[Method]]:
    """Without running anything: ``({method: {seed: rows}}`` of the methods whose every seed is
    done, ``[methods with a cell not done]``) (``--report_only``)."""
    done, missing = {}, []
    for m in methods:
        if all(_done(cell_dir(grid, m.name, s)) for s in grid.seeds):
            done[m.name] = {s: read_metrics(cell_dir(grid, m.name, s)) for s in grid.seeds}
        else:
            missing.append(m)
    return done, missing


def run_or_collect(grid: Grid, methods: list[Method], report_only: bool):
    """``run_grid`` (missing = []), or ``finished`` with ``report_only``."""
    return finished(grid, methods) if report_only else (run_grid(grid, methods), [])


def run_claim(claim: str, grid: Grid, methods: list[Method], report_only: bool):
    """Runs (or, with ``report_only``, collects) a claim's grid.

    Returns:
      ``(methods with results, results, missing methods)``.
    """
    print(
        f"{claim}: {len(methods)} methods x {len(grid.seeds)} seeds under {grid.root}", flush=True
    )
    results, missing = run_or_collect(grid, methods, report_only)
    return [m for m in methods if m.name in results], results, missing


def not_run_text(title: str, not_run: str, grid: Grid, missing: list[Method]) -> str:
    """The page of a claim none of whose cells has finished: what is needed, and the commands."""
    return f"{title}\n\n## Verdict: not run yet\n\n{not_run}\n\n" + missing_block(grid, missing)


def missing_block(grid: Grid, missing: list[Method]) -> str:
    """A results-page section naming the methods not run and the commands that run them."""
    if not missing:
        return ""
    cmds = [shell(cell_command(grid, m, s)) for m in missing for s in grid.seeds]
    names = ", ".join(f"`{m.name}`" for m in missing)
    return (
        f"## Not run\n\n{names}: not run in this session's time (every seed is needed for a row). "
        f"Their cells{' (after the SFT commands above)' if missing[0].warm_start else ''}:"
        "\n\n```bash\n" + "\n".join(cmds) + "\n```\n"
    )


def select(methods: list[Method], names: list[str] | None) -> list[Method]:
    """The methods named in ``names`` (all when empty), in the given order; unknown names fail."""
    if not names:
        return methods
    by_name = {m.name: m for m in methods}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {list(by_name)}")
    return [by_name[n] for n in names]
