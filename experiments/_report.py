"""Aggregating a grid's ``metrics.jsonl`` rows over seeds: numbers, markdown tables and PNG plots.

``results`` everywhere is ``{method: {seed: metrics rows}}`` (``_grid.run_grid``). A *metric* is a
function ``rows -> float`` (e.g. :func:`last` of a key); tables give mean ± std over seeds (sample
std, ``ddof=1``; 0 for one seed) and every seed's value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

PAIRED_NOTE = (
    "Δ is the mean over seeds of the per-seed difference (cells of one seed share its warm start or "
    "initialisation), SE its standard error; 2 SE is a lenient screen with 3 seeds (a two-sided 95% "
    "t-test on 2 degrees of freedom needs 4.30 SE)."
)
Results = Mapping[str, Mapping[int, list[dict]]]
Metric = Callable[[list[dict]], float]


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of every row that logs ``key`` as a number."""
    pts = [(r["step"], float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
    return [s for s, _ in pts], [v for _, v in pts]


def last(key: str) -> Metric:
    """The metric "value of ``key`` at the last step that logs it" (nan if none)."""

    def f(rows):
        _, v = series(rows, key)
        return v[-1] if v else math.nan

    return f


def first(key: str) -> Metric:
    """The value of ``key`` at the first step that logs it (step 0 for ``eval/``: after SFT)."""

    def f(rows):
        _, v = series(rows, key)
        return v[0] if v else math.nan

    return f


def mean_tail(key: str, n: int) -> Metric:
    """Mean of the last ``n`` logged values of ``key`` (training-rollout keys are noisy per step)."""

    def f(rows):
        _, v = series(rows, key)
        return float(np.mean(v[-n:])) if v else math.nan

    return f


def first_step_at(key: str, threshold: float, never: float) -> Metric:
    """The first RL step (> 0) whose ``key`` is >= ``threshold``; ``never`` when none is."""

    def f(rows):
        steps, vals = series(rows, key)
        hits = [s for s, v in zip(steps, vals) if s > 0 and v >= threshold]
        return float(hits[0]) if hits else float(never)

    return f


def mean_last(keys: Sequence[str]) -> Metric:
    """The mean over ``keys`` of each one's last logged value."""

    def f(rows):
        return float(np.mean([last(k)(rows) for k in keys]))

    return f


def mean_std(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def values(results: Results, method: str, metric: Metric) -> list[float]:
    """The metric of every seed of ``method``, in seed order."""
    return [metric(results[method][s]) for s in sorted(results[method])]


def fmt(x: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def summary_table(results: Results, metrics: Mapping[str, Metric], digits: int = 3) -> str:
    """One row per method: ``mean ± std`` of each metric over seeds."""
    rows = []
    for m in results:
        cells = []
        for metric in metrics.values():
            mu, sd = mean_std(values(results, m, metric))
            cells.append(f"{fmt(mu, digits)} ± {fmt(sd, digits)}")
        rows.append([f"`{m}`", str(len(results[m])), *cells])
    return markdown_table(["method", "seeds", *metrics], rows)


def per_seed_table(results: Results, metrics: Mapping[str, Metric], digits: int = 3) -> str:
    """One row per (method, seed): every metric's value."""
    rows = []
    for m in results:
        for s in sorted(results[m]):
            rows.append(
                [f"`{m}`", str(s), *(fmt(f(results[m][s]), digits) for f in metrics.values())]
            )
    return markdown_table(["method", "seed", *metrics], rows)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(results: Results, keys: list[str], path: str, title: str, ncols: int = 3) -> str:
    """One panel per key: each method's mean over seeds (line) and min..max over seeds (band)."""
    plt = _pyplot()
    ncols = min(ncols, len(keys))
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False, layout="constrained"
    )
    for ax, key in zip(axes.ravel(), keys):
        for i, m in enumerate(results):
            curves = [series(rows, key) for rows in results[m].values()]
            curves = [c for c in curves if c[0]]
            if not curves:
                continue
            n = min(len(c[0]) for c in curves)
            xs = curves[0][0][:n]
            ys = np.asarray([c[1][:n] for c in curves])
            style = dict(color=f"C{i % 10}", linestyle=("-", "--", "-.", ":")[i // 10 % 4])
            ax.plot(xs, ys.mean(0), marker="os^Dv"[i % 5], markersize=3, label=m, **style)
            ax.fill_between(xs, ys.min(0), ys.max(0), alpha=0.12, color=style["color"])
        ax.set_title(key, fontsize="medium")
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(keys) :]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize="x-small")
    fig.suptitle(f"{title} (mean over seeds, band = min..max)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def commands_block(lines: list[str]) -> str:
    return "```bash\n" + "\n".join(lines) + "\n```"


def write_page(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip() + "\n")
    return path


def difference(a: list[float], b: list[float]) -> tuple[float, float]:
    """Paired over seeds (cell i of both methods shares seed i: the same SFT warm start or init):
    ``mean(a - b)`` and its standard error ``std(a - b, ddof=1) / sqrt(n)`` (0 for one seed). A gap
    counts as beyond seed noise here when it exceeds twice that error: a lenient screen with 3
    seeds (a two-sided 95% t-test on 2 degrees of freedom needs 4.30 SE)."""
    d = np.asarray(a, float) - np.asarray(b, float)
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
    return float(d.mean()), se


def verdict_word(diffs: list[tuple[float, float]]) -> str:
    """ "reproduced" when every gap is positive beyond 2 SE, "not reproduced" when some gap is
    negative beyond 2 SE, else "inconclusive"."""
    if diffs and all(d > 2 * se for d, se in diffs):
        return "reproduced"
    if any(d < -2 * se for d, se in diffs):
        return "not reproduced"
    return "inconclusive"


def screen_lines(names: list[str], diffs: list[tuple[float, float]], what: str) -> list[str]:
    """Which of ``names`` (one paired gap each) ``what`` exceeds by more than 2 SE and 4.30 SE."""
    out = []
    for k, label in ((2.0, "2 SE"), (4.30, "4.30 SE (a 95% t-test with 3 seeds)")):
        over = [n for n, (d, se) in zip(names, diffs) if d > k * se]
        out.append(f"- {what} by more than {label}: {', '.join(over) or 'none'}")
    return out
