"""From rollouts to the reward batch ``rewards [P, G, M]``, ``valid [P, G]``, ``objective_valid
[P, G, M]`` (``docs/architecture.md``, "Data contracts"); for a multi-answer task (``num_answers``
S > 0, VPO's answer sets) also ``set_rewards [P, G, S, M]`` / ``set_valid [P, G, S]``.

The task scores every row (``Task.score_batch``, each process its own groups: failures are invalid
and counted, never raised); then each external objective is filled by its reward source
(``mojax.rewards.source``), in the task's order, each with its carried state. ``objective_valid``
is ``valid`` per objective, False also where a source could not score that objective of a valid
sample (the sample keeps its other objectives). A multi-answer batch is scored answer by answer
(``Task.score_set_batch``); its ``rewards`` is each set's mean over its valid answers (for logging)
and its sources' states pass through unchanged. Host-side; the states are returned, not mutated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mojax.rewards.registry import missing_source_error
from mojax.rewards.scoring import score_owned
from mojax.rewards.source import RewardSource, ScoreContext
from mojax.tasks.framework.base import RewardStats, Task


@dataclasses.dataclass
class RewardBatch:
    """``rewards float32 [P, G, M]`` (0 where invalid), ``valid bool [P, G]``, ``objective_valid
    bool [P, G, M]``, metrics, the sources' new states by source name, and for answer sets
    ``set_rewards float32 [P, G, S, M]`` / ``set_valid bool [P, G, S]``."""

    rewards: np.ndarray
    valid: np.ndarray
    metrics: dict[str, float]
    objective_valid: np.ndarray | None = None
    states: dict[str, Any] = dataclasses.field(default_factory=dict)
    set_rewards: np.ndarray | None = None
    set_valid: np.ndarray | None = None


def score_rollouts(
    task: Task,
    examples: Sequence[Any],
    responses: Sequence[str],
    n_calls,
    num_samples: int,
    *,
    sources: Sequence[RewardSource] = (),
    states: Mapping[str, Any] | None = None,
    prompts_text: Sequence[str] | None = None,
    stats: RewardStats | None = None,
    num_answers: int = 0,
) -> RewardBatch:
    """Scores ``B = P * G`` responses of ``P`` examples (row ``p * G + g``).

    Args:
      task: the task (declares objectives; external ones are filled by ``sources``).
      examples: the ``P`` examples of the batch.
      responses: ``B`` decoded responses (the assistant text, tool observations included).
      n_calls: int [B] tool calls per response.
      num_samples: G.
      sources: the reward sources; one for each external objective of the task.
      states: each source's carried state by source name (absent: a fresh start).
      prompts_text: the ``P`` rendered prompts (for sources that read them).
      stats: running reward statistics (invalid counts by reason) to add to.
      num_answers: S > 0: each response is a set of S answers (``score_sets``).
    """
    p, g = len(examples), int(num_samples)
    if len(responses) != p * g:
        raise ValueError(f"responses: expected P*G = {p}*{g} rows, got {len(responses)}")
    if num_answers:
        return score_sets(task, examples, responses, g, int(num_answers), states, stats)
    n_calls = np.asarray(n_calls, np.int64).reshape(p, g)
    rows = [ex for ex in examples for _ in range(g)]
    sb = score_owned(task, responses, rows, g, stats=stats)  # each process its own groups
    rewards, valid = sb.rewards.copy(), sb.valid.copy()
    objective_valid = np.repeat(valid[:, None], task.num_objectives, axis=1)
    by_objective = {s.objective: s for s in sources}
    states = dict(states or {})
    metrics: dict[str, float] = {}
    for name in sb.external:
        source = by_objective.get(name)
        if source is None:
            raise ValueError(missing_source_error(task, name))
        ctx = ScoreContext(
            task, examples, rows, responses, n_calls, g, rewards, valid, prompts_text, sb.stats
        )
        col = source.column(ctx, states.get(source.name))
        k = task.objective_index(name)
        rewards[:, k] = np.asarray(col.values, np.float32).reshape(-1)
        if col.valid is not None:
            objective_valid[:, k] &= np.asarray(col.valid, bool).reshape(-1)
        if col.state is not None:
            states[source.name] = col.state
        metrics.update(col.metrics)
    rewards[~valid] = 0.0
    metrics.update(_reward_metrics(task, rewards, valid))
    metrics["reward/valid_fraction"] = float(valid.mean())
    metrics["tool/calls_mean"] = float(n_calls.mean())
    return RewardBatch(
        rewards.reshape(p, g, -1),
        valid.reshape(p, g),
        metrics,
        objective_valid.reshape(p, g, -1),
        states,
    )


def score_sets(
    task: Task,
    examples: Sequence[Any],
    responses: Sequence[str],
    num_samples: int,
    num_answers: int,
    states: Mapping[str, Any] | None = None,
    stats: RewardStats | None = None,
) -> RewardBatch:
    """A multi-answer batch (``score_rollouts`` with ``num_answers`` S > 0): ``set_rewards [P, G,
    S, M]`` and ``set_valid [P, G, S]`` scored answer by answer (each process its own groups);
    ``rewards`` is each set's mean over its valid answers, ``valid`` whether any answer is."""
    p, g, s = len(examples), int(num_samples), int(num_answers)
    rows = [ex for ex in examples for _ in range(g)]
    sb = score_owned(task, responses, rows, g, stats=stats, num_answers=s)
    set_rewards = sb.set_rewards.reshape(p, g, s, -1)
    set_valid = sb.set_valid.reshape(p, g, s)
    w = set_valid[..., None].astype(np.float32)
    mean = (set_rewards * w).sum(2) / np.maximum(w.sum(2), 1.0)
    valid = set_valid.any(-1)
    metrics = {
        f"reward/{n}/mean": float(mean[..., k][valid].mean()) if valid.any() else 0.0
        for k, n in enumerate(task.objective_names)
    }
    scal = task.scalar(mean)
    metrics["reward/scalar/mean"] = float(scal[valid].mean()) if valid.any() else 0.0
    metrics["reward/valid_answer_fraction"] = float(set_valid.mean())
    return RewardBatch(
        mean, valid, metrics, states=dict(states or {}), set_rewards=set_rewards,
        set_valid=set_valid,
    )  # fmt: skip


def _reward_metrics(task: Task, rewards: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    out = {}
    sel = rewards[valid] if valid.any() else np.zeros((1, task.num_objectives), np.float32)
    for k, name in enumerate(task.objective_names):
        out[f"reward/{name}/mean"] = float(sel[:, k].mean())
    if len(task.scalar_weights) == task.num_objectives:
        out["reward/scalar/mean"] = float(task.scalar(sel).mean())
    return out
