"""Comparing runs: paired differences by seed and by problem, t intervals, a paired bootstrap over
problems, Holm's correction across a page's comparisons, and the verdict words.

    python -m mojax.compare --metric eval/r_tool --arm paretopo=/runs/paretopo/s* \\
        --arm grpo=/runs/grpo/s* --baseline grpo [--step last] [--direction higher]

An arm is a set of run workdirs (one per seed; the seed is read from each ``config.json``). For each
arm against the baseline:

* **by seed**: the metric at ``--step`` (``metrics.jsonl``) of each seed both arms ran, their
  differences, the mean, a t-based 95% interval and the paired t-test's p-value;
* **by problem** (when the runs wrote ``eval/<step>.jsonl``, ``mojax.rl.evaluate.write_samples``):
  each problem's mean over seeds and samples of the per-sample metric (an objective's reward, or
  ``success``), the per-problem differences, and a paired bootstrap over problems (percentile
  interval of the mean difference).

Holm's step-down correction runs over all comparisons of the call (by-seed p-values). Verdict words:
``reproduced`` only when the corrected test rejects and the difference lies in ``--direction``;
``opposite`` when it rejects the other way; ``inconclusive`` otherwise. A page states mechanism and
outcome metrics separately and calls this once per metric.

Who reads what: everything is host-side files; run it anywhere (no devices).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from mojax.jsonl import read_jsonl, read_metrics


@dataclasses.dataclass(frozen=True)
class Paired:
    """A paired comparison: ``n`` pairs, mean difference (arm − baseline), a ``level`` interval
    ``[low, high]`` and the two-sided p-value of the null "no difference"."""

    n: int
    mean: float
    low: float
    high: float
    p: float
    level: float = 0.95


def paired_t(diffs: Sequence[float], level: float = 0.95) -> Paired:
    """The paired t interval and test of the differences ``diffs`` (``n >= 2``)."""
    from scipy import stats

    d = np.asarray(diffs, np.float64)
    n = d.size
    if n < 2:
        raise ValueError(f"a paired t interval needs >= 2 pairs; got {n}")
    if np.all(d == d[0]):  # no spread: the difference is known exactly
        mean = float(d[0])
        return Paired(n, mean, mean, mean, 1.0 if mean == 0.0 else 0.0, level)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    q = float(stats.t.ppf(0.5 + level / 2, n - 1))
    p = float(2 * stats.t.sf(abs(mean / se), n - 1))
    return Paired(n, mean, mean - q * se, mean + q * se, p, level)


def paired_bootstrap(
    diffs: Sequence[float], level: float = 0.95, reps: int = 10_000, seed: int = 0
) -> Paired:
    """The percentile interval of the mean of ``diffs`` over ``reps`` resamples with replacement
    (a paired bootstrap: each resample draws whole pairs); the p-value is twice the smaller tail
    mass of the resampled means around 0."""
    d = np.asarray(diffs, np.float64)
    if d.size < 2:
        raise ValueError(f"a bootstrap needs >= 2 pairs; got {d.size}")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, (reps, d.size))].mean(axis=1)
    low, high = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    p = float(min(1.0, 2 * min((means <= 0).mean(), (means >= 0).mean())))
    return Paired(d.size, float(d.mean()), float(low), float(high), p, level)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given)."""
    p = np.asarray(pvalues, np.float64)
    m = p.size
    order = np.argsort(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def verdict(diff: float, p_adjusted: float, direction: str, alpha: float = 0.05) -> str:
    """``reproduced`` / ``opposite`` / ``inconclusive`` (see the module docstring)."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower'; got {direction!r}")
    if p_adjusted >= alpha or diff == 0:
        return "inconclusive"
    return "reproduced" if (diff > 0) == (direction == "higher") else "opposite"


# ------------------------------------------------------------------------------------ run files
def run_seed(workdir: str) -> int:
    """The seed of a run (its ``config.json``)."""
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        return int(json.load(f)["seed"])


def metric_at(workdir: str, metric: str, step: str | int = "last") -> float:
    """``metric`` at ``step`` of a run's ``metrics.jsonl`` (``"last"``: its last record that has
    it); a missing metric is a ``KeyError`` naming the run."""
    rows = [r for r in read_metrics(workdir) if metric in r]
    if step != "last":
        rows = [r for r in rows if r["step"] == int(step)]
    if not rows:
        raise KeyError(f"{workdir}: no {metric!r} at step {step}")
    return float(rows[-1][metric])


def problem_means(workdir: str, value: str, step: int) -> dict[str, float]:
    """Per problem, the mean over its samples of ``value`` (an objective's name, or ``success``)
    in ``<workdir>/eval/<step>.jsonl``."""
    rows = read_jsonl(os.path.join(workdir, "eval", f"{step}.jsonl"))
    if not rows:
        raise FileNotFoundError(f"{workdir}: no eval/{step}.jsonl")
    acc: dict[str, list[float]] = {}
    for r in rows:
        v = float(r["success"]) if value == "success" else float(r["rewards"][value])
        acc.setdefault(r["problem"], []).append(v)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def by_seed(arm: Mapping[int, float], base: Mapping[int, float]) -> list[float]:
    """The differences of the seeds both arms ran (ascending seed)."""
    seeds = sorted(set(arm) & set(base))
    if len(seeds) < 2:
        raise ValueError(f"need >= 2 seeds both arms ran; got {seeds}")
    return [arm[s] - base[s] for s in seeds]


def by_problem(
    arm: Sequence[Mapping[str, float]], base: Sequence[Mapping[str, float]]
) -> list[float]:
    """Per problem, the arm's mean over the seeds that evaluated it minus the baseline's (problems
    both arms evaluated). A task whose held-out problems depend on the seed (the calculator's ids
    carry it) pairs each problem within its seed; a fixed test file pairs the means over seeds."""

    def mean_over_runs(runs):
        keys = set().union(*(set(r) for r in runs))
        return {k: float(np.mean([r[k] for r in runs if k in r])) for k in keys}

    a, b = mean_over_runs(arm), mean_over_runs(base)
    keys = sorted(set(a) & set(b))
    return [a[k] - b[k] for k in keys]


# ------------------------------------------------------------------------------------ comparisons
def sample_value(metric: str) -> str | None:
    """The per-sample value behind an ``eval/`` metric: ``success`` for ``eval/accuracy``, the
    objective's name for ``eval/<objective>``; None for a metric with no per-sample value."""
    if metric == "eval/accuracy":
        return "success"
    name = metric.removeprefix("eval/")
    if metric.startswith("eval/") and "/" not in name and "@" not in name:
        return name
    return None


def compare(
    arms: Mapping[str, Sequence[str]],
    baseline: str,
    metric: str,
    *,
    step: str | int = "last",
    direction: str = "higher",
    alpha: float = 0.05,
    reps: int = 10_000,
) -> list[dict]:
    """One row per arm against ``baseline`` (see the module docstring), Holm-corrected together."""
    values = {
        name: {run_seed(w): metric_at(w, metric, step) for w in dirs} for name, dirs in arms.items()
    }
    rows = []
    for name in arms:
        if name == baseline:
            continue
        seed = paired_t(by_seed(values[name], values[baseline]), 1 - alpha)
        row = {"arm": name, "baseline": baseline, "metric": metric, "by_seed": seed}
        value = sample_value(metric)
        last = _last_eval_step(arms[name][0]) if step == "last" else int(step)
        if value is not None and last is not None:
            per = [[problem_means(w, value, last) for w in arms[k]] for k in (name, baseline)]
            row["by_problem"] = paired_bootstrap(by_problem(*per), 1 - alpha, reps)
        rows.append(row)
    for row, p in zip(rows, holm([r["by_seed"].p for r in rows])):
        row["p_holm"] = p
        row["verdict"] = verdict(row["by_seed"].mean, p, direction, alpha)
    return rows


def _last_eval_step(workdir: str) -> int | None:
    steps = [int(f[:-6]) for f in os.listdir(os.path.join(workdir, "eval")) if f[:-6].isdigit()]
    return max(steps) if steps else None


def table(rows: Sequence[dict]) -> str:
    """A markdown table of ``compare``'s rows."""
    head = "| arm − baseline | metric | seeds | mean diff | 95% CI (t) | p | p (Holm) | verdict |"
    head += " problems | 95% CI (bootstrap) |\n" + "|---" * 10 + "|\n"
    lines = []
    for r in rows:
        s = r["by_seed"]
        bp = r.get("by_problem")
        prob = f"{bp.n} | [{bp.low:+.4f}, {bp.high:+.4f}]" if bp else "— | —"
        lines.append(
            f"| {r['arm']} − {r['baseline']} | {r['metric']} | {s.n} | {s.mean:+.4f} | "
            f"[{s.low:+.4f}, {s.high:+.4f}] | {s.p:.3g} | {r['p_holm']:.3g} | {r['verdict']} | "
            f"{prob} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mojax.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--arm", action="append", required=True, help="NAME=GLOB of run workdirs")
    parser.add_argument("--baseline", required=True, help="the arm the others are compared with")
    parser.add_argument("--metric", action="append", required=True, help="a metrics.jsonl key")
    parser.add_argument("--step", default="last", help="the step compared (default: the last)")
    parser.add_argument("--direction", default="higher", choices=("higher", "lower"))
    parser.add_argument("--alpha", type=float, default=0.05)
    a = parser.parse_args(argv)
    arms = {}
    for spec in a.arm:
        name, sep, pattern = spec.partition("=")
        dirs = sorted(glob.glob(pattern))
        if not sep or not dirs:
            parser.error(f"--arm {spec!r}: expected NAME=GLOB matching run workdirs")
        arms[name] = dirs
    if a.baseline not in arms:
        parser.error(f"--baseline {a.baseline!r} is not an --arm")
    rows = []
    for metric in a.metric:
        rows += compare(arms, a.baseline, metric, step=a.step, direction=a.direction, alpha=a.alpha)
    corrected = holm([r["by_seed"].p for r in rows])
    for row, p in zip(rows, corrected):  # Holm over every comparison of the call
        row["p_holm"], row["verdict"] = p, verdict(row["by_seed"].mean, p, a.direction, a.alpha)
    print(table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
