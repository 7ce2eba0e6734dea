"""AWPO (arXiv:2512.19126) from a weak warm start on the calculator's rule problem set (issue 47): the
third AWPO design, in a setting where the variance gate and mixing without it differ
(``docs/methods.md``, AWPO: on ``awpo_rule``'s 500-step warm start they differed in 0-0.5% of
groups, and the two arms were bitwise equal in 7 of 8 seeds).

    python experiments/awpo_weak.py --prereg       # the pre-registration (before any cell)
    python experiments/awpo_weak.py                # 8 seeds x 3 arms -> docs/results/awpo_weak.md
    python experiments/awpo_weak.py --report_only  # the page from the archived cells
    python experiments/awpo_weak.py --quick --methods=awpo,mix_nogate  # 2 RL steps

Host-side only: every cell is its own ``python -m mojax.main`` process (one process; the grid runs
them one at a time), and the page is written from the archived cells.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from experiments import _calculator, _claims, _grid, awpo_gate, awpo_rule  # noqa: E402
from experiments.awpo_rule import CONFIG, EVAL_EVERY, MEASURES, STEPS, train_mean  # noqa: E402

M, C, X = _grid.Method, _claims.Comparison, _claims.Measure
SFT_STEPS = 100  # the weak warm start: the only one of the pilots' 100 / 150 / 200 steps with
# many groups where the gate and mixing without it differ
GATED_OUT = "gated-out groups, mean over steps"
MIN_GATED_OUT = 0.05  # the setting check's threshold, said in the pre-registration

PREREG = f"""**Earlier grids.** [`awpo_gate.md`](awpo_gate.md) (8 seeds, the facts problem set,
`eps_mix` 0.5): mechanism *not shown*, outcome *contradicted*; the gate was open in 7.3% of groups.
[`awpo_rule.md`](awpo_rule.md) (8 seeds × 4 arms, the rule problem set, `eps_mix` 0.75, a 500-step
SFT warm start): mechanism *shown* (held-out `r_reason` +0.017 over outcome-only GRPO, Holm p
0.0005), outcome *not shown* (accuracy −0.001 against outcome-only GRPO, Holm p 0.055, and −0.0001
against mixing without the gate, p 0.35; every arm ended at 0.96). There AWPO and mixing without the
gate (`eps_mix` 1) were bitwise equal in 7 of 8 seeds. Found after that grid (`docs/methods.md`,
AWPO): with `R_out` = plan format + correct answer, a group with outcome variance almost always has
`σ_mix < 3 σ_out`, so the two differ nearly only in groups whose samples are all wrong while their
plans differ (unsaturated, `σ_out = 0`: Eq. 25 closes the gate, `eps_mix` 1 mixes the judge in with
weight `r_g` ≈ 1); on that page's warm start those were 0-0.5% of held-out groups. This page is a
new design for that; both pages and their pre-registrations stay as they are.

**Setting.** `awpo_rule`'s, except the warm start: the calculator in AWPO's mode on the rule problem
set (`rule` / `medium` / `hard` 0.5 / 0.1 / 0.4; every SFT demonstration opens with a plan,
`<think>tool</think>` or `<think>mental</think>`; `R_out` = plan format (0/1) + correct answer (0/1)
∈ [0, 2]; `R_reason` = the offline judge's score of the plan against the fixed `N_opt`'s plan:
mental for a rule problem, tool otherwise, right on every held-out problem), with a {SFT_STEPS}-step
SFT warm start per seed (`--config.sft.steps={SFT_STEPS}`, shared by the arms) instead of 500. 1024
held-out test problems disjoint from training; {STEPS} RL steps of 16 prompts × 8 samples; held-out
evaluation (4 samples per problem, T = 1) every {EVAL_EVERY} steps.

**Pilots (before this page; seed 0, `configs/awpo.py:task=calculator` with the SFT steps below, 8 RL
steps, 256 held-out problems; `/tmp`, not archived).** Held-out accuracy at step 0 and the share of
groups where the gate and mixing without it differ (`advantage/awpo/gated_out_frac`):

| SFT steps | held-out accuracy (rule / medium / hard) | training groups, mean over 8 steps | held-out groups (of 4 samples) |
| --- | --- | --- | --- |
| 100 | 0.247 (0.35 / 0.00 / 0.17) | 16.4% (0-31% per step) | 28.9% |
| 150 | 0.605 (0.69 / 0.13 / 0.62) | 2.3% | 7.8% |
| 200 | 0.732 (0.78 / 0.44 / 0.74) | 1.6% | 1.6% |

With 100 steps the gated-out groups were on hard (35 of 102 held-out problems), rule (23 of 130) and
medium (16 of 24) problems.

**Setting check (said before any cell runs).** The gate must act where mixing without it would not:
`awpo`'s `advantage/awpo/gated_out_frac`, mean over its {STEPS} steps, is reported per seed. If it is
below 0.05 in a seed, the page says that seed's cells could not tell the gate from mixing without it.

**Arms.** AWPO with `eps_mix` 0.75 (the calculator's setting, as on `awpo_rule`); outcome-only GRPO
on `R_out`; mixing without the variance gate (`eps_mix` 1: every unsaturated group with judge
variance mixes, all-wrong groups with mixed plans included). Left out: AWPO at `eps_mix` 0.5 (on
`awpo_rule` it was outcome-only GRPO's accuracy, and it would add 8 cells and no test of the gate).

**Hypotheses** (AWPO Sec. 4). Outcome: AWPO ends with higher held-out accuracy than outcome-only
GRPO, and than mixing without the gate. Mechanism: AWPO's held-out plans agree more with the judge
(`R_reason`) than outcome-only GRPO's. Reported beside the tests (descriptive, not tested): the
gated-out share above, the gate's mean weight and open fraction and the share of groups with zero
outcome variance over training, held-out accuracy per class and held-out tool efficiency (overall
and on rule problems); a descriptive measure's direction column states no hypothesis."""

WEAK_MEASURES = (
    *MEASURES,
    X(GATED_OUT, "descriptive", train_mean("advantage/awpo/gated_out_frac")),
)
CURVES = (
    "eval/accuracy",
    "eval/r_reason",
    "eval/acc/medium",
    "advantage/awpo/gated_out_frac",
    "advantage/awpo/gate_frac",
)
COMPARISONS = (
    C("awpo", "grpo_outcome", "final accuracy"),
    C("awpo", "mix_nogate", "final accuracy"),
    C("awpo", "grpo_outcome", "final held-out r_reason"),
)
ARMS = (
    M("awpo", CONFIG),
    M("grpo_outcome", f"{CONFIG},estimator=grpo"),
    M("mix_nogate", CONFIG, ("--config.advantage.eps_mix=1.0",)),
)
EARLIER = "\n".join((awpo_gate.THREE_SEED, awpo_gate.AS_EARLIER, awpo_rule.AS_EARLIER))


def claim(seeds, root, quick) -> _claims.Claim:
    common = _calculator.QUICK_COMMON if quick else (f"--config.sft.steps={SFT_STEPS}",)
    rl = (
        f"--config.steps={2 if quick else STEPS}",
        f"--config.eval_every={1 if quick else EVAL_EVERY}",
    )
    return _claims.Claim(
        name="awpo_weak",
        earlier=EARLIER,
        title="AWPO from a weak warm start: the variance gate against mixing without it",
        question="Where many groups are all wrong with mixed plans (so the variance gate "
        "and mixing without it differ), does AWPO's gate improve held-out accuracy over "
        "outcome-only training and over mixing the judge in without the gate?",
        prereg=PREREG,
        arms=ARMS,
        measures=WEAK_MEASURES,
        comparisons=COMPARISONS,
        grid=_grid.Grid(
            root=root,
            seeds=seeds,
            common=common,
            rl=rl,
            sft_config=CONFIG,
            sft=("--config.steps=0",),
        ),
        curves=CURVES,
        front=("eval/accuracy", "eval/r_reason"),
    )


def gate_check(claim: _claims.Claim) -> str:
    """The pre-registered setting check: `awpo`'s gated-out share, mean over its steps, per seed;
    a seed below ``MIN_GATED_OUT`` is named."""
    return _claims.setting_check(
        claim,
        "awpo",
        f"{GATED_OUT} >= {MIN_GATED_OUT}",
        train_mean("advantage/awpo/gated_out_frac"),
        lambda v: v >= MIN_GATED_OUT,
        "could not tell the gate from mixing without it",
    )


if __name__ == "__main__":
    app.run(_claims.cli(claim, "calculator_weak_awpo", extra=gate_check))
