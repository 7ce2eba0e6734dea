"""Task scoring and judging of a rollout batch, split across processes.

Each process scores the rows of the prompt groups it owns (``mojax.distributed.owner_of_groups``,
the same rows whose tools it ran); the per-row rewards, validity and invalid-reward counts are
all-gathered, so every process holds the whole ``[B, M]`` (or ``[B, S, M]``) tensor and the same
``RewardStats``. One process: the task's own batch scorer, unchanged. The judge source splits its
calls the same way (``mojax.rewards.judge.judge_owned``).

Shapes: B = P * G rows (prompt-major), M objectives, S answers per completion (multi-answer sets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax import distributed
from mojax.tasks.framework.base import RewardStats, ScoreBatch, SetScoreBatch, Task


def score_owned(
    task: Task,
    responses: Sequence[Any],
    rows: Sequence[Any],
    num_samples: int,
    *,
    stats: RewardStats | None = None,
    num_answers: int = 0,
) -> ScoreBatch | SetScoreBatch:
    """``task.score_batch`` (or ``score_set_batch`` with ``num_answers`` > 0) of ``B`` rows, each
    process scoring its own groups; ``stats`` gets every process's counts."""
    stats = RewardStats() if stats is None else stats
    if distributed.process_count() == 1:
        return _score(task, responses, rows, num_answers, stats)
    mine = np.flatnonzero(
        distributed.row_owners(len(rows), num_samples) == distributed.process_index()
    )
    local = RewardStats()
    part = _score(task, [responses[i] for i in mine], [rows[i] for i in mine], num_answers, local)
    arrays = (part.set_rewards, part.set_valid) if num_answers else (part.rewards, part.valid)
    gathered = distributed.allgather_objects((mine, arrays, local))
    values = np.zeros((len(rows), *arrays[0].shape[1:]), arrays[0].dtype)
    valid = np.zeros((len(rows), *arrays[1].shape[1:]), bool)
    for idx, (v, ok), counts in gathered:
        values[idx], valid[idx] = v, ok
        stats.scored += counts.scored
        stats.invalid += counts.invalid
        stats.reasons.update(counts.reasons)
    if num_answers:
        return SetScoreBatch(values, valid, stats)
    return ScoreBatch(values, valid, stats, task.external_objectives)


def _score(task, responses, rows, num_answers, stats):
    if num_answers:
        return task.score_set_batch(responses, rows, num_answers, stats=stats)
    return task.score_batch(responses, rows, stats=stats)
