"""The reward-source protocol: a plug-in that fills one external objective of the reward batch.

A task declares its objectives (``mojax.tasks.framework.types.Objective``); those it marks ``external`` are
filled by a source after the task's own scoring (``mojax.rewards.batch.score_rollouts``). A source
sees the batch (:class:`ScoreContext`) and its own carried state, and returns a :class:`Column`:

* ``values float32 [B]``: the objective's column (rows prompt-major, ``p * G + g``);
* ``valid bool [B]`` or None: False where the source could not score the row. Such a row stays a
  valid sample; only this objective's entry of the per-objective validity mask
  (``objective_valid [P, G, M]``) is False;
* ``state``: the source's new carried state as JSON data (it lives in
  ``HostState.reward_state[<source name>][<split>]``);
* ``metrics``: scalars logged with the step.

Sources are immutable settings plus pure functions of ``(context, state)``; options a caller sets
for one rollout (``with_options``) return a copy. Multi-host: every process calls every source on
the same all-gathered batch and state; a source that works per row splits the rows itself (each
process its own groups) and all-gathers what it computed, so every process returns the same column
and state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from mojax.tasks.framework.base import RewardStats, Task


@dataclasses.dataclass(frozen=True)
class ScoreContext:
    """One rollout batch as a source sees it.

    Attributes:
      task: the task; examples: the ``P`` examples; rows: the example of each of the ``B = P * G``
      rows; responses: the ``B`` decoded responses; n_calls: int ``[P, G]`` tool calls;
      num_samples: G; rewards: float32 ``[B, M]``, the task's scores and the columns filled so far
      (read-only); valid: bool ``[B]``; prompts_text: the ``P`` rendered prompts (or None); stats:
      the split's reward statistics (a source adds its own invalid reasons).
    """

    task: Task
    examples: Sequence[Any]
    rows: Sequence[Any]
    responses: Sequence[str]
    n_calls: np.ndarray
    num_samples: int
    rewards: np.ndarray
    valid: np.ndarray
    prompts_text: Sequence[str] | None
    stats: RewardStats


@dataclasses.dataclass
class Column:
    """What a source returns (see the module docstring)."""

    values: np.ndarray
    valid: np.ndarray | None = None
    state: Any = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RewardSource:
    """Base of the reward sources: ``name`` (its key in the host state and in ``Method.reward_sources``),
    the ``objective`` it fills, a one-line ``description`` (said in errors), and :meth:`column`."""

    name: ClassVar[str] = ""
    objective: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs_prompts: ClassVar[bool] = False  # reads ``ScoreContext.prompts_text``

    def column(self, ctx: ScoreContext, state: Any) -> Column:
        raise NotImplementedError

    def with_options(self, options: Mapping[str, Any]) -> RewardSource:
        """A copy with the options among ``options`` that are fields of this source (others are
        another source's and ignored)."""
        mine = {f.name for f in dataclasses.fields(self)}
        own = {k: v for k, v in options.items() if k in mine and v is not None}
        return dataclasses.replace(self, **own) if own else self
