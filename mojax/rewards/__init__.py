"""Reward sources as plug-ins: how rollouts become the reward batch (``docs/architecture.md``).

* ``source``: the protocol (``RewardSource``, ``ScoreContext``, ``Column``);
* ``scoring``: the task's own scoring of a batch, each process its own groups;
* ``tool_efficiency``: ``r_tool`` with its ``N_optimal`` tracker (ParetoPO Eq. 4);
* ``judge``: ``r_reason``, a judge's score (AWPO's reasoning reward);
* ``batch``: ``score_rollouts``, the task's scores and every source's column, with the
  per-objective validity mask ``objective_valid [P, G, M]``;
* ``shaping``: DAPO's overlong penalty and dynamic sampling's group filter;
* ``registry``: the sources by objective, building them for a run, their host state per split.

Extra objectives by import path (``config.task.extra_rewards``) are scored with the task's own
(``mojax.tasks.framework.extra_rewards``).
"""

from mojax.rewards.batch import RewardBatch, score_rollouts
from mojax.rewards.judge import JudgeSource, judge_owned
from mojax.rewards.registry import (
    SOURCES,
    build_sources,
    option_errors,
    split_states,
    with_options,
    with_split_states,
)
from mojax.rewards.scoring import score_owned
from mojax.rewards.shaping import groups_with_signal, overlong_penalty, shape_overlong
from mojax.rewards.source import Column, RewardSource, ScoreContext
from mojax.rewards.tool_efficiency import ToolEfficiency, tool_column

__all__ = [
    "SOURCES",
    "Column",
    "JudgeSource",
    "RewardBatch",
    "RewardSource",
    "ScoreContext",
    "ToolEfficiency",
    "build_sources",
    "groups_with_signal",
    "judge_owned",
    "option_errors",
    "overlong_penalty",
    "score_owned",
    "score_rollouts",
    "shape_overlong",
    "split_states",
    "tool_column",
    "with_options",
    "with_split_states",
]
