"""The tool-efficiency source: ``r_tool`` (ParetoPO, arXiv:2606.16111, Eq. 4) with its ``N_optimal``
tracker as the source's carried state.

``r_tool = exp(-alpha |N_call - N_opt|)`` per sample, with ``N_opt`` the fewest tool calls of a
success on the prompt so far (the current group included; ``n_opt="tracked"``) or the task's rule
(``task.optimal_calls(example)``; ``n_opt="fixed"``, the tracker still updated); paid to every
sample (``gate="all"``) or to successes only (``"success"``). The maths lives in
``mojax.pareto.tool_efficiency``; this module is its seam to the reward batch. Its state, per split,
is ``NOptimalTracker.to_state()``. Multi-host: every process computes it identically from the
gathered batch (no collective), so the trackers stay equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax.pareto import N_OPT_SOURCES, NOptimalTracker, fixed_tool_reward, gate_by_success
from mojax.rewards.source import Column, RewardSource, ScoreContext
from mojax.tasks.framework.base import Task


@dataclasses.dataclass(frozen=True)
class ToolEfficiency(RewardSource):
    """``r_tool`` (see the module docstring); settings from ``config.tool_reward``."""

    name = "tool_efficiency"
    objective = "r_tool"
    description = "tool efficiency, ParetoPO Eq. 4 with its N_optimal tracker"

    alpha: float = 0.7
    no_success: str = "zero"
    gate: str = "all"
    n_opt: str = "tracked"

    @classmethod
    def from_spec(cls, reward_spec: Any) -> ToolEfficiency:
        """From the run spec's reward section (``tool_reward.*``)."""
        r = reward_spec
        return cls(alpha=r.alpha, no_success=r.no_success, gate=r.gate, n_opt=r.n_opt)

    def column(self, ctx: ScoreContext, state: Any) -> Column:
        p, g = len(ctx.examples), ctx.num_samples
        tracker = NOptimalTracker() if state is None else NOptimalTracker.from_state(state)
        ok = (ctx.task.is_success(ctx.rewards) & ctx.valid).reshape(p, g)
        kw = dict(alpha=self.alpha, no_success=self.no_success, gate=self.gate, n_opt=self.n_opt)
        tracker, r_tool = tool_column(ctx.task, ctx.examples, ctx.n_calls, ok, tracker, **kw)
        return Column(r_tool.reshape(-1), state=tracker.to_state())


def n_opt_errors(task: Task, key: str, value: str) -> list[str]:
    """A fixed ``N_opt`` (``value == "fixed"`` at config ``key``) needs a task with ``r_tool`` and a
    rule for it (``optimal_calls(example)``)."""
    has_rule = "r_tool" in task.objective_names and callable(getattr(task, "optimal_calls", None))
    if value != "fixed" or has_rule:
        return []
    return [
        f"config.{key}: 'fixed' needs a task with r_tool and a fixed N_opt (optimal_calls); "
        f"task {task.name!r} has none"
    ]


def tool_column(
    task: Task,
    examples: Sequence[Any],
    n_calls,
    success,
    tracker: NOptimalTracker,
    *,
    alpha: float = 0.7,
    no_success: str = "zero",
    gate: str = "all",
    n_opt: str = "tracked",
) -> tuple[NOptimalTracker, np.ndarray]:
    """``r_tool [P, G]`` (Eq. 4) of one batch and the updated ``N_optimal`` tracker.

    ``n_opt="tracked"``: against the tracker's ``N_optimal`` (the current group included);
    ``"fixed"``: against ``task.optimal_calls(example)`` (the task's rule; the tracker is still
    updated). ``gate="success"`` pays it to successful samples only (``success [P, G]``), ``"all"``
    to every sample (:func:`mojax.pareto.gate_by_success`)."""
    if n_opt not in N_OPT_SOURCES:
        raise ValueError(f"n_opt must be one of {N_OPT_SOURCES}; got {n_opt!r}")
    ids = [ex.id for ex in examples]
    tracker, r_tool = tracker.step(ids, n_calls, success, alpha=alpha, no_success=no_success)
    if n_opt == "fixed":
        rule = getattr(task, "optimal_calls", None)
        if not callable(rule):
            raise ValueError(f"task {task.name!r} has no optimal_calls: tool_reward.n_opt='fixed'")
        r_tool = fixed_tool_reward(n_calls, [rule(ex) for ex in examples], alpha=alpha)
    return tracker, gate_by_success(r_tool, success, gate)
