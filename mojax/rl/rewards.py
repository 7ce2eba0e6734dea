"""From rollouts to the reward batch ``rewards [P, G, M]``, ``valid [P, G]`` (``docs/architecture.md``, "Data contracts").

Host-side and stateless apart from the objects passed in (the N_optimal tracker is returned, not
mutated). Covers the pieces every method shares:

* task scoring (``Task.score_batch``; failures are invalid and counted, never raised);
* external objectives: ``r_tool`` (ParetoPO Eq. 4, from ``n_calls`` and the N_optimal tracker,
  the current group included, or the task's fixed ``N_opt``; paid to every sample or to successes,
  :func:`tool_column`) and ``r_reason`` (AWPO's judge score, each process judging its own
  rows, ``mojax.rl.scoring.judge_owned``; a judge failure → invalid);
* DAPO overlong shaping on the success objective(s) and DAPO dynamic-sampling's group filter,
  judged **per objective** (methods.md): a group is kept if any objective varies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax.pareto import N_OPT_SOURCES, NOptimalTracker, fixed_tool_reward, gate_by_success
from mojax.rl.scoring import judge_owned, score_owned
from mojax.tasks.base import RewardStats, Task
from mojax.tasks.judge import JudgeBudget, reason_column


@dataclasses.dataclass
class RewardBatch:
    """``rewards float32 [P, G, M]`` (0 where invalid), ``valid bool [P, G]``, metrics."""

    rewards: np.ndarray
    valid: np.ndarray
    metrics: dict[str, float]
    tracker: NOptimalTracker | None = None
    reason_valid: np.ndarray | None = None  # bool [P, G]: False where the judge failed (AWPO)


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


def groups_with_signal(rewards, valid) -> np.ndarray:
    """bool [P]: groups with >= 2 valid samples where **some objective** varies among them.

    DAPO's dynamic sampling drops the others (they give zero advantage under group normalisation);
    judging per objective keeps groups that GDPO-style estimators still learn from.
    """
    r = np.asarray(rewards, np.float64)
    v = np.asarray(valid, bool)
    big = np.where(v[..., None], r, np.inf)
    small = np.where(v[..., None], r, -np.inf)
    varies = (small.max(axis=1) > big.min(axis=1)).any(-1)  # [P]
    return varies & (v.sum(1) >= 2)


def score_rollouts(
    task: Task,
    examples: Sequence[Any],
    responses: Sequence[str],
    n_calls,
    num_samples: int,
    *,
    tracker: NOptimalTracker | None = None,
    tool_alpha: float = 0.7,
    no_success: str = "zero",
    tool_gate: str = "all",
    n_opt_source: str = "tracked",
    judge=None,
    prompts_text: Sequence[str] | None = None,
    stats: RewardStats | None = None,
    judge_budget: JudgeBudget | None = None,
) -> RewardBatch:
    """Scores ``B = P * G`` responses of ``P`` examples (row ``p * G + g``).

    Args:
      task: the task (declares objectives; external ones are filled here).
      examples: the ``P`` examples of the batch.
      responses: ``B`` decoded responses (the assistant text, tool observations included).
      n_calls: int [B] tool calls per response.
      num_samples: G.
      tracker: N_optimal table for ``r_tool`` (required if the task has that objective).
      tool_alpha, no_success, tool_gate, n_opt_source: ``r_tool`` settings
        (``config.tool_reward``: ``alpha``, ``no_success``, ``gate``, ``n_opt``; :func:`tool_column`).
      judge: a judge for ``r_reason`` (AWPO); prompts_text: the prompts it sees; judge_budget:
        what one batch of its calls may cost (each process judges its own groups' rows).
      stats: running reward statistics (invalid counts by reason) to add to.

    Returns:
      A :class:`RewardBatch`; its ``tracker`` is the updated N_optimal table.
    """
    p, g = len(examples), int(num_samples)
    if len(responses) != p * g:
        raise ValueError(f"responses: expected P*G = {p}*{g} rows, got {len(responses)}")
    n_calls = np.asarray(n_calls, np.int64).reshape(p, g)
    rows = [ex for ex in examples for _ in range(g)]
    sb = score_owned(task, responses, rows, g, stats=stats)  # each process its own groups
    rewards, valid = sb.rewards.copy(), sb.valid.copy()
    metrics: dict[str, float] = {}
    reason_valid = None
    for name in sb.external:
        k = task.objective_index(name)
        if name == "r_tool":
            if tracker is None:
                raise ValueError(f"task {task.name!r} has r_tool: a N_optimal tracker is required")
            ok = (task.is_success(rewards) & valid).reshape(p, g)
            kw = dict(alpha=tool_alpha, no_success=no_success, gate=tool_gate, n_opt=n_opt_source)
            tracker, r_tool = tool_column(task, examples, n_calls, ok, tracker, **kw)
            rewards[:, k] = r_tool.reshape(-1)
        elif name == "r_reason":
            if judge is None:
                raise ValueError(f"task {task.name!r} has r_reason: a judge is required")
            refs = [task.judge_reference(ex) for ex in rows]
            texts = list(prompts_text) if prompts_text is not None else [""] * p
            prompts = [t for t in texts for _ in range(g)]
            scores, counts = judge_owned(judge, prompts, responses, refs, g, judge_budget)
            values, reason_valid = reason_column(scores)
            sb.stats.reasons["judge_failure"] += int(np.sum(~reason_valid & valid))
            rewards[:, k] = values  # a failure invalidates r_reason only (reason_valid)
            metrics["judge/failures"] = float(counts["failures"])
            metrics["judge/skipped"] = float(counts["skipped"])
        else:
            raise ValueError(f"task {task.name!r}: no source for external objective {name!r}")
    rewards[~valid] = 0.0
    if reason_valid is not None:
        reason_valid = (reason_valid & valid).reshape(p, g)
    metrics.update(_reward_metrics(task, rewards, valid))
    metrics["reward/valid_fraction"] = float(valid.mean())
    metrics["tool/calls_mean"] = float(n_calls.mean())
    return RewardBatch(
        rewards.reshape(p, g, -1), valid.reshape(p, g), metrics, tracker, reason_valid
    )


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
    """ParetoPO's ``r_tool [P, G]`` (Eq. 4) of one batch and the updated ``N_optimal`` tracker.

    ``n_opt="tracked"``: against the tracker's ``N_optimal`` (the current group included);
    ``"fixed"``: against ``task.optimal_calls(example)`` (the task's rule; the tracker is still
    updated). ``gate="success"`` pays it to successful samples only (``success [P, G]``), ``"all"``
    to every sample (:func:`mojax.pareto.gate_by_success`). Several processes: each computes it
    identically from the gathered batch (no collective), so the trackers stay equal."""
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


def _reward_metrics(task: Task, rewards: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    out = {}
    sel = rewards[valid] if valid.any() else np.zeros((1, task.num_objectives), np.float32)
    for k, name in enumerate(task.objective_names):
        out[f"reward/{name}/mean"] = float(sel[:, k].mean())
    if len(task.scalar_weights) == task.num_objectives:
        out["reward/scalar/mean"] = float(task.scalar(sel).mean())
    return out
