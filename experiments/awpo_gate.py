"""AWPO (arXiv:2512.19126): does variance-aware gating of a judge's reasoning reward improve the
outcome over outcome-only training and over mixing without the gate?

    python experiments/awpo_gate.py --prereg       # the page's pre-registration
    python experiments/awpo_gate.py                # 8 seeds x 5 arms -> docs/results/awpo_gate.md
    python experiments/awpo_gate.py --report_only  # the page from the archived cells
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from experiments import _calculator, _claims, _grid, _report  # noqa: E402

M, C, X = _grid.Method, _claims.Comparison, _claims.Measure
CONFIG = "configs/awpo.py:task=calculator"

PREREG = """**Setting.** A small task where a reasoning judge carries signal: the calculator in AWPO's mode.
Every SFT demonstration opens with a plan, `<think>tool</think>` or `<think>mental</think>`; `R_out`
= plan format (0/1) + correct answer (0/1) ∈ [0, 2]; `R_reason` = the offline judge's score of the
plan against the decision the problem's fixed `N_opt` makes (tool for a product or a two-digit sum,
mental for a single-digit sum), so the judge rewards a decision `R_out` does not see directly
(calling on an easy problem is correct but wasteful; answering a hard one mentally is usually
wrong). Held-out problems are disjoint from training and validation. The embedded default's sizes:
500-step warm start, 40 RL steps of 16 prompts × 8 samples.

**Arms.** AWPO with `eps_mix` 0.5 (mojax's default), 0.3 and 0.7 (below / above 0.5: the paper
motivates `eps_mix` as allowing a "modest inflation" of the variance, which r_g < 0.5 forbids
whenever the judge's score is positively correlated with the outcome), mixing without the variance
gate (`eps_mix` = 1: every group not saturated mixes), and outcome-only GRPO on `R_out`.

**Hypotheses** (AWPO Sec. 4): outcome — AWPO ends with higher held-out accuracy than outcome-only
GRPO and than mixing without the gate; mechanism — AWPO's held-out plans agree more with the judge
(`R_reason`) than outcome-only GRPO's. `eps_mix` above 0.5 is not worse than 0.5."""

MEASURES = (
    X("final accuracy", "outcome", _report.last("eval/accuracy"), sample="success"),
    X("final held-out r_reason", "mechanism", _report.last("eval/r_reason"), sample="r_reason"),
    X("final tool efficiency", "outcome", _report.last("eval/tool_efficiency")),
)
COMPARISONS = (
    C("awpo", "grpo_outcome", "final accuracy"),
    C("awpo", "mix_nogate", "final accuracy"),
    C("awpo", "grpo_outcome", "final held-out r_reason"),
    C("awpo_eps0.7", "awpo", "final accuracy"),
    C("awpo_eps0.3", "awpo", "final accuracy"),
)


THREE_SEED = """- The 3-seed design before this grid (page at 2210f31: ToolRL with the offline judge from a
  randomly initialised tiny model): inconclusive, every reward of all 6 cells was 0."""
EARLIER = f"""{THREE_SEED}
- The grid after this one, on the rule calculator with eps_mix 0.75: [`awpo_rule.md`](awpo_rule.md)."""
# this grid as a later page names it
AS_EARLIER = """- The 8-seed grid on the earlier testbed (single-digit facts, 128 held-out problems, eps_mix 0.5;
  [`awpo_gate.md`](awpo_gate.md)): mechanism not shown (held-out r_reason +0.002 over outcome-only
  GRPO, Holm p 0.57), outcome contradicted (accuracy -0.006 below outcome-only GRPO, Holm p 0.02;
  +0.011 over mixing without the gate, Holm p 0.11; eps_mix 0.7 -0.013 below 0.5, Holm p 0.01).
  The gate was open in 7.3% of groups (mean weight 0.027): AWPO was nearly outcome-only GRPO there
  (methods.md, AWPO)."""


def claim(seeds, root, quick) -> _claims.Claim:
    arms = (
        M(
            "awpo", CONFIG, ("--config.advantage.eps_mix=0.5",)
        ),  # the default it was registered with
        M("grpo_outcome", f"{CONFIG},estimator=grpo"),
        M("mix_nogate", CONFIG, ("--config.advantage.eps_mix=1.0",)),
        M("awpo_eps0.7", CONFIG, ("--config.advantage.eps_mix=0.7",)),
        M("awpo_eps0.3", CONFIG, ("--config.advantage.eps_mix=0.3",)),
    )
    common = _calculator.legacy_common(quick)
    rl = (f"--config.steps={2 if quick else 40}",)
    return _claims.Claim(
        earlier=EARLIER,
        name="awpo_gate",
        title="AWPO: gating a judged reasoning reward on the calculator",
        question="Does variance-aware gating of a judge's plan score improve the outcome over "
        "outcome-only training and over mixing without the gate?",
        prereg=PREREG,
        arms=arms,
        measures=MEASURES,
        comparisons=COMPARISONS,
        grid=_grid.Grid(
            root=root,
            seeds=seeds,
            common=common,
            rl=rl,
            sft_config=CONFIG,
            sft=("--config.steps=0",),
        ),
        curves=("eval/accuracy", "eval/r_reason", "eval/tool_efficiency"),
        front=("eval/accuracy", "eval/r_reason"),
    )


if __name__ == "__main__":
    app.run(_claims.cli(claim, "calculator_awpo"))
