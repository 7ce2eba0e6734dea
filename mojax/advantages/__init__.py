"""Multi-objective advantage transforms: pure, jit-compiled maps from rewards to advantages.

Every estimator is called as ``f(rewards [P, G, M], valid [P, G], **hyperparameters)`` (VPO and
Multi-RLVR take ``set_rewards [P, G, S, M]``, ``set_valid [P, G, S]``) and returns an
:class:`AdvantageOutput` (``advantages`` float32 ``[P, G]``, ``state``, ``metrics``, ``clip_eps``).
Formulas, seed equation numbers and defaults: ``docs/methods.md``.

``ESTIMATORS`` maps each name to its function; ``METHODS`` maps it to its :class:`Method` descriptor
(input kind, carried state, key, task facts, config sections, hooks), which is how the RL loop calls
it.
"""

from mojax.advantages._common import AdvantageOutput
from mojax.advantages._method import (
    AdvantageInputs,
    EstimatorHooks,
    Method,
    MethodContext,
    to_json_tree,
)
from mojax.advantages.awpo import AWPO, awpo
from mojax.advantages.baselines import MULTI_RLVR, RANDOM_W, multi_rlvr, random_w
from mojax.advantages.gdpo import GDPO, MO_GRPO, gdpo, mo_grpo
from mojax.advantages.grpo import DR_GRPO, GRPO, dr_grpo, grpo
from mojax.advantages.max_at_k import MAX_AT_K, max_at_k
from mojax.advantages.pareto_rank import PARETO_RANK, pareto_rank
from mojax.advantages.saw import SAW_GDPO, SAW_GRPO, saw_gdpo, saw_grpo
from mojax.advantages.vpo import VPO, vpo

# Plain dicts from name to descriptor and to function (no mutable registry).
METHODS = {
    m.name: m
    for m in (
        GRPO,
        DR_GRPO,
        GDPO,
        MO_GRPO,
        SAW_GRPO,
        SAW_GDPO,
        AWPO,
        PARETO_RANK,
        VPO,
        RANDOM_W,
        MULTI_RLVR,
        MAX_AT_K,
    )
}

ESTIMATORS = {name: m.fn for name, m in METHODS.items()}

__all__ = [
    "ESTIMATORS",
    "METHODS",
    "AdvantageInputs",
    "AdvantageOutput",
    "EstimatorHooks",
    "Method",
    "MethodContext",
    "to_json_tree",
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
