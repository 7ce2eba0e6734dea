"""AWPO (arXiv:2512.19126) on the calculator's rule problem set: does variance-aware gating of a
judge's plan score improve held-out accuracy over outcome-only training and over mixing without the
gate, where the judge is right on held-out problems and the outcome is not saturated?

    python experiments/awpo_rule.py --prereg       # the page's pre-registration
    python experiments/awpo_rule.py                # 8 seeds x 4 arms -> docs/results/awpo_rule.md
    python experiments/awpo_rule.py --report_only  # the page from the archived cells

The earlier design (``experiments/awpo_gate.py``, ``docs/results/awpo_gate.md``) ran on the facts
problem set, where the judge was anti-aligned with held-out accuracy; this is a new page, not a
rerun of that one. Host-side only: every cell is its own ``python -m mojax.main`` process.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from experiments import _calculator, _claims, _grid, _report, awpo_gate  # noqa: E402

M, C, X = _grid.Method, _claims.Comparison, _claims.Measure
CONFIG = "configs/awpo.py:task=calculator"  # eps_mix 0.75: the calculator branch's choice
STEPS, EVAL_EVERY = 40, 10
MARGIN = 0.02  # "not worse" in held-out accuracy: by at most 2 points

PREREG = f"""**Earlier grid.** `docs/results/awpo_gate.md` (`experiments/awpo_gate.py`, 8 seeds, the
facts problem set, `eps_mix` 0.5): mechanism *not shown* (held-out `r_reason` +0.002 over
outcome-only GRPO, Holm p 0.57); outcome *contradicted* (accuracy −0.006 below outcome-only GRPO,
Holm p 0.02; +0.011 over mixing without the gate, p 0.11; `eps_mix` 0.7 −0.013 below 0.5). That
setting could not contain the mechanism: the gate was open in 7.3% of groups (mean weight 0.027,
AWPO was outcome-only GRPO), 59% of groups had zero outcome variance, and on held-out single-digit
sums the judge was anti-aligned with accuracy (approved "mental" plans right 21% of the time,
rejected "tool" plans 98%). This page is a new design on a new testbed; it does not revise that one.

**Setting.** The calculator in AWPO's mode on the rule problem set (the embedded default's data:
`rule` problems `x+0`, `x*1`, `x*0`, `x-x`, ... on operands never seen in training, solved without
the tool; `medium` a±b and `hard` a*b, which need it; mix 0.5 / 0.1 / 0.4; 1024 held-out test
problems disjoint from training). Every SFT demonstration opens with a plan, `<think>tool</think>` or
`<think>mental</think>`; `R_out` = plan format (0/1) + correct answer (0/1) ∈ [0, 2]; `R_reason` =
the offline judge's score of the plan against `CalculatorTask.judge_reference`, the plan the fixed
`N_opt` makes (mental for a rule problem, tool otherwise), which is right on every held-out problem.
500-step SFT warm start per seed (shared by the arms), {STEPS} RL steps of 16 prompts × 8 samples,
held-out evaluation (avg@4 at T = 1) every {EVAL_EVERY} steps.

**Design check (before this page; not a cell of the grid).** `configs/awpo.py:task=calculator`,
seed 0, 20 RL steps (a `/tmp` workdir, not archived). The outcome is not saturated at the start: held-out accuracy 0.892
(rule 0.978, medium 0.764, hard 0.818) → 0.953 at step 20 (0.981, 0.884, 0.935). The gate acts: open
in 36% of groups on average over the 20 steps (first steps 31-50%, last 19-25%), mean weight
`w_mean` 0.226 (the earlier grid: 7.3%, 0.027); 64% of groups have zero outcome variance (mostly
solved rule problems). The judge agrees with held-out correctness where the outcome varies: at step
0 an approved plan is right 98% (medium) / 99% (hard) of the time, a rejected one 1% / 0%; on rule
problems approval does not predict correctness (98% either way: calling is correct there, only
wasteful). What the outcome does not see is the rule-problem plan, and it sits in zero-variance
groups, which Eq. 25 gates out for any `eps_mix` < 1 (`r_g` → 1): in this run the share of
approved (mental) plans on held-out rule problems fell from 0.49 to 0.34, calls on them rose from
0.50 to 0.66 per sample, and held-out `r_reason` went 0.656 → 0.640. Only `mix_nogate` mixes the
judge in there; the page reports held-out tool efficiency on rule problems beside the tests
(descriptive) for that reason.

**Arms.** AWPO with `eps_mix` 0.75 (the calculator's setting: the paper's "modest inflation" of the
variance, `eps_mix` in (0.5, 1); `r_g` < 0.75 ⟺ `σ_mix` < 3 `σ_out`, so a judge that agrees with the
outcome mixes in; docs/methods.md); outcome-only GRPO on `R_out`; mixing without the variance gate
(`eps_mix` = 1: every unsaturated group with judge variance mixes); AWPO at mojax's general default
`eps_mix` 0.5 (only a judge anti-correlated with the outcome mixes in).

**Hypotheses** (AWPO Sec. 4). Outcome: AWPO ends with higher held-out accuracy than outcome-only
GRPO, and than mixing without the gate; AWPO at 0.75 is not worse than at 0.5 (non-inferiority,
margin {MARGIN}). Mechanism: AWPO's held-out plans agree more with the judge (`R_reason`) than
outcome-only GRPO's and than AWPO at 0.5 (whose gate mixes the judge in less). Reported beside the
tests (descriptive, not tested): the gate's mean weight and open fraction and the share of groups
with zero outcome variance over training, held-out accuracy per class, held-out tool efficiency
(overall and on rule problems); a descriptive measure's direction column states no hypothesis."""


def train_mean(key: str, absent: float = 0.0):
    """The mean of ``key`` over every training step that logs it; ``absent`` (an arm whose
    estimator has no gate: weight 0) when none does."""

    def f(rows: list[dict]) -> float:
        _, v = _report.series(rows, key)
        return float(sum(v) / len(v)) if v else absent

    return f


MEASURES = (
    X("final accuracy", "outcome", _report.last("eval/accuracy"), sample="success"),
    X("final held-out r_reason", "mechanism", _report.last("eval/r_reason"), sample="r_reason"),
    X("final accuracy, medium", "descriptive", _report.last("eval/acc/medium")),
    X("final accuracy, hard", "descriptive", _report.last("eval/acc/hard")),
    X("final accuracy, rule", "descriptive", _report.last("eval/acc/rule")),
    X("final tool efficiency", "descriptive", _report.last("eval/tool_efficiency")),
    X("final tool efficiency, rule", "descriptive", _report.last("eval/tool_eff/rule")),
    X("gate weight, mean over steps", "descriptive", train_mean("advantage/awpo/w_mean")),
    X("gate open fraction, mean over steps", "descriptive", train_mean("advantage/awpo/gate_frac")),
    X("zero-variance groups, mean over steps", "descriptive",
      train_mean("advantage/adv/zero_std_group_frac", math.nan)),
)  # fmt: skip
# plotted per arm (results only; the pre-registration does not name them): held-out accuracy and
# plan agreement, rule problems' tool efficiency, and the gate's open fraction over training
CURVES = ("eval/accuracy", "eval/r_reason", "eval/tool_eff/rule", "advantage/awpo/gate_frac")
COMPARISONS = (
    C("awpo", "grpo_outcome", "final accuracy"),
    C("awpo", "mix_nogate", "final accuracy"),
    C("awpo", "awpo_eps0.5", "final accuracy", margin=MARGIN),
    C("awpo", "grpo_outcome", "final held-out r_reason"),
    C("awpo", "awpo_eps0.5", "final held-out r_reason"),
)

EARLIER = f"""{awpo_gate.THREE_SEED}
{awpo_gate.AS_EARLIER}
- The grid after this one, from a weaker warm start where the gate and mixing without it differ:
  [`awpo_weak.md`](awpo_weak.md)."""
# this grid as a later page names it
AS_EARLIER = """- The 8 x 4 grid on the rule calculator at eps_mix 0.75 ([`awpo_rule.md`](awpo_rule.md)):
  mechanism shown (held-out r_reason +0.017 over outcome-only GRPO, Holm p 5e-4, and +0.013 over
  eps_mix 0.5, Holm p 0.003), outcome not shown (accuracy -0.0010 below outcome-only GRPO, Holm p
  0.055; -0.0001 below mixing without the gate, Holm p 0.35). AWPO equalled mixing without the gate
  bitwise in 7 of 8 seeds: from its 500-step warm start the two differ in 0-0.5% of groups
  (methods.md, AWPO), so that grid could not separate the gate from mixing."""


def claim(seeds, root, quick) -> _claims.Claim:
    arms = (
        M("awpo", CONFIG),
        M("grpo_outcome", f"{CONFIG},estimator=grpo"),
        M("mix_nogate", CONFIG, ("--config.advantage.eps_mix=1.0",)),
        M("awpo_eps0.5", CONFIG, ("--config.advantage.eps_mix=0.5",)),
    )
    rl = (
        f"--config.steps={2 if quick else STEPS}",
        f"--config.eval_every={1 if quick else EVAL_EVERY}",
    )
    return _claims.Claim(
        name="awpo_rule",
        earlier=EARLIER,
        title="AWPO: gating a judged plan reward on the rule calculator",
        question="Where the judge is right on held-out problems and the outcome is not saturated, "
        "does variance-aware gating of the judge's plan score improve held-out accuracy over "
        "outcome-only training and over mixing without the gate?",
        prereg=PREREG,
        arms=arms,
        measures=MEASURES,
        comparisons=COMPARISONS,
        grid=_grid.Grid(
            root=root,
            seeds=seeds,
            common=_calculator.QUICK_COMMON if quick else (),
            rl=rl,
            sft_config=CONFIG,
            sft=("--config.steps=0",),
        ),
        curves=CURVES,
        front=("eval/accuracy", "eval/r_reason"),
    )


if __name__ == "__main__":
    app.run(_claims.cli(claim, "calculator_rule_awpo"))
