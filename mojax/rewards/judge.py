"""The judge source: ``r_reason``, a judge model's score of the reasoning (AWPO, arXiv:2512.19126,
App. B rubric; the judges are ``mojax.tasks.framework.judge``).

A judge failure (no verdict, an error, the batch's deadline) makes the row's ``r_reason`` entry
invalid (0.0, False in the per-objective validity mask) and is counted as the ``judge_failure``
invalid reason; the sample itself stays valid. Multi-host: each process judges the rows of the
prompt groups it owns (:func:`judge_owned`); the scores and failure counts are all-gathered, so a
call that fails on one process fails for every process alike (the rewards, the estimator's state
and ``clip_eps`` stay identical).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax import distributed
from mojax.rewards.source import Column, RewardSource, ScoreContext
from mojax.tasks.framework.judge import JudgeBudget, judge_rows, reason_column


@dataclasses.dataclass(frozen=True)
class JudgeSource(RewardSource):
    """``r_reason`` from ``judge`` (an object with ``score`` / ``score_batch``), each batch of its
    calls within ``budget`` (``config.judge``)."""

    name = "judge"
    objective = "r_reason"
    description = "the judge's reasoning score (config.judge)"
    needs_prompts = True

    judge: Any = None
    budget: JudgeBudget | None = None

    def column(self, ctx: ScoreContext, state: Any) -> Column:
        del state
        p, g = len(ctx.examples), ctx.num_samples
        refs = [ctx.task.judge_reference(ex) for ex in ctx.rows]
        texts = list(ctx.prompts_text) if ctx.prompts_text is not None else [""] * p
        prompts = [t for t in texts for _ in range(g)]
        scores, counts = judge_owned(self.judge, prompts, ctx.responses, refs, g, self.budget)
        values, ok = reason_column(scores)
        ctx.stats.reasons["judge_failure"] += int(np.sum(~ok & ctx.valid))
        metrics = {"judge/failures": float(counts["failures"])}
        metrics["judge/skipped"] = float(counts["skipped"])
        return Column(values, valid=ok, metrics=metrics)


def judge_owned(
    judge,
    prompts: Sequence[str],
    responses: Sequence[str],
    references: Sequence[str],
    num_samples: int,
    budget: JudgeBudget | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """``mojax.tasks.framework.judge.judge_rows`` of ``B`` rows, each process judging its own groups' rows
    within ``budget``; the scores float32 [B] (NaN = failed) and the counts summed over processes,
    the same on every process."""
    if distributed.process_count() == 1:
        return judge_rows(judge, prompts, responses, references, budget)
    owners = distributed.row_owners(len(responses), num_samples)
    mine = np.flatnonzero(owners == distributed.process_index())
    pick = lambda xs: [xs[i] for i in mine]  # noqa: E731
    part = judge_rows(judge, pick(prompts), pick(responses), pick(references), budget)
    scores = np.full((len(responses),), np.nan, np.float32)
    counts = {"failures": 0, "skipped": 0}
    for idx, (values, theirs) in distributed.allgather_objects((mine, part)):
        scores[idx] = values
        for k in counts:
            counts[k] += int(theirs[k])
    return scores, counts
