"""A claim page's token budgets: each cell's policy-generated tokens summed over its steps, per arm,
and, where two compared arms differ by more than 10%, their measures at matched tokens.

A cell's tokens per step are ``rollout/generated_tokens`` (every rollout generated in the step,
dynamic sampling's refills included; ``mojax.rl.step.collect``). Cells archived before that metric
existed have only the kept batch's ``rollout/policy_tokens_mean`` and ``rollout/rollouts``: their
product is reported as an *estimate* (exact without refills; with refills it assumes the dropped
groups were as long as the kept ones) and the page says the exact count is not logged in those cells.

Matched tokens (one rule for every page): per seed, the budget is the smaller of the two cells'
totals; each arm's measure is read from its rows up to its last evaluation whose cumulative tokens
(over the training steps up to and including that step) do not exceed the budget.
Host-side only: the page is written by the one process that runs the claim script.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from experiments import _report

EXACT, ESTIMATE = "rollout/generated_tokens", "estimate"
THRESHOLD = 0.10  # arms whose mean budgets differ by more than this get a matched comparison


def step_tokens(rows: list[dict]) -> tuple[dict[int, float], str | None]:
    """``({step: tokens generated in that step}, source)``: source ``EXACT`` when every training
    row (one that logs ``rollout/rollouts``) logs it, ``ESTIMATE`` when every one logs
    ``rollout/policy_tokens_mean`` instead, else ``({}, None)``."""
    train = [r for r in rows if "rollout/rollouts" in r]
    if train and all(EXACT in r for r in train):
        return {r["step"]: float(r[EXACT]) for r in train}, EXACT
    if train and all("rollout/policy_tokens_mean" in r for r in train):
        est = {r["step"]: r["rollout/policy_tokens_mean"] * r["rollout/rollouts"] for r in train}
        return est, ESTIMATE
    return {}, None


def total(rows: list[dict]) -> float:
    """The cell's tokens over every step (nan when not logged)."""
    per, source = step_tokens(rows)
    return float(sum(per.values())) if source else math.nan


def truncated(rows: list[dict], budget: float) -> tuple[list[dict], int]:
    """``(rows up to k, k)``: ``k`` the last evaluated step (a row with an ``eval/`` key) whose
    cumulative tokens do not exceed ``budget``."""
    per, _ = step_tokens(rows)
    evals = sorted({r["step"] for r in rows if any(k.startswith("eval/") for k in r)})
    ok = [s for s in evals if sum(v for t, v in per.items() if t <= s) <= budget]
    k = ok[-1] if ok else -1
    return [r for r in rows if r["step"] <= k], k


def matched(a: Mapping[int, list[dict]], b: Mapping[int, list[dict]], fn) -> dict:
    """Over the seeds both arms ran: per seed the budget ``min(total a, total b)``, each arm's
    ``fn`` of its rows truncated at that budget, and the steps they were read at."""
    seeds = sorted(set(a) & set(b))
    out = {"a": [], "b": [], "step_a": [], "step_b": []}
    for s in seeds:
        budget = min(total(a[s]), total(b[s]))
        for side, rows in (("a", a[s]), ("b", b[s])):
            kept, k = truncated(rows, budget)
            out[side].append(fn(kept))
            out[f"step_{side}"].append(k)
    return out


def differ(ta: float, tb: float) -> bool:
    """Whether two mean budgets differ by more than ``THRESHOLD`` of the smaller."""
    return abs(ta - tb) > THRESHOLD * min(ta, tb)


def budget_table(results) -> tuple[str, dict[str, float], set]:
    """The per-arm table, ``{arm: mean total}`` and the sources seen."""
    rows, means, sources = [], {}, set()
    for arm, seeds in results.items():
        tot = [total(r) for _, r in sorted(seeds.items())]
        sources |= {step_tokens(r)[1] for r in seeds.values()}
        mu, sd = _report.mean_std(tot)
        means[arm] = mu
        rows.append([f"`{arm}`", str(len(tot)), f"{_report.fmt(mu, 0)} ± {_report.fmt(sd, 0)}"])
    return _report.markdown_table(["arm", "seeds", "generated tokens"], rows), means, sources


def budget_text(results, comparisons: Sequence, measures: Mapping) -> str:
    """The page's "Token budgets" section; ``comparisons`` are ``_claims.Comparison`` and
    ``measures`` maps a measure's name to its ``_claims.Measure``."""
    table, means, sources = budget_table(results)
    if None in sources:
        return "## Token budgets\n\nGenerated tokens: not logged in these cells.\n"
    text = [
        "## Token budgets\n",
        "Each cell's policy-generated tokens summed over its steps, mean ± std over seeds.",
    ]
    if ESTIMATE in sources:
        text.append(
            "The exact count (`rollout/generated_tokens`, dynamic sampling's dropped groups "
            "included) is not logged in these cells: shown is the estimate, per step, of the kept "
            "batch's mean policy tokens × the rollouts generated (exact for steps without refills)."
        )
    text += ["", table, "", _matched_text(results, comparisons, measures, means)]
    return "\n".join(text) + "\n"


def _matched_text(results, comparisons, measures, means) -> str:
    rule = (
        f"Arms whose mean budgets differ by more than {THRESHOLD:.0%} of the smaller are compared "
        "at matched tokens: per seed, each arm's measure at its last evaluation whose cumulative "
        "tokens do not exceed the smaller of the two cells' totals (descriptive; not in the Holm "
        "family)."
    )
    body = []
    for c in comparisons:
        if c.arm not in results or c.baseline not in results:
            continue
        if not differ(means[c.arm], means[c.baseline]):
            continue
        m = matched(results[c.arm], results[c.baseline], measures[c.measure].fn)
        d = np.subtract(m["a"], m["b"])
        body.append([
            f"`{c.arm}` − `{c.baseline}`", c.measure,
            f"{_report.fmt(means[c.arm], 0)} / {_report.fmt(means[c.baseline], 0)}",
            _report.fmt(float(np.mean(m["a"])), 4), _report.fmt(float(np.mean(m["b"])), 4),
            f"{float(np.mean(d)):+.4f}",
            f"{np.mean(m['step_a']):.1f} / {np.mean(m['step_b']):.1f}",
        ])  # fmt: skip
    if not body:
        return rule + " No compared pair differs by that much."
    head = ["comparison", "measure", "tokens (arm / baseline)", "arm at matched", "baseline at "
            "matched", "Δ", "step read (arm / baseline, mean)"]  # fmt: skip
    return rule + "\n\n" + _report.markdown_table(head, body)
