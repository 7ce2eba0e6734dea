"""The calculator grid shared by the ParetoPO and SAW claims (same cells, same root).

Every method here runs on the embedded default (tiny Qwen3 model, calculator tool task, 500-step SFT
warm start, ``(r_task, r_tool)``), so one SFT checkpoint per seed serves them all and a cell run for
one claim is reused by the other (``_grid`` skips cells that are done).
"""

from __future__ import annotations

from experiments import _grid
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
QUICK_COMMON = ("--config.sft.steps=20", "--config.task.num_eval=16")


def grid(s: Settings) -> _grid.Grid:
    common = QUICK_COMMON if s.quick else ()
    rl = (f"--config.steps={s.steps}",) + (("--config.eval_every=1",) if s.quick else ())
    return _grid.Grid(root=s.root, seeds=s.seeds, common=common, rl=rl)
