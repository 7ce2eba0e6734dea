"""Paired statistics for comparing runs: the paired t test and interval (two-sided, one-sided, and
the non-inferiority test with a stated margin), the one- and two-stage bootstraps of a mean
difference, and Holm's step-down correction over a family of comparisons with intervals at the
level each verdict used.

Conventions (``docs/statistics.md``):

* differences are arm − baseline; a test rejects when its p-value is ``< alpha``;
* **all differences equal** (zero sample variance): the t statistic is undefined (0/0, or ±inf;
  ``scipy.stats.ttest_rel`` returns nan), and exact ties of every difference arise only from a
  discrete metric, where the normal model behind t does not hold. The test then is the exact
  sign-flip (permutation) test of the differences, which needs no variance: with all ``n``
  differences equal to ``c`` ≠ θ0, the observed mean is the most extreme of the ``2^n`` sign
  patterns, so p = ``2^(1-n)`` two-sided (``2^-n`` one-sided on the side of ``c``, 1 on the
  other); ``c`` = θ0 gives p = 1. Its interval is the set of θ0 that test does not reject: ``[c,
  c]`` when ``2^(1-n) < 1 - level`` (one-sided: ``[c, ∞)`` / ``(-∞, c]`` when ``2^-n < 1 - level``),
  else the whole line;
* a **non-inferiority** hypothesis "the arm is not worse than the baseline by more than
  ``margin``" tests H0: δ ≤ −margin against H1: δ > −margin (direction ``higher``; ``lower``
  mirrors it: H0: δ ≥ margin), one-sided at ``alpha``, with the one-sided interval;
* a **Holm family** (:func:`holm_family`) leaves out, with a warning, a comparison whose
  differences are all exactly 0 (the two arms gave the same numbers: nothing to test) and counts a
  comparison whose differences, margin (and, for a one-sided test, direction) equal an earlier one's
  once (the same test on the same data; the duplicate reports its twin's p-values). Each kept
  comparison's interval is at the level Holm used for its rank, ``1 − alpha / (m − rank)``
  (0-based rank), frozen at the first rank that does not reject, so an interval excludes the null
  exactly when the verdict rejects.

Host-side numpy / scipy only (no devices); every process computes the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence

import numpy as np

ALTERNATIVES = ("two-sided", "greater", "less")


@dataclasses.dataclass(frozen=True)
class Paired:
    """A paired comparison: ``n`` pairs, mean difference (arm − baseline), a ``level`` interval
    ``[low, high]`` (a one-sided one has an infinite end) and the p-value of its null."""

    n: int
    mean: float
    low: float
    high: float
    p: float
    level: float = 0.95


def paired_t(
    diffs: Sequence[float],
    level: float = 0.95,
    *,
    null: float = 0.0,
    alternative: str = "two-sided",
) -> Paired:
    """The paired t test of ``mean(diffs) = null`` (``alternative``: ``two-sided``, ``greater``:
    H1 mean > null, ``less``) and its ``level`` interval (``n >= 2``); all differences equal: the
    exact sign-flip test (module docstring)."""
    from scipy import stats

    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}; got {alternative!r}")
    d = np.asarray(diffs, np.float64)
    n = d.size
    if n < 2:
        raise ValueError(f"a paired t interval needs >= 2 pairs; got {n}")
    if np.all(d == d[0]):
        return _constant(float(d[0]), n, level, null, alternative)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    t = (mean - null) / se
    if alternative == "two-sided":
        q = float(stats.t.ppf(0.5 + level / 2, n - 1))
        return Paired(
            n, mean, mean - q * se, mean + q * se, float(2 * stats.t.sf(abs(t), n - 1)), level
        )
    q = float(stats.t.ppf(level, n - 1))
    if alternative == "greater":
        return Paired(n, mean, mean - q * se, math.inf, float(stats.t.sf(t, n - 1)), level)
    return Paired(n, mean, -math.inf, mean + q * se, float(stats.t.cdf(t, n - 1)), level)


def _constant(c: float, n: int, level: float, null: float, alternative: str) -> Paired:
    """The exact sign-flip test and its inverted interval for ``n`` differences all equal to ``c``."""
    x = c - null
    if alternative == "two-sided":
        p_min = 2.0 ** (1 - n)
        p = 1.0 if x == 0 else p_min
        lo, hi = (c, c) if p_min < 1 - level else (-math.inf, math.inf)
        return Paired(n, c, lo, hi, p, level)
    p_min = 2.0**-n
    on_side = x > 0 if alternative == "greater" else x < 0
    p = p_min if on_side else 1.0
    if p_min >= 1 - level:
        return Paired(n, c, -math.inf, math.inf, p, level)
    lo, hi = (c, math.inf) if alternative == "greater" else (-math.inf, c)
    return Paired(n, c, lo, hi, p, level)


def noninferiority(
    diffs: Sequence[float], margin: float, direction: str = "higher", level: float = 0.95
) -> Paired:
    """The paired t test of "the arm is not worse than the baseline by more than ``margin``":
    H0 δ ≤ −margin vs H1 δ > −margin for ``direction`` ``higher`` (H0 δ ≥ margin vs H1 δ < margin
    for ``lower``), one-sided, with the one-sided ``level`` interval."""
    _check_direction(direction)
    if not margin > 0 or not math.isfinite(margin):
        raise ValueError(f"a non-inferiority margin must be a finite number > 0; got {margin}")
    if direction == "higher":
        return paired_t(diffs, level, null=-margin, alternative="greater")
    return paired_t(diffs, level, null=margin, alternative="less")


def _check_direction(direction: str) -> None:
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower'; got {direction!r}")


# ------------------------------------------------------------------------------------ bootstraps
def _percentile(means: np.ndarray, estimate: float, n: int, level: float) -> Paired:
    low, high = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    p = float(min(1.0, 2 * min((means <= 0).mean(), (means >= 0).mean())))
    return Paired(n, estimate, float(low), float(high), p, level)


def paired_bootstrap(
    diffs: Sequence[float], level: float = 0.95, reps: int = 10_000, seed: int = 0
) -> Paired:
    """The percentile interval of the mean of ``diffs`` over ``reps`` resamples with replacement
    (a one-stage paired bootstrap: each resample draws whole pairs); the p-value is twice the
    smaller tail mass of the resampled means around 0."""
    d = np.asarray(diffs, np.float64)
    if d.size < 2:
        raise ValueError(f"a bootstrap needs >= 2 pairs; got {d.size}")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, (reps, d.size))].mean(axis=1)
    return _percentile(means, float(d.mean()), d.size, level)


def two_stage_bootstrap(
    per_seed: Sequence[Sequence[float]],
    level: float = 0.95,
    reps: int = 10_000,
    seed: int = 0,
    chunk: int = 1000,
) -> Paired:
    """The percentile interval of the mean difference over seeds of the per-seed mean over problems,
    resampling in two stages: ``S`` seeds with replacement, then, within each drawn seed ``s``, its
    ``n_s`` problems with replacement; a resample's statistic is the mean over its drawn seeds of
    each one's mean over its drawn problems. ``per_seed[s]`` holds seed ``s``'s per-problem
    differences. ``n`` is the number of pairs (problems × seeds).

    It carries seed-to-seed variation that a bootstrap over pooled problems ignores. Its variance
    is ``(1/S) [var_s(m_s) + mean_s(σ_s² / n_s)]`` (population variances; ``m_s``, ``σ_s²`` a seed's
    mean and variance over its problems): the second term counts the within-seed noise that
    ``var_s(m_s)`` already holds, so with no seed effect it is about twice the one-stage variance
    (Davison & Hinkley 1997, §3.8, "strategy 2"): a conservative interval.

    Draws, per chunk of ``chunk`` resamples: the seed indices, then uniforms picking problems."""
    data = [np.asarray(x, np.float64).ravel() for x in per_seed]
    means = two_stage_bootstrap_draws(data, reps, seed, chunk)
    estimate = float(np.mean([x.mean() for x in data]))
    return _percentile(means, estimate, sum(x.size for x in data), level)


def two_stage_bootstrap_draws(
    per_seed: Sequence[Sequence[float]], reps: int = 10_000, seed: int = 0, chunk: int = 1000
) -> np.ndarray:
    """The ``reps`` resampled statistics of :func:`two_stage_bootstrap` (its draws, per chunk of
    ``chunk`` resamples: the seed indices ``[r, S]``, then uniforms ``[r, S, max n_s]`` whose first
    ``n_s`` pick the problems of a drawn seed ``s``)."""
    data = [np.asarray(x, np.float64).ravel() for x in per_seed]
    if len(data) < 2 or any(x.size < 1 for x in data):
        sizes = [x.size for x in data]
        raise ValueError(
            f"a two-stage bootstrap needs >= 2 seeds, each with >= 1 problem; got {sizes}"
        )
    sizes = np.array([x.size for x in data])
    width = int(sizes.max())
    table = np.zeros((len(data), width))
    for s, x in enumerate(data):
        table[s, : x.size] = x
    rng = np.random.default_rng(seed)
    means = np.empty(reps)
    for start in range(0, reps, chunk):
        r = min(chunk, reps - start)
        seeds = rng.integers(0, len(data), (r, len(data)))  # [r, S]
        n = sizes[seeds][..., None]  # [r, S, 1]
        picks = np.minimum((rng.random((r, len(data), width)) * n).astype(np.int64), n - 1)
        vals = np.where(np.arange(width) < n, table[seeds[..., None], picks], 0.0)
        means[start : start + r] = (vals.sum(-1) / n[..., 0]).mean(-1)
    return means


# ------------------------------------------------------------------------------------ Holm
def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given)."""
    p = np.asarray(pvalues, np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def holm_levels(pvalues: Sequence[float], alpha: float = 0.05) -> list[float]:
    """Per p-value (same order), the confidence level of its Holm-consistent interval: ``1 − alpha
    / (m − rank)`` for the 0-based ``rank`` in ascending order, frozen at the first rank whose
    p-value is ``>= alpha / (m − rank)`` (where the step-down stops), so every later interval is at
    the stopping level and includes the null, as their verdicts do."""
    p = np.asarray(pvalues, np.float64)
    m = p.size
    levels = np.empty(m)
    stop = None
    for rank, i in enumerate(np.argsort(p, kind="stable")):
        if stop is None and p[i] >= alpha / (m - rank):
            stop = rank
        levels[i] = 1 - alpha / (m - (rank if stop is None else stop))
    return levels.tolist()


def verdict(diff: float, p_adjusted: float, direction: str, alpha: float = 0.05) -> str:
    """``reproduced`` / ``opposite`` / ``inconclusive`` of a two-sided test (``compare``)."""
    _check_direction(direction)
    if p_adjusted >= alpha or diff == 0:
        return "inconclusive"
    return "reproduced" if (diff > 0) == (direction == "higher") else "opposite"


# ------------------------------------------------------------------------------------ families
@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """One comparison of a family: its differences (arm − baseline, paired), the direction the
    hypothesis expects and, for "not worse", the non-inferiority ``margin`` (None: a two-sided test
    of no difference, the verdict read from the sign)."""

    name: str
    diffs: tuple[float, ...]
    direction: str = "higher"
    margin: float | None = None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A hypothesis's result in its family: ``status`` ``tested`` / ``duplicate`` (of ``twin``; its
    p-values and interval are the twin's) / ``identical`` (all differences 0: not tested, no
    p-values); ``test`` at level ``1 − alpha``, ``ci`` at the Holm ``level``."""

    status: str
    verdict: str
    test: Paired | None = None
    ci: Paired | None = None
    p_holm: float | None = None
    level: float | None = None
    twin: str | None = None


def run_test(h: Hypothesis, level: float) -> Paired:
    """``h``'s test at ``level``: the two-sided paired t, or the non-inferiority test."""
    if h.margin is None:
        _check_direction(h.direction)
        return paired_t(h.diffs, level)
    return noninferiority(h.diffs, h.margin, h.direction, level)


def _key(h: Hypothesis) -> tuple:
    return (tuple(h.diffs), h.margin, None if h.margin is None else h.direction)


def _words(h: Hypothesis, test: Paired, p_holm: float, alpha: float) -> str:
    if h.margin is None:
        return verdict(test.mean, p_holm, h.direction, alpha)
    return "reproduced" if p_holm < alpha else "inconclusive"


def holm_family(hypotheses: Sequence[Hypothesis], alpha: float = 0.05) -> list[Outcome]:
    """Holm's correction over ``hypotheses`` (module docstring): identical comparisons (every
    difference exactly 0) are left out and duplicates counted once, each with a warning naming it;
    the others get their test, Holm-adjusted p-value, Holm-level interval and verdict."""
    kept: dict[tuple, int] = {}  # key -> index of the first hypothesis with it
    for i, h in enumerate(hypotheses):
        if all(x == 0 for x in h.diffs):
            warnings.warn(
                f"{h.name}: every difference is 0; left out of the Holm family", stacklevel=2
            )
        elif _key(h) in kept:
            twin = hypotheses[kept[_key(h)]].name
            warnings.warn(
                f"{h.name}: the same test as {twin}; counted once in the Holm family", stacklevel=2
            )
        else:
            kept[_key(h)] = i
    idx = list(kept.values())
    tests = [run_test(hypotheses[i], 1 - alpha) for i in idx]
    p = [t.p for t in tests]
    done: dict[int, Outcome] = {}
    for i, t, ph, lv in zip(idx, tests, holm(p), holm_levels(p, alpha)):
        h = hypotheses[i]
        done[i] = Outcome("tested", _words(h, t, ph, alpha), t, run_test(h, lv), ph, lv)
    out = []
    for i, h in enumerate(hypotheses):
        if i in done:
            out.append(done[i])
        elif all(x == 0 for x in h.diffs):
            out.append(Outcome("identical", "identical (not tested)"))
        else:
            j = kept[_key(h)]
            o = done[j]
            words = _words(h, o.test, o.p_holm, alpha)
            out.append(
                dataclasses.replace(o, status="duplicate", verdict=words, twin=hypotheses[j].name)
            )
    return out
