"""A claim page's plots, from its archived cells only: learning curves per arm with a 95% t interval
over seeds, and, for a claim with two objectives, the held-out Pareto front per arm.

``results`` is ``{arm: {seed: metrics rows}}`` (``_claims.results_text``). Host-side only: the page
is written by the one process that runs the claim script; nothing here is distributed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as sps

from experiments import _report

Results = Mapping[str, Mapping[int, list[dict]]]


def t_band(ys: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, low, high)`` over seeds (axis 0) of ``ys [seeds, points]``: the mean ± the two-sided
    ``level`` t interval half-width ``t_{(1+level)/2, n-1} · sd / sqrt(n)`` (sample sd); with one
    seed the band is the mean itself."""
    ys = np.asarray(ys, float)
    mean = ys.mean(0)
    n = ys.shape[0]
    if n < 2:
        return mean, mean, mean
    half = sps.t.ppf((1 + level) / 2, n - 1) * ys.std(0, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def curves(results: Results, key: str) -> dict[str, tuple[list[int], np.ndarray]]:
    """Per arm, ``(steps, values [seeds, steps])`` of ``key`` over the steps every seed logs."""
    out = {}
    for arm, seeds in results.items():
        per = [_report.series(rows, key) for _, rows in sorted(seeds.items())]
        per = [dict(zip(*c)) for c in per if c[0]]
        if not per:
            continue
        steps = sorted(set.intersection(*(set(c) for c in per)))
        out[arm] = (steps, np.asarray([[c[s] for s in steps] for c in per]))
    return out


def front_points(results: Results, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Per arm, each seed's last logged ``(keys[0], keys[1])`` point, ``[seeds, 2]`` in seed order
    (a seed missing either key is left out)."""
    out = {}
    for arm, seeds in results.items():
        pts = [[_report.last(k)(rows) for k in keys] for _, rows in sorted(seeds.items())]
        pts = [p for p in pts if not any(math.isnan(v) for v in p)]
        if pts:
            out[arm] = np.asarray(pts, float)
    return out


def arm_styles(results: Results) -> dict[str, dict]:
    """Each arm's line style and marker, by its place among the claim's arms: the same in every
    panel, also where an arm does not log a panel's key (e.g. a method's own metric)."""
    return {
        arm: dict(
            color=f"C{i % 10}", linestyle=("-", "--", "-.", ":")[i // 10 % 4], marker="os^Dv"[i % 5]
        )
        for i, arm in enumerate(results)
    }


def plot_curves(results: Results, keys: Sequence[str], path: str, title: str) -> str:
    """One panel per key: each arm's mean over seeds (line) and its 95% t interval (band)."""
    plt = _report._pyplot()
    return _save(plt, curves_figure(plt, results, keys, title), path)


def curves_figure(plt, results: Results, keys: Sequence[str], title: str):
    """``plot_curves``'s figure (not saved)."""
    ncols = min(3, len(keys))
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False, layout="constrained"
    )
    styles = arm_styles(results)
    for ax, key in zip(axes.ravel(), keys):
        for arm, (steps, ys) in curves(results, key).items():
            mean, low, high = t_band(ys)
            ax.plot(steps, mean, markersize=3, label=arm, **styles[arm])
            ax.fill_between(steps, low, high, alpha=0.12, color=styles[arm]["color"])
        ax.set_title(key, fontsize="medium")
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(keys) :]:
        ax.axis("off")
    # every arm in the legend, also one the first panel's key is not logged by
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], markersize=3, label=a, **st) for a, st in styles.items()]
    axes.ravel()[0].legend(handles=handles, fontsize="x-small")
    fig.suptitle(f"{title} (line: mean over seeds; band: 95% t interval of the mean)")
    return fig


def plot_front(results: Results, keys: Sequence[str], path: str, title: str) -> str:
    """Each seed's final held-out ``keys`` point per arm (small markers) and the arm's mean (large,
    outlined)."""
    plt = _report._pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.6), layout="constrained")
    styles = arm_styles(results)
    for arm, pts in front_points(results, keys).items():
        color, marker = styles[arm]["color"], styles[arm]["marker"]
        ax.scatter(pts[:, 0], pts[:, 1], s=14, alpha=0.5, color=color, marker=marker)
        m = pts.mean(0)
        ax.scatter([m[0]], [m[1]], s=90, color=color, marker=marker, edgecolors="k", label=arm)
    ax.set_xlabel(f"{keys[0]} (final)")
    ax.set_ylabel(f"{keys[1]} (final)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    ax.set_title(
        f"{title}\nsmall: each seed's final point; large: the arm's mean", fontsize="small"
    )
    return _save(plt, fig, path)


def _save(plt, fig, path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figures_text(results: Results, out: str, name: str, keys, front) -> str:
    """Writes ``<out>/<name>/curves.png`` (and ``front.png`` when ``front`` names two keys) and
    returns the page's "Plots" section linking them (relative to the page in ``out``)."""
    keys = [k for k in keys if any(curves({a: s}, k) for a, s in results.items())]
    lines = []
    if keys:
        plot_curves(results, keys, os.path.join(out, name, "curves.png"), name)
        lines.append(f"![learning curves per arm]({name}/curves.png)")
    if front and front_points(results, front):
        plot_front(results, front, os.path.join(out, name, "front.png"), name)
        lines.append(f"![held-out Pareto front per arm]({name}/front.png)")
    if not lines:
        return ""
    head = (
        "## Plots\n\nGenerated from the archived cells. Learning curves: each arm's mean over seeds "
        "at every logged step, the band its 95% t interval (mean ± t·sd/√n over seeds)."
    )
    if len(lines) > 1:
        head += " Front: each seed's final held-out point per arm and the arm's mean."
    return head + "\n\n" + "\n\n".join(lines) + "\n"
