"""Comparing runs: paired differences by seed and by problem, t intervals, a two-stage bootstrap
(seeds, then problems), Holm's correction across a call's comparisons, and the verdict words.

    python -m mojax.compare --metric eval/r_tool --metric eval/calls --arm paretopo=/runs/paretopo/s* \\
        --arm grpo=/runs/grpo/s* --baseline grpo [--step last] \\
        [--direction higher | --direction eval/r_tool=higher,eval/calls=lower]

An arm is a set of run workdirs (one per seed; the seed is read from each ``config.json``). For each
arm against the baseline and each metric:

* **by seed**: the metric at ``--step`` (``metrics.jsonl``) of each seed both arms ran, their
  differences, the mean, the paired t test (``mojax.stats.paired_t``; all differences equal: the
  exact sign-flip test) and its interval at the Holm level of its rank;
* **by problem** (when the runs wrote ``eval/<step>.jsonl``, ``mojax.rl.evaluate.write_samples``):
  per seed both arms ran, each problem's mean over samples of the per-sample metric (an objective's
  reward, or ``success``) and its difference, and a two-stage bootstrap (seeds with replacement,
  then problems within each drawn seed; ``mojax.stats.two_stage_bootstrap``) of the mean
  difference: reported, not used for the verdict.

``--direction`` is one word for every metric, or ``METRIC=higher|lower`` entries (comma-separated;
a bare word among them is the default for the metrics not named; with no bare word every metric
must be named). Holm's step-down correction runs over all comparisons of the call
(``mojax.stats.holm_family``: a comparison whose differences are all 0 is left out, a duplicate
counted once, with a warning). Verdict words: ``reproduced`` only when the corrected test rejects
and the difference lies in the metric's direction; ``opposite`` when it rejects the other way;
``inconclusive`` otherwise; ``identical (not tested)``.

Who reads what: everything is host-side files; run it anywhere (no devices).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from mojax.infra.jsonl import read_jsonl, read_metrics
from mojax.stats import (
    Hypothesis,
    Paired,
    holm,
    holm_family,
    paired_bootstrap,
    paired_t,
    two_stage_bootstrap,
    verdict,
)

__all__ = ["Paired", "holm", "paired_bootstrap", "paired_t", "verdict"]  # kept names


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


def by_problem_per_seed(
    arm: Mapping[int, Mapping[str, float]], base: Mapping[int, Mapping[str, float]]
) -> list[list[float]]:
    """Per seed both arms ran (ascending), the differences of the problems both evaluated at that
    seed (ascending problem id): the input of the two-stage bootstrap. A seed with no common
    problem is a ``ValueError`` naming it."""
    out = []
    for s in sorted(set(arm) & set(base)):
        keys = sorted(set(arm[s]) & set(base[s]))
        if not keys:
            raise ValueError(f"seed {s}: the two arms evaluated no common problem")
        out.append([arm[s][k] - base[s][k] for k in keys])
    return out


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


def parse_directions(spec: str | Mapping[str, str], metrics: Sequence[str]) -> dict[str, str]:
    """Per metric, ``higher`` or ``lower``: ``spec`` is one word for all, a mapping, or
    ``"METRIC=WORD,...[,WORD]"`` (a bare word: the default for metrics not named). A word other
    than those two, a named metric not compared, or a metric with no direction is a ``ValueError``."""
    default, named = None, {}
    if isinstance(spec, Mapping):
        named = dict(spec)
    else:
        for part in filter(None, (s.strip() for s in spec.split(","))):
            key, sep, word = part.rpartition("=")
            if sep:
                named[key] = word
            elif default is not None:
                raise ValueError(f"--direction {spec!r}: more than one default word")
            else:
                default = word
    for word in [default, *named.values()]:
        if word not in (None, "higher", "lower"):
            raise ValueError(f"--direction {spec!r}: {word!r} is not 'higher' or 'lower'")
    unknown = sorted(set(named) - set(metrics))
    if unknown:
        raise ValueError(
            f"--direction {spec!r} names {unknown}, not among the metrics {list(metrics)}"
        )
    missing = [m for m in metrics if m not in named and default is None]
    if missing:
        raise ValueError(f"--direction {spec!r} gives no direction for {missing} (and no default)")
    return {m: named.get(m, default) for m in metrics}


def compare(
    arms: Mapping[str, Sequence[str]],
    baseline: str,
    metrics: str | Sequence[str],
    *,
    step: str | int = "last",
    direction: str | Mapping[str, str] = "higher",
    alpha: float = 0.05,
    reps: int = 10_000,
) -> list[dict]:
    """One row per (metric, arm) against ``baseline`` (see the module docstring), Holm-corrected
    together; ``direction`` as :func:`parse_directions` reads it."""
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    directions = parse_directions(direction, metrics)
    seeds = {name: [run_seed(w) for w in dirs] for name, dirs in arms.items()}
    rows, hyps = [], []
    for metric in metrics:
        values = {
            name: dict(zip(seeds[name], (metric_at(w, metric, step) for w in dirs)))
            for name, dirs in arms.items()
        }
        for name in arms:
            if name == baseline:
                continue
            row = {"arm": name, "baseline": baseline, "metric": metric}
            row["direction"] = directions[metric]
            diffs = by_seed(values[name], values[baseline])
            row["seeds"], row["mean"] = len(diffs), float(np.mean(diffs))
            hyps.append(
                Hypothesis(f"{name} − {baseline}: {metric}", tuple(diffs), row["direction"])
            )
            value = sample_value(metric)
            last = _last_eval_step(arms[name][0]) if step == "last" else int(step)
            if value is not None and last is not None:
                per = [
                    {s: problem_means(w, value, last) for s, w in zip(seeds[k], arms[k])}
                    for k in (name, baseline)
                ]
                row["by_problem"] = two_stage_bootstrap(by_problem_per_seed(*per), 1 - alpha, reps)
            rows.append(row)
    for row, o in zip(rows, holm_family(hyps, alpha)):
        row.update(by_seed=o.test, ci=o.ci, level=o.level, p_holm=o.p_holm)
        row.update(verdict=o.verdict, status=o.status, twin=o.twin)
    return rows


def _last_eval_step(workdir: str) -> int | None:
    steps = [int(f[:-6]) for f in os.listdir(os.path.join(workdir, "eval")) if f[:-6].isdigit()]
    return max(steps) if steps else None


def table(rows: Sequence[dict]) -> str:
    """A markdown table of ``compare``'s rows: the by-seed interval at its Holm level."""
    head = (
        "| arm − baseline | metric | seeds | mean diff | CI (t) at the Holm level | p | p (Holm) |"
    )
    head += " verdict | problems | 95% CI (two-stage bootstrap) |\n" + "|---" * 10 + "|\n"
    lines = []
    for r in rows:
        bp = r.get("by_problem")
        prob = f"{bp.n} | [{bp.low:+.4f}, {bp.high:+.4f}]" if bp else "— | —"
        ci, word = r["ci"], r["verdict"] + (f" (= {r['twin']})" if r["twin"] else "")
        stats = "— | — | —"
        if ci is not None:
            stats = f"[{ci.low:+.4f}, {ci.high:+.4f}] ({r['level']:.4f}) | {r['by_seed'].p:.3g} | "
            stats += f"{r['p_holm']:.3g}"
        lines.append(
            f"| {r['arm']} − {r['baseline']} | {r['metric']} | {r['seeds']} | {r['mean']:+.4f} | "
            f"{stats} | {word} | {prob} |"
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
    parser.add_argument(
        "--direction",
        default="higher",
        help="higher | lower for every metric, or METRIC=higher|lower,... (a bare word: the "
        "default for metrics not named)",
    )
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
    try:
        directions = parse_directions(a.direction, a.metric)
    except ValueError as e:
        parser.error(str(e))
    rows = compare(arms, a.baseline, a.metric, step=a.step, direction=directions, alpha=a.alpha)
    print(table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
