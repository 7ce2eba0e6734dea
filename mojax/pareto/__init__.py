"""Pareto primitives: jit non-dominated sorting, hypervolume, archive, ParetoPO Stage 1.

Public names (``docs/architecture.md``, "Data contracts"): :func:`nondominated_rank`, :func:`hypervolume`.
"""

from mojax.pareto.archive import archive_add, is_dominated_by, nondominated_filter
from mojax.pareto.hypervolume import hv_contribution, hypervolume
from mojax.pareto.nondominated import dominance_matrix, nondominated_rank
from mojax.pareto.scalarization import (
    STAGE1_MODES,
    Stage1State,
    r_pareto_from_dhv,
    stage1_cancellation_warning,
    stage1_init,
    stage1_sample_scales,
    stage1_update,
)
from mojax.pareto.tool_efficiency import (
    N_OPT_SOURCES,
    NO_SUCCESS_MODES,
    TOOL_GATES,
    NOptimalTracker,
    fixed_tool_reward,
    gate_by_success,
    tool_efficiency_reward,
)

__all__ = [
    "N_OPT_SOURCES",
    "NO_SUCCESS_MODES",
    "TOOL_GATES",
    "fixed_tool_reward",
    "gate_by_success",
    "NOptimalTracker",
    "STAGE1_MODES",
    "Stage1State",
    "archive_add",
    "dominance_matrix",
    "hv_contribution",
    "hypervolume",
    "is_dominated_by",
    "nondominated_filter",
    "nondominated_rank",
    "r_pareto_from_dhv",
    "stage1_cancellation_warning",
    "stage1_init",
    "stage1_sample_scales",
    "stage1_update",
    "tool_efficiency_reward",
]
