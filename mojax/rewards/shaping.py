"""Reward shaping every method shares (DAPO): the soft overlong penalty on the success objective(s)
and dynamic sampling's group filter, judged **per objective** (``docs/methods.md``): a group is
kept if any objective varies among its valid samples. Host-side and deterministic; every process
applies them to the same all-gathered rewards.
"""

from __future__ import annotations

import numpy as np

from mojax.tasks.framework.base import Task


def overlong_penalty(lengths, max_len: int, buffer: int, penalty: float = 1.0) -> np.ndarray:
    """DAPO's soft overlong punishment (DAPO Eq. 13), float32 [B] in [-penalty, 0].

    0 while ``length <= max_len - buffer``, then linear down to ``-penalty`` at ``max_len``
    (lengths counted in response tokens). ``buffer = 0`` disables it.
    """
    lengths = np.asarray(lengths, np.float64)
    if buffer <= 0:
        return np.zeros(lengths.shape, np.float32)
    start = max_len - buffer
    return (-penalty * np.clip((lengths - start) / buffer, 0.0, 1.0)).astype(np.float32)


def shape_overlong(
    task: Task, rewards, valid, lengths, *, max_len: int, buffer: int, penalty: float
) -> None:
    """Adds :func:`overlong_penalty` of ``lengths [B]`` to the success objective(s) of ``rewards
    [P, G, M]`` in place (0 where ``valid [P, G]`` is False); ``buffer = 0`` leaves them as they
    are."""
    if buffer <= 0:
        return
    pen = overlong_penalty(np.asarray(lengths), max_len, buffer, penalty).reshape(valid.shape)
    for k, obj in enumerate(task.objectives):
        if obj.success:
            rewards[..., k] = np.where(valid, rewards[..., k] + pen, 0.0)


def groups_with_signal(rewards, valid) -> np.ndarray:
    """bool [P]: groups with >= 2 valid samples where **some objective** varies among them.

    DAPO's dynamic sampling drops the others (they give zero advantage under group normalisation);
    judging per objective keeps groups that per-objective estimators still learn from.
    """
    r = np.asarray(rewards, np.float64)
    v = np.asarray(valid, bool)
    big = np.where(v[..., None], r, np.inf)
    small = np.where(v[..., None], r, -np.inf)
    varies = (small.max(axis=1) > big.min(axis=1)).any(-1)  # [P]
    return varies & (v.sum(1) >= 2)
