"""The calculator grid shared by the ParetoPO and SAW claims (same cells, same root).

Every method here runs on the embedded default (tiny Qwen3 model, calculator tool task, 500-step SFT
warm start, ``(r_task, r_tool)``), so one SFT checkpoint per seed serves them all and a cell run for
one claim is reused by the other (``_grid`` skips cells that are done).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments import _grid

if TYPE_CHECKING:  # importing _cli defines its absl flags
    from experiments._cli import Settings

M = _grid.Method
# in the order the full grid runs them (an interrupted grid has every seed of the first ones)
METHODS = [
    M("paretopo", "configs/paretopo.py"),  # Stage 1 + Stage 2, normalize=zscore (the default)
    M("grpo", "configs/grpo.py"),  # static scalarisation w = (0.6, 0.4)
    M("gdpo", "configs/gdpo.py"),
    M("saw_grpo", "configs/saw.py"),
    M("saw_gdpo", "configs/saw.py:mode=gdpo"),
    M("dr_grpo", "configs/dr_grpo.py"),
    M("mo_grpo", "configs/mo_grpo.py"),
    M("paretopo_wo_dyn", "configs/paretopo.py", ("--config.paretopo.dynamic_weighting=false",)),
    M("paretopo_wo_rank", "configs/paretopo.py", ("--config.paretopo.pareto_ranking=false",)),
    M("paretopo_norm_none", "configs/paretopo.py:normalize=none"),
    M("paretopo_norm_center", "configs/paretopo.py:normalize=center"),
]

# --quick: a 20-step SFT, a 16-problem held-out split (x 4 samples), evaluation every RL step
QUICK_COMMON = (
    "--config.sft.steps=20",
    "--config.task.num_eval=16",
    "--config.task.num_validation=16",
)

# The testbed every calculator grid up to 2026-12-06 ran on (docs/results/*.md): the "facts" problem
# set, r_tool paid to every sample, 128 held-out problems (validation = test size), ParetoPO's
# greedy one-sample validation against v_0. The embedded default changed after them (issue 47;
# docs/results/default_run.md); a rerun of these grids keeps the design they were registered with.
LEGACY_TESTBED = (
    "--config.task.kwargs.problems=facts",
    "--config.tool_reward.gate=all",
    "--config.paretopo.validation_samples=1",
    "--config.paretopo.validation_temperature=0.0",
    "--config.paretopo.validation_n_opt=tracked",
    "--config.paretopo.reference=initial",
)


def legacy_common(quick: bool) -> tuple[str, ...]:
    """The earlier testbed's keys, with the held-out size of ``--quick`` (16) or of the grids (128)."""
    held_out = ("--config.task.num_eval=128", "--config.task.num_validation=0")
    return LEGACY_TESTBED + (QUICK_COMMON if quick else held_out)


def grid(s: Settings) -> _grid.Grid:
    common = legacy_common(s.quick)
    rl = (f"--config.steps={s.steps}",) + (("--config.eval_every=1",) if s.quick else ())
    return _grid.Grid(root=s.root, seeds=s.seeds, common=common, rl=rl)
