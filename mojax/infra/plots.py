"""PNG plots of a run's ``metrics.jsonl`` and of several runs side by side.

``plot_run(workdir, objectives)`` writes ``<workdir>/plots/``:

* ``rewards.png``: per-objective mean reward of the training rollouts over RL steps, and (right
  panel, when logged) the held-out evaluation means ``eval/<objective>``;
* ``hypervolume.png``: ParetoPO's validation hypervolume and ``r_pareto`` (when logged);
* ``pareto_front.png``: the evaluation points ``eval/<objective>`` of every evaluated step,
  coloured by step, the non-dominated ones ringed; for M > 2 objectives a pair grid (every pair of
  objectives below the diagonal, each objective over steps on the diagonal).

``plot_comparison(runs, keys, out_path)`` draws one panel per metric key with one line per run
(method comparisons for experiments).

Every figure has a title with the run name, integer step ticks, and markers (a series of one point
still shows); lines differ in colour, marker and line style and are drawn semi-transparent, so
overlapping curves stay visible. Only process 0 writes (``jax.process_index() == 0``).
"""

from __future__ import annotations

import itertools
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
_MAX_MARKERS = 30  # at most this many markers per line (markevery)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _styles():
    """Endless line styles that differ in colour, marker and line style; each later line is drawn
    thinner with smaller (alternately hollow) markers, so a line drawn exactly over an earlier
    one leaves the earlier one visible around it."""
    for i in itertools.count():
        yield dict(
            color=f"C{i % 10}",
            marker=MARKERS[i % len(MARKERS)],
            linestyle=LINESTYLES[i % len(LINESTYLES)],
            linewidth=max(0.8, 2.6 - 0.45 * i),
            markersize=max(3.0, 8.0 - 1.3 * i),
            markerfacecolor="none" if i % 2 else f"C{i % 10}",
            markeredgewidth=1.4,
        )


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]] | None:
    """``(steps, values)`` of ``key`` over the records that log it (finite numbers only)."""
    pts = [(int(r["step"]), float(r[key])) for r in records if "step" in r and _is_num(r.get(key))]
    return ([p[0] for p in pts], [p[1] for p in pts]) if pts else None


def _line(ax, xs, ys, style, label):
    ax.plot(xs, ys, alpha=0.85, markevery=max(1, len(xs) // _MAX_MARKERS), label=label, **style)


def _integer_steps(ax, xs) -> None:
    """Integer ticks on the step axis; a single step gets one tick and a unit-wide window."""
    from matplotlib.ticker import MaxNLocator

    xs = np.asarray(xs, float)
    if xs.size and xs.max() - xs.min() < 1:
        ax.set_xlim(xs.min() - 1, xs.max() + 1)
        ax.set_xticks(sorted({int(round(x)) for x in xs}))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _decorate(ax, *, xlabel="step", ylabel=None, legend=True):
    xs = [x for line in ax.lines for x in np.asarray(line.get_xdata(), float)]
    _integer_steps(ax, xs)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", framealpha=0.8)


def _save(fig, path: pathlib.Path) -> pathlib.Path:
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _main() -> bool:
    import jax

    return jax.process_index() == 0


def plot_run(
    workdir: str | os.PathLike,
    objectives: Sequence[str],
    *,
    run_name: str | None = None,
    out_dir: str | os.PathLike | None = None,
) -> list[pathlib.Path]:
    """Writes the run's PNG plots (module docstring) from ``metrics.jsonl``; returns their paths.

    Args:
      workdir: the run directory.
      objectives: the task's objective names, in order.
      run_name: the name in the titles (default the workdir's base name).
      out_dir: where to write (default ``<workdir>/plots``).
    """
    if not _main():
        return []
    from mojax.infra.jsonl import read_metrics

    objectives = list(objectives)
    records = read_metrics(workdir)
    name = run_name or pathlib.Path(workdir).resolve().name
    out = pathlib.Path(out_dir) if out_dir is not None else pathlib.Path(workdir) / "plots"
    written = [_plot_rewards(records, objectives, name, out / "rewards.png")]
    hv = _plot_hypervolume(records, name, out / "hypervolume.png")
    if hv is not None:
        written.append(hv)
    front = plot_front(records, objectives, out / "pareto_front.png", title=name)
    if front is not None:
        written.append(front)
    return written


def _plot_rewards(records, objectives, name, path) -> pathlib.Path:
    plt = _pyplot()
    has_eval = any(series(records, f"eval/{o}") for o in objectives)
    fig, axes = plt.subplots(
        1, 2 if has_eval else 1, figsize=(11 if has_eval else 6, 4), layout="constrained"
    )
    axes = np.atleast_1d(axes)
    panels = [("reward/{}/mean", "mean reward (training rollouts)")]
    if has_eval:
        panels.append(("eval/{}", "mean reward (held-out evaluation)"))
    for ax, (pattern, ylabel) in zip(axes, panels):
        styles = _styles()
        for obj in objectives:
            s = series(records, pattern.format(obj))
            style = next(styles)
            if s:
                _line(ax, *s, style, obj)
        if not ax.lines:
            ax.text(0.5, 0.5, "not logged yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(ylabel, fontsize="medium")
        _decorate(ax, ylabel="reward")
    fig.suptitle(f"{name}: reward per objective")
    return _save(fig, path)


def _plot_hypervolume(records, name, path) -> pathlib.Path | None:
    hv, rp = series(records, "pareto/hv"), series(records, "pareto/r_pareto")
    if not (hv or rp):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    styles = _styles()
    if hv:
        _line(ax, *hv, next(styles), "hypervolume (validation archive)")
    if rp:
        _line(ax, *rp, next(styles), "r_pareto")
    _decorate(ax, ylabel="value")
    ax.set_title(f"{name}: ParetoPO hypervolume")
    return _save(fig, path)


def nondominated_mask(points: np.ndarray) -> np.ndarray:
    """Host-side mask of non-dominated rows (maximisation) for plotting a handful of points."""
    points = np.asarray(points, float)
    ge = (points[:, None, :] >= points[None, :, :]).all(-1)
    gt = (points[:, None, :] > points[None, :, :]).any(-1)
    return ~(ge & gt).any(0)


def plot_front(
    records: Sequence[Mapping[str, Any]],
    objectives: Sequence[str],
    out_path: str | os.PathLike,
    *,
    prefix: str = "eval/",
    title: str = "",
) -> pathlib.Path | None:
    """The ``<prefix><objective>`` points of every record that logs all objectives, coloured by
    step, non-dominated points (over all M objectives) ringed: a scatter for M = 2, a pair grid for
    M > 2. None when fewer than 2 objectives or no such record."""
    objectives = list(objectives)
    keys = [prefix + o for o in objectives]
    rows = [r for r in records if all(_is_num(r.get(k)) for k in keys) and "step" in r]
    if len(objectives) < 2 or not rows:
        return None
    pts = np.asarray([[r[k] for k in keys] for r in rows], float)
    steps = np.asarray([r["step"] for r in rows])
    nd = nondominated_mask(pts)
    m = len(objectives)
    lo, hi = int(steps.min()), int(steps.max())
    color = dict(cmap="viridis", s=36, alpha=0.85, vmin=lo - (lo == hi), vmax=hi)
    plt = _pyplot()
    if m == 2:
        fig, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
        grid = np.array([[None, None], [ax, None]], dtype=object)  # pair (1, 0) only
        pairs = [(1, 0)]
    else:  # column j: objective j on x; row i: objective i on y; a strip of values on the diagonal
        fig, grid = plt.subplots(
            m, m, figsize=(2.4 * m + 1, 2.2 * m), squeeze=False, layout="constrained"
        )
        pairs = [(i, j) for i in range(m) for j in range(m) if i > j]
        for i in range(m):
            ax = grid[i, i]
            ax.scatter(pts[:, i], np.zeros(len(pts)), c=steps, **color)
            ax.scatter(pts[nd, i], np.zeros(nd.sum()), facecolors="none", edgecolors="red", s=130)
            ax.set_title(objectives[i], fontsize="medium")
            ax.set_yticks([])
            ax.set_xlim(_limits(pts[:, i]))
            for j in range(i + 1, m):
                grid[i, j].axis("off")
    sc = None
    for i, j in pairs:
        ax = grid[i, j]
        sc = ax.scatter(pts[:, j], pts[:, i], c=steps, zorder=2, **color)
        ax.scatter(
            pts[nd, j],
            pts[nd, i],
            facecolors="none",
            edgecolors="red",
            s=130,
            linewidths=1.5,
            label="non-dominated",
            zorder=3,
        )
        ax.set_xlim(_limits(pts[:, j]))
        ax.set_ylim(_limits(pts[:, i]))
        ax.grid(alpha=0.3)
        if m == 2 or i == m - 1:
            ax.set_xlabel(objectives[j])
        if m == 2 or j == 0:
            ax.set_ylabel(objectives[i])
    if m > 2:
        grid[m - 1, m - 1].set_xlabel(objectives[m - 1])
    handles, labels = grid[pairs[0]].get_legend_handles_labels()
    if m == 2:
        grid[pairs[0]].legend(fontsize="small", loc="best")
    else:
        fig.legend(handles, labels, loc="upper right", fontsize="small")
    cbar = fig.colorbar(sc, ax=[a for a in grid.ravel() if a is not None], label="step", shrink=0.8)
    _integer_colorbar(cbar, steps)
    kind = "Pareto front" if m == 2 else f"Pareto front, {m} objectives pairwise"
    fig.suptitle(f"{title}: {kind} ({prefix.rstrip('/')} points)" if title else kind)
    return _save(fig, pathlib.Path(out_path))


def _integer_colorbar(cbar, steps: np.ndarray) -> None:
    """Step colour bar with integer ticks (every evaluated step when there are a few)."""
    from matplotlib.ticker import MaxNLocator

    unique = np.unique(steps)
    if len(unique) <= 8:
        cbar.set_ticks([int(s) for s in unique])
    else:
        cbar.locator = MaxNLocator(integer=True)
        cbar.update_ticks()


def _limits(values: np.ndarray, pad: float = 0.12) -> tuple[float, float]:
    """Axis limits around ``values`` with room for the marker rings (a constant gets +-0.05)."""
    lo, hi = float(np.min(values)), float(np.max(values))
    d = (hi - lo) * pad if hi > lo else 0.05
    return lo - d, hi + d


def plot_comparison(
    runs: Mapping[str, Any],
    keys: Sequence[str],
    out_path: str | os.PathLike,
    *,
    title: str = "",
    ncols: int = 3,
) -> pathlib.Path | None:
    """One panel per metric key, one line per run: a method comparison.

    Args:
      runs: ``{name: metrics rows (list of dicts with "step") or a run directory}``, in legend
        order.
      keys: metric keys (e.g. ``["eval/accuracy", "eval/tool_calls", "pareto/hv"]``); a key no run
        logs gets an empty panel saying so.
      out_path: the PNG to write.
      title: the figure title (default "method comparison").
      ncols: panels per row.

    Returns:
      ``out_path`` (None on processes other than 0).
    """
    if not _main():
        return None
    from mojax.infra.jsonl import read_metrics

    if not runs or not keys:
        raise ValueError("plot_comparison: need at least one run and one key")
    data = {}
    for name, rows in runs.items():
        is_dir = isinstance(rows, (str, os.PathLike))
        data[name] = read_metrics(rows) if is_dir else list(rows)
    keys = list(keys)
    ncols = max(1, min(int(ncols), len(keys)))
    nrows = -(-len(keys) // ncols)
    plt = _pyplot()
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.8 * ncols, 3.6 * nrows), squeeze=False, layout="constrained"
    )
    for ax, key in zip(axes.ravel(), keys):
        styles = _styles()
        for name, rows in data.items():
            style = next(styles)
            s = series(rows, key)
            if s:
                _line(ax, *s, style, name)
        if not ax.lines:
            ax.text(
                0.5, 0.5, "no run logs this key", ha="center", va="center", transform=ax.transAxes
            )
        ax.set_title(key, fontsize="medium")
        _decorate(ax, ylabel=None)
    for ax in axes.ravel()[len(keys) :]:
        ax.axis("off")
    fig.suptitle(title or "method comparison")
    return _save(fig, pathlib.Path(out_path))
