"""Multi-objective advantage transforms: pure, jit-compiled maps from rewards to advantages.

Every estimator is called as ``f(rewards [P, G, M], valid [P, G], **hyperparameters)`` (VPO and
Multi-RLVR take ``set_rewards [P, G, S, M]``, ``set_valid [P, G, S]``) and returns an
:class:`AdvantageOutput` (``advantages`` float32 ``[P, G]``, ``state``, ``metrics``, ``clip_eps``).
Formulas, seed equation numbers and defaults: ``docs/methods.md``.
"""

from mojax.advantages._common import AdvantageOutput
from mojax.advantages.awpo import awpo
from mojax.advantages.baselines import multi_rlvr, random_w
from mojax.advantages.gdpo import gdpo, mo_grpo
from mojax.advantages.grpo import dr_grpo, grpo
from mojax.advantages.max_at_k import max_at_k
from mojax.advantages.pareto_rank import pareto_rank
from mojax.advantages.saw import saw_gdpo, saw_grpo
from mojax.advantages.vpo import vpo

# A plain dict from name to function (no mutable registry).
ESTIMATORS = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "gdpo": gdpo,
    "mo_grpo": mo_grpo,
    "saw_grpo": saw_grpo,
    "saw_gdpo": saw_gdpo,
    "awpo": awpo,
    "pareto_rank": pareto_rank,
    "vpo": vpo,
    "random_w": random_w,
    "multi_rlvr": multi_rlvr,
    "max_at_k": max_at_k,
}

__all__ = [
    "ESTIMATORS",
    "AdvantageOutput",
    "awpo",
    "dr_grpo",
    "gdpo",
    "grpo",
    "max_at_k",
    "mo_grpo",
    "multi_rlvr",
    "pareto_rank",
    "random_w",
    "saw_gdpo",
    "saw_grpo",
    "vpo",
]
