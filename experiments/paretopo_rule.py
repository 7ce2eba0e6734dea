"""ParetoPO (arXiv:2606.16111) on the rule calculator (issue 47): does Pareto ranking drop the calls
a rule makes unneeded, without costing accuracy, against GRPO with the same DAPO strategies; and what
does each of the paper's ablated parts do?

    python experiments/paretopo_rule.py --prereg       # the page's pre-registration (before any cell)
    python experiments/paretopo_rule.py                # 8 seeds x 7 arms -> docs/results/paretopo_rule.md
    python experiments/paretopo_rule.py --report_only  # the page from the archived cells
    python experiments/paretopo_rule.py --quick --seeds=0,1 --methods=grpo_ds,paretopo  # 2 RL steps

Host-side only: every cell is its own ``python -m mojax.main`` process (one process; the grid runs
them one at a time), and the page is written from the archived cells.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app  # noqa: E402

from experiments import _claims, _grid, _report, paretopo_front  # noqa: E402
from mojax.pareto.hypervolume import hypervolume  # noqa: E402

M, C, X = _grid.Method, _claims.Comparison, _claims.Measure
REF = (0.5, 0.5)  # (accuracy, tool efficiency) reference of the hypervolume, fixed before any run
OBJ = ("eval/accuracy", "eval/tool_efficiency")
MARGIN = 0.02  # accuracy "not worse than GRPO": by at most 2 points (as default_run.md)
DAPO = (  # ParetoPO's own DAPO strategies on GRPO (token-mean is both configs' default)
    "--config.dapo.dynamic_sampling=true",
    "--config.ppo.clip_high=0.28",
)
# --quick: a 20-step SFT, 16 held-out test and 16 validation problems, evaluation every RL step
QUICK = ("--config.sft.steps=20", "--config.task.num_eval=16", "--config.task.num_validation=16")

PREREG = """**Earlier grid.** [`paretopo_front.md`](paretopo_front.md) (8 seeds, the earlier "facts"
testbed with an over-calling warm start, `r_tool` paid to every sample, greedy one-sample validation):
*mechanism shown* (held-out redundant calls −0.084 against GRPO + dynamic sampling), *outcome
contradicted* (held-out accuracy fell: 0.615 against GRPO + dynamic sampling's 0.686, and the
hypervolume with it, −0.006). Issue 47 found
that its measure counted calls on 9 unseen single-digit sums that the model needed, that `r_tool` was
paid to wrong answers, and that Stage 1 could not act. This page is a new design on the new testbed;
that page and its pre-registration stay as they are.

**Setting.** The embedded default as of 2026-12-06 (`configs/paretopo.py`, no override;
`docs/results/default_run.md`): tiny Qwen3, the calculator's `rule` problem set (the no-call class
is solved by a rule visible in the problem on operands never seen in training; multi-digit sums and
products need the tool), 1024 held-out test problems disjoint from training, 128 validation
problems, `r_tool` paid to successes (`tool_reward.gate=success`), ParetoPO's validation vector of
4 samples at T = 1 scored with the fixed `N_opt` against a reference 0.1 below `v_0`; 500-step SFT
warm start (one per seed, shared by every arm), 40 RL steps of 16 prompts × 8 samples, held-out
evaluation (4 samples per problem, T = 1) at steps 0, 10, 20, 30, 40. Every arm runs ParetoPO's DAPO
strategies (token-mean loss, clip 0.2 / 0.28, dynamic sampling with 2 refill rounds).

**Measures.** *Unneeded calls on the rule class*: held-out calls per sample on rule-solvable
problems (`eval/unneeded_calls/rule`, lower is better). *Tool efficiency*: `exp(−0.7 |N_call −
N_opt|)` against the fixed `N_opt` (0 on the rule class, 1 otherwise), over every held-out sample.
*Accuracy*: held-out success rate. *HV*: the hypervolume, reference (0.5, 0.5), of the (accuracy,
tool efficiency) points of a cell's evaluated RL checkpoints (steps 10-40; the definition of the
earlier page). Each is read at the last evaluation (step 40) unless stated.

**Hypotheses** (ParetoPO Table 1 / Fig. 3, Table 3). Against GRPO with the same static weights
`w = (0.6, 0.4)` and the same DAPO strategies: ParetoPO makes fewer unneeded calls on the rule class
and has higher tool efficiency (mechanism); its accuracy is not worse by more than 0.02
(non-inferiority) and its hypervolume is larger (outcome). The ablations (Table 3), each against
ParetoPO on HV: w/o Stage 1 (`paretopo.stage1_steps=0`: Pareto ranking from step 1), w/o Stage 2
(`paretopo.pareto_ranking=false`: Stage 1's scalarised estimator throughout), w/o dynamic weighting
(`paretopo.dynamic_weighting=false`: static `w·r` in Stage 1); per-trajectory Stage 1 (the mode in
which Stage 1 acts) against w/o Stage 1 on HV; and the `r_tool` gating ablation: ParetoPO (`r_tool`
paid to successes) against `tool_reward.gate=all` (paid to every sample, the earlier testbed's
reading), expected to have the higher accuracy. The ablation comparisons are tested in the same
Holm family and reported one by one; they enter neither verdict.

**Expected identical by construction, said before any cell runs** (`docs/methods.md`, Stage 1). In
global mode `r_pareto` is one positive scale of every reward of a step; GRPO's z-score divides it
out except through `eps`: bit-exactly when `r_pareto` is a power of two (the 0.5 it sat at on the
earlier page), otherwise within float32 rounding of the advantages (≤ 7.2e-7 measured), which
sampling can amplify over 40 steps. So (a) `paretopo_wo_dyn` is expected to train like `paretopo`,
and (b) `paretopo_wo_rank` (Stage 1's estimator throughout: GRPO on `r_pareto · w·r`) like
`grpo_ds`, exactly or up to that round-off. Where a comparison's differences are all 0 (a), Holm's
family leaves it out (*identical, not tested*); where two comparisons have the same differences (b:
`paretopo` − `paretopo_wo_rank` on HV would duplicate `paretopo` − `grpo_ds` on HV), the family
counts it once (`mojax.stats.holm_family`); a pair that differs only by round-off is tested as
declared. The page's "Identical arms" section names every pair of arms whose held-out evaluations
are equal in every seed.

**Token budgets** (descriptive, not in the Holm family). Each cell's budget is its policy-generated
tokens summed over the 40 steps (`rollout/generated_tokens`: every rollout generated, dynamic
sampling's refills included). Where two compared arms' mean budgets differ by more than 10%, the
page adds a comparison at matched tokens: per seed, each arm's measure at its last evaluation whose
cumulative tokens do not exceed the smaller of the two cells' totals."""


def hv(rows: list[dict]) -> float:
    """Hypervolume of the (accuracy, tool efficiency) points of the evaluated RL checkpoints."""
    pts = [[r[k] for k in OBJ] for r in rows if r.get("step", 0) > 0 and all(k in r for k in OBJ)]
    return hypervolume(np.asarray(pts, float).reshape(-1, 2), REF)


RULE_CALLS = "unneeded calls (rule)"
EFF, ACC, HV = "tool efficiency", "accuracy", "HV (accuracy, tool efficiency)"
MEASURES = (
    X(RULE_CALLS, "mechanism", _report.last("eval/unneeded_calls/rule"), direction="lower"),
    X(EFF, "mechanism", _report.last("eval/tool_efficiency")),
    X(ACC, "outcome", _report.last("eval/accuracy"), sample="success"),
    X(HV, "outcome", hv),
)
COMPARISONS = (
    C("paretopo", "grpo_ds", RULE_CALLS),
    C("paretopo", "grpo_ds", EFF),
    C("paretopo", "grpo_ds", ACC, margin=MARGIN),
    C("paretopo", "grpo_ds", HV),
    C("paretopo", "paretopo_wo_stage1", HV, kind="ablation"),
    C("paretopo", "paretopo_wo_rank", HV, kind="ablation"),
    C("paretopo", "paretopo_wo_dyn", HV, kind="ablation"),
    C("paretopo_pt", "paretopo_wo_stage1", HV, kind="ablation"),
    C("paretopo", "paretopo_gate_all", ACC, kind="ablation"),
)
ARMS = (
    M("grpo_ds", "configs/grpo.py", DAPO),
    M("paretopo", "configs/paretopo.py"),
    M("paretopo_wo_stage1", "configs/paretopo.py", ("--config.paretopo.stage1_steps=0",)),
    M("paretopo_wo_rank", "configs/paretopo.py", ("--config.paretopo.pareto_ranking=false",)),
    M("paretopo_wo_dyn", "configs/paretopo.py", ("--config.paretopo.dynamic_weighting=false",)),
    M("paretopo_pt", "configs/paretopo.py:mode=per_trajectory"),
    M("paretopo_gate_all", "configs/paretopo.py", ("--config.tool_reward.gate=all",)),
)
CURVES = (
    "eval/accuracy",
    "eval/tool_efficiency",
    "eval/unneeded_calls/rule",
    "eval/acc/rule",
    "eval/acc/medium",
    "eval/acc/hard",
)

EARLIER = f"""{paretopo_front.THREE_SEED}
{paretopo_front.AS_EARLIER}
- The grid after this one, where a call buys accuracy: [`paretopo_calls.md`](paretopo_calls.md)."""
# this grid as a later page names it
AS_EARLIER = """- The 8 x 7 grid on the rule calculator ([`paretopo_rule.md`](paretopo_rule.md)): mechanism not
  shown (unneeded calls on rule problems -0.0000, tool efficiency +0.0001, Holm p 1), outcome not
  shown (accuracy not worse, non-inferiority reproduced with Holm p 6e-9, but hypervolume +0.0005,
  Holm p 1); every ablation inconclusive. Pareto ranking kept GRPO's order in every group there
  (methods.md, ParetoPO Stage 2)."""


def claim(seeds, root, quick) -> _claims.Claim:
    rl = (f"--config.steps={2 if quick else 40}",) + (("--config.eval_every=1",) if quick else ())
    return _claims.Claim(
        name="paretopo_rule",
        earlier=EARLIER,
        title="ParetoPO on the rule calculator: unneeded calls, accuracy and the ablations",
        question="On problems whose no-call path is a rule, does ParetoPO drop the unneeded calls "
        "better than GRPO with the same DAPO strategies, without losing accuracy, and which of its "
        "parts does it?",
        prereg=PREREG,
        arms=ARMS,
        measures=MEASURES,
        comparisons=COMPARISONS,
        grid=_grid.Grid(root=root, seeds=seeds, common=QUICK if quick else (), rl=rl),
        curves=CURVES,
        front=OBJ,
    )


if __name__ == "__main__":
    app.run(_claims.cli(claim, "calculator_rule"))
