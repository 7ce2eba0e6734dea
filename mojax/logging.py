"""Run outputs: ``metrics.jsonl``, TensorBoard event files, transcripts and PNG plots.

``metrics.jsonl`` holds one JSON object per logged step (public keys in design.md: ``step``,
``reward/<objective>/mean``, ``reward/scalar/mean``, ``loss``, ``time/step_s``, ``eval/...``). On resume the
writer truncates lines of steps after the restored checkpoint, so a killed-and-resumed run leaves the same
file as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

METRICS_FILE = "metrics.jsonl"
TRANSCRIPTS_FILE = "transcripts.jsonl"


def _to_json_scalar(value: Any) -> Any:
    """Python scalar for JSON (numpy/jax scalars converted; non-finite floats kept as strings)."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(np.asarray(value))
    if math.isfinite(value):
        return value
    return str(value)  # "nan" / "inf": JSON has no literal for them


class MetricsWriter:
    """Appends step metrics to ``<workdir>/metrics.jsonl`` and TensorBoard event files.

    Args:
      workdir: the run directory (created if needed).
      resume_step: when resuming from a checkpoint at this step, lines with a larger ``step`` (written
        after that checkpoint by the interrupted run) are dropped first.
      tensorboard: also write TensorBoard event files under ``<workdir>/tensorboard``.
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        resume_step: int | None = None,
        tensorboard: bool = True,
        filename: str = METRICS_FILE,
    ):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / filename
        self._truncate_after(resume_step)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.workdir / "tensorboard"), flush_secs=10)

    def _truncate_after(self, resume_step: int | None) -> None:
        if not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and resume_step is not None and _line_step(line) <= resume_step
        ]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.path)

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Writes one step's scalar metrics (a JSON line and TensorBoard scalars)."""
        record = {"step": int(step)}
        record.update({k: _to_json_scalar(v) for k, v in sorted(metrics.items()) if k != "step"})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if (
                    key != "step"
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                ):
                    self._tb.add_scalar(key, value, global_step=int(step))

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _line_step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62  # an unreadable (e.g. half-written) line is dropped on resume


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of ``<workdir>/metrics.jsonl`` (skipping unreadable lines)."""
    path = pathlib.Path(workdir) / METRICS_FILE
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def write_transcripts(
    workdir: str | os.PathLike, step: int, rows: Iterable[Mapping[str, Any]]
) -> None:
    """Appends sampled transcripts (prompt, response, rewards, ...) of one step to transcripts.jsonl."""
    path = pathlib.Path(workdir) / TRANSCRIPTS_FILE
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"step": int(step), **row}, default=_to_json_scalar) + "\n")


def format_progress(step: int, total: int, metrics: Mapping[str, Any], keys: Iterable[str]) -> str:
    """One progress line: ``[ 12/40 ███░░░ ] loss=0.12 reward/scalar/mean=0.53 ...``."""
    width = 20
    filled = int(width * step / max(total, 1))
    bar = "█" * filled + "░" * (width - filled)
    parts = []
    for key in keys:
        if key in metrics:
            value = _to_json_scalar(metrics[key])
            parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return f"[{step:>{len(str(total))}}/{total} {bar}] " + " ".join(parts)


def plot_run(workdir: str | os.PathLike, objectives: Iterable[str]) -> list[pathlib.Path]:
    """Writes the run's PNG plots from metrics.jsonl and returns their paths.

    * ``plots/rewards.png``: per-objective mean reward over training steps.
    * ``plots/hypervolume.png``: ParetoPO's validation hypervolume and r_pareto over steps (if logged).
    * ``plots/pareto_front.png``: evaluation points (first two objectives) of every evaluated
      checkpoint, with the non-dominated ones highlighted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objectives = list(objectives)
    records = read_metrics(workdir)
    out_dir = pathlib.Path(workdir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def series(key):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        return ([p[0] for p in pts], [p[1] for p in pts]) if pts else None

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in objectives:
        s = series(f"reward/{name}/mean")
        if s:
            ax.plot(*s, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward (train rollouts)")
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(_save(fig, out_dir / "rewards.png"))

    hv, rp = series("pareto/hv"), series("pareto/r_pareto")
    if hv or rp:
        fig, ax = plt.subplots(figsize=(6, 4))
        if hv:
            ax.plot(*hv, label="hypervolume (validation archive)")
        if rp:
            ax.plot(*rp, label="r_pareto")
        ax.set_xlabel("step")
        ax.legend()
        ax.grid(alpha=0.3)
        written.append(_save(fig, out_dir / "hypervolume.png"))

    if len(objectives) >= 2:
        kx, ky = (f"eval/{objectives[0]}", f"eval/{objectives[1]}")
        pts = [(r["step"], r[kx], r[ky]) for r in records if kx in r and ky in r]
        pts = [p for p in pts if all(isinstance(v, (int, float)) for v in p)]
        if pts:
            arr = np.asarray([p[1:] for p in pts], dtype=float)
            nd = _nondominated_mask(arr)
            fig, ax = plt.subplots(figsize=(5, 5))
            sc = ax.scatter(arr[:, 0], arr[:, 1], c=[p[0] for p in pts], cmap="viridis")
            ax.scatter(
                arr[nd, 0],
                arr[nd, 1],
                facecolors="none",
                edgecolors="red",
                s=120,
                label="non-dominated",
            )
            fig.colorbar(sc, ax=ax, label="step")
            ax.set_xlabel(objectives[0])
            ax.set_ylabel(objectives[1])
            ax.legend()
            ax.grid(alpha=0.3)
            written.append(_save(fig, out_dir / "pareto_front.png"))
    return written


def _nondominated_mask(points: np.ndarray) -> np.ndarray:
    """Host-side mask of non-dominated rows (maximisation) for plotting a handful of points."""
    ge = (points[:, None, :] >= points[None, :, :]).all(-1)
    gt = (points[:, None, :] > points[None, :, :]).any(-1)
    dominated = (ge & gt).any(0)
    return ~dominated


def _save(fig, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
