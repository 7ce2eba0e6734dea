"""SAW (arXiv:2606.07705) on the calculator's rule problem set: do batch coefficient-of-variation
weights learn a slow objective faster than equal static weights, is it the adaptation or merely
other weights, and is r_task kept while they do?

    python experiments/saw_rule.py --prereg       # the page's pre-registration
    python experiments/saw_rule.py                # 8 seeds x 5 arms -> docs/results/saw_rule.md
    python experiments/saw_rule.py --report_only  # the page from the archived cells

The arm ``grpo_saw_static`` holds SAW's weights static at their time average over every step and
every pre-registered seed (``SEEDS``) of the ``saw_grpo`` cells (``saw_cv.saw_average_weights``), so
it runs after all of them (the cli's second pass). A cell not under the grid's root is read from
the archive (``docs/results/saw_rule/cells``, or ``--out``'s), so an invocation with any
``--seeds``, on any machine or session, and ``--report_only`` in a fresh clone declare the same arm. The earlier design (``experiments/saw_cv.py``, ``docs/results/saw_cv.md``) ran on the
facts problem set with ``think=0.1``; this is a new page. Host-side only: every cell is its own
``python -m mojax.main`` process.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app  # noqa: E402

from experiments import _calculator, _claims, _grid, _report, saw_cv  # noqa: E402
from experiments.saw_cv import EQUAL, OBJECTIVES, saw_average_weights  # noqa: E402

M, C, X = _grid.Method, _claims.Comparison, _claims.Measure
THINK = 0.3  # the plan context: 30% of the SFT demonstrations open with a plan
STEPS, EVAL_EVERY, PLATEAU = 80, 10, 0.7
MARGIN = 0.02  # "r_task not lower": not worse by more than 2 points of held-out accuracy
SAME = ("--config.ppo.clip_high=0.2",)  # every arm: GRPO's clip 0.2 / 0.2 (SAW's paper recipe)
EQUAL_W = (f"--config.advantage.weights={EQUAL}",)
SEEDS = tuple(range(8))  # the pre-registered seeds: SAW's static weights average all of them

PREREG = f"""**Earlier grids.** `docs/results/saw_cv.md` (`experiments/saw_cv.py`, 8 seeds, the facts
problem set, `think=0.1`): mechanism *not shown* (held-out `r_format` ≥ 0.7 reached 25.6 steps
sooner than equal-weight GRPO, reproduced, but +0.6 steps against SAW's own time-averaged weights
held static, inconclusive); outcome *not shown* (mean of the three +0.030, Holm p 0.11; `r_task`
−0.071, by problem [−0.094, −0.048]): `r_task` was lost to the slowly trained plan context. An
earlier 3-seed ablation with `think=0.3` (the removed page `saw_cv_think0.3.md`, in git history at
90982b4) showed `r_task` −0.008 (2 SE 0.024) with `r_format` still learned faster (+0.053 in the
training mean over steps, 15 SE). This page is a new design on a new testbed; it does not revise
those.

**Setting.** SAW's asynchronous-learning setting (Sec. 3.1) on the rule calculator (the embedded
default's data: `rule` problems solved without the tool on operands never seen in training,
`medium` / `hard` ones that need it; 1024 held-out test problems disjoint from training). Objectives
`(r_task, r_tool, r_format)`, `r_format` = a `<think>` plan first, shown in {THINK:.0%} of the SFT
demonstrations (`think={THINK}`: enough plan demonstrations that the plan context is trained, after
the think=0.3 ablation above), so it starts low while `r_task` and `r_tool` start high. 500-step SFT
warm start per seed (shared by the arms), {STEPS} RL steps of 16 prompts × 8 samples, held-out
evaluation (avg@4 at T = 1) every {EVAL_EVERY} steps. Every arm: clip 0.2 / 0.2, no dynamic sampling.

**Design check (before this page; not a cell of the grid).** `configs/saw.py:think=0.3`
(SAW-GRPO, clip 0.2 / 0.2), seed 0, 20 RL steps (a `/tmp` workdir, not archived). Held-out
`r_format` starts low and rises: 0.286 → 0.464 (step 10) → 0.656 (step 20); `r_task` does not fall:
0.881 → 0.899 → 0.914 (rule 0.967 → 0.951, medium 0.717 → 0.833, hard 0.816 → 0.890); `r_tool`
0.772 → 0.808. Training `r_format` 0.31 in the first steps, 0.59-0.70 in the last; SAW's weight on
`r_format` 0.68 at the start, 0.47-0.56 at the end (mean 0.59 over the 20 steps). One run of one
arm: it checks the setting (slow objective low and rising, `r_task` kept), not a hypothesis.

**Arms.** SAW at reward level (SAW-GRPO); GRPO with **equal** static weights (the paper's baseline);
GRPO with SAW's **time-averaged** weights held static (the earlier design's control: separates
"adaptive" from "other weights"); SAW at advantage level (SAW-GDPO); GDPO with equal static weights.
The control `grpo_saw_static` is `configs/grpo.py:think={THINK}` with
`--config.advantage.weights=` the mean of `advantage/saw/weight/<objective>` over every step and seed
of the `saw_grpo` cells, normalised to sum 1 (`saw_cv.saw_average_weights`): it enters the arms'
table below, and runs, once every `saw_grpo` cell is done.

**Hypotheses.** Mechanism: SAW learns the slow objective faster: a higher training `r_format`
averaged over the {STEPS} steps than equal static weights (SAW-GRPO vs GRPO, SAW-GDPO vs GDPO) and
than SAW's own weights held static; SAW-GRPO reaches a held-out `r_format` ≥ {PLATEAU} in fewer steps
than equal-weight GRPO (a cell that never reaches it counts as {STEPS + EVAL_EVERY}, one evaluation
past the end). Outcome: SAW ends with a higher mean of the three held-out objectives than its
equal-weight base (GRPO, GDPO), with held-out `r_task` not lower (non-inferiority, margin
{MARGIN}: the paper reports correctness unchanged). Reported beside the tests (descriptive, not
tested): the final held-out `r_format` and `r_tool`, SAW's weight on `r_format` over training; a descriptive measure's direction column states
no hypothesis."""


# the first evaluation at the plateau; a cell that never reaches it counts one evaluation past the end
steps_to_plateau = _report.first_step_at("eval/r_format", PLATEAU, STEPS + EVAL_EVERY)
mean_objectives = _report.mean_last([f"eval/{o}" for o in OBJECTIVES])


def train_format(rows: list[dict]) -> float:
    """The training samples' ``r_format``, mean over every RL step (how fast it is learned)."""
    _, v = _report.series(rows, "reward/r_format/mean")
    return float(np.mean(v)) if v else float("nan")


def saw_format_weight(rows: list[dict]) -> float:
    """SAW's weight on ``r_format``, mean over every RL step (nan for an arm without SAW)."""
    _, v = _report.series(rows, "advantage/saw/weight/r_format")
    return float(np.mean(v)) if v else float("nan")


FORMAT = "train r_format, mean over steps"
PLATEAU_NAME = f"steps to held-out r_format >= {PLATEAU}"
MEAN3 = "final mean of the three objectives"
MEASURES = (
    X(FORMAT, "mechanism", train_format),
    X(PLATEAU_NAME, "mechanism", steps_to_plateau, direction="lower"),
    X(MEAN3, "outcome", mean_objectives),
    X("final r_task", "outcome", _report.last("eval/r_task"), sample="r_task"),
    X("final r_format", "descriptive", _report.last("eval/r_format")),
    X("final r_tool", "descriptive", _report.last("eval/r_tool")),
    X("SAW weight on r_format, mean over steps", "descriptive", saw_format_weight),
)
# plotted per arm (results only; the pre-registration does not name them): the held-out objectives
# and the training r_format that the mechanism measures
CURVES = ("eval/r_task", "eval/r_format", "eval/r_tool", "reward/r_format/mean")
COMPARISONS = (
    C("saw_grpo", "grpo_equal", FORMAT),
    C("saw_grpo", "grpo_saw_static", FORMAT),
    C("saw_gdpo", "gdpo_equal", FORMAT),
    C("saw_grpo", "grpo_equal", PLATEAU_NAME),
    C("saw_grpo", "grpo_equal", MEAN3),
    C("saw_grpo", "grpo_equal", "final r_task", margin=MARGIN),
    C("saw_gdpo", "gdpo_equal", MEAN3),
    C("saw_gdpo", "gdpo_equal", "final r_task", margin=MARGIN),
)


def _archive() -> str:
    """The archived cells (``<out>/saw_rule/cells``; ``--out`` defaults to docs/results)."""
    from absl import flags

    from experiments import _cli

    out = _cli.OUT.value if flags.FLAGS.is_parsed() else None
    return os.path.join(os.path.abspath(out or os.path.join(_claims.REPO, "docs", "results")),
                        "saw_rule", "cells")  # fmt: skip


def static_weights(root: str, seeds, quick: bool, archive: str | None = None) -> str | None:
    """``grpo_saw_static``'s weights: SAW's time average over the ``saw_grpo`` cells of every
    pre-registered seed (``--quick``: of its own seeds), each from ``root`` or else ``archive``;
    None until every one is done."""
    if quick:
        return saw_average_weights(root, seeds)
    return saw_average_weights(root, SEEDS, archive or _archive())


def claim(seeds, root, quick) -> _claims.Claim:
    t = f"think={THINK}"
    arms = (
        M("saw_grpo", f"configs/saw.py:{t}", SAME),
        M("grpo_equal", f"configs/grpo.py:{t}", EQUAL_W),
        M("saw_gdpo", f"configs/saw.py:mode=gdpo,{t}", SAME),
        M("gdpo_equal", f"configs/gdpo.py:{t}", SAME + EQUAL_W),
    )
    static = static_weights(root, seeds, quick)
    if static is not None:  # once every saw_grpo cell is done (the cli declares the claim twice)
        weights = (f"--config.advantage.weights={static}",)
        arms += (M("grpo_saw_static", f"configs/grpo.py:{t}", weights),)
    rl = (
        f"--config.steps={2 if quick else STEPS}",
        f"--config.eval_every={1 if quick else EVAL_EVERY}",
    )
    common = (f"--config.sft.think_rate={THINK}",) + (_calculator.QUICK_COMMON if quick else ())
    return _claims.Claim(
        name="saw_rule",
        earlier=f"{saw_cv.THREE_SEED}\n{saw_cv.AS_EARLIER}",
        title="SAW: CV weights on a slowly learned plan format, on the rule calculator",
        question="Do SAW's batch CV weights learn the slow format objective faster than equal "
        "static weights, is it the adaptation or merely other weights, and is r_task kept?",
        prereg=PREREG,
        arms=arms,
        measures=MEASURES,
        comparisons=COMPARISONS,
        grid=_grid.Grid(root=root, seeds=seeds, common=common, rl=rl),
        curves=CURVES,
        front=("eval/r_task", "eval/r_format"),
    )


if __name__ == "__main__":
    app.run(_claims.cli(claim, "calculator_rule_think"))
