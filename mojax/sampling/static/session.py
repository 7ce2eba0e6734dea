"""The static engine's session: a rollout's rows decoded in rounds on one shared KV cache.

``InGraphSampler.open`` returns a ``StaticSession`` (a ``protocol.Session``); its steps are the
in-graph sampler's calls (``generate``, then ``append_and_continue`` on the same cache):

* the first ``step`` prefills every prompt and decodes every row;
* a row that used a decode *segment* (``Limits.segment``) with its turn not over is *paused*, not
  returned: the next step resumes the paused rows with an empty append (``false_stop_bucket``
  cache slots) and the rest of their turn (a segment at most), while the rows that ended wait (the
  driver may run their tool calls meanwhile); without cache room for it they end (returned, with
  ``LENGTH`` and their turn not over: the driver ends them with ``budget``);
* otherwise the next step appends the observations of the rows requeued since (one append whose
  bucket is the round's widest observation, ``min_obs_bucket`` at least) and decodes them.

``rounds = True``: the driver requeues a whole round at once, when every call of the round has
its result (``mojax.rollout.continuous_agent``). The rows share the cache's write position, so
``fits`` gives one verdict for the round: the cache takes the widest append's bucket and one more
step. A paused row draws its next token at the same decode step as unsegmented (its own random
stream), so the tokens do not depend on the segments (``RolloutSpec.decode_segment``).

The cache has ``protocol.cache_slots(prompt bucket, limits)`` slots: one per decode step of the
batch, plus each append's bucket.

Multi-process: the rows lie over the devices of the sampler's mesh (``row_sharding``); each
process reads and requeues the rows it holds (``layout``), and the rounds are agreed: whether
any row paused (with decode segments), whether any row resumes and the widest observation (one
``global_max`` each), so every process calls ``step`` and ``fits`` equally often. A session that
is only stepped (no ``fits``) without decode segments calls no collective: each process may use
its own (e.g. a judge over its own rows). Files: none.

Shape legend: B rows, R response slots, C cache slots.
"""

from __future__ import annotations

import collections

import numpy as np

from mojax import distributed
from mojax.sampling import protocol
from mojax.sampling.state import LENGTH


class StaticSession:
    """One rollout on a round sampler (module docstring).

    Args:
      sampler: the in-graph sampler, or any object with its ``generate``, ``append_and_continue``
        and ``row_sharding``.
      requests: the rows; sampling: the sampling keywords of both calls.
    """

    rounds = True

    def __init__(self, sampler, requests: protocol.Requests, sampling):
        self.sampler, self.requests, self.sampling = sampler, requests, dict(sampling)
        self.limits = requests.limits
        b = len(requests.prompt_tokens) * int(requests.num_samples)
        self.layout = distributed.row_layout(sampler.row_sharding, b)
        self.cache_slots = protocol.cache_slots(requests.prompt_bucket, self.limits)
        self.out = None
        self.turn_left = np.full((b,), requests.max_new_tokens, np.int64)  # of each row's turn
        self.call_start = np.zeros((b,), np.int64)
        self.call_budget = np.zeros((b,), np.int64)
        self.paused: list[int] = []  # this process's paused rows
        self.pausing = False  # some process has paused rows (the next step resumes them)
        self.queued: dict[int, tuple[np.ndarray, int]] = {}
        self.append: tuple[int, int] | None = None  # the next round's (width, bucket floor)
        self.counts: collections.Counter = collections.Counter()
        self._progress: protocol.Progress | None = None

    @property
    def busy(self) -> bool:
        """Nothing decoded yet, paused rows, or a round to append (the same on every process)."""
        return self.out is None or self.pausing or self.append is not None

    def _segment(self, left: np.ndarray) -> np.ndarray:
        """The budget of a decode call for rows with ``left`` tokens of their turn."""
        seg = self.limits.segment
        return np.minimum(left, seg) if seg else left

    def step(self, more_coming: bool = False) -> np.ndarray:
        """The next decode call (module docstring); returns the rows whose decode ended."""
        del more_coming  # the driver requeues whole rounds
        if not self.busy:
            return np.zeros((0,), np.int64)
        if self.out is None:
            rows = np.flatnonzero(self.layout.local)
            self._first()
        elif self.pausing:
            rows = np.asarray(self.paused, np.int64)
            self._resume_paused()
        else:
            rows = np.asarray(sorted(self.queued), np.int64)
            self._append_round()
        self.counts["decode_calls"] += 1
        self._progress = None
        return self._settle(rows)

    def _first(self) -> None:
        req = self.requests
        budget = int(self._segment(np.int64(req.max_new_tokens)))
        self.call_budget[:] = budget
        self.out = self.sampler.generate(
            prompt_tokens=req.prompt_tokens,
            key=req.key,
            max_new_tokens=budget,
            num_samples=int(req.num_samples),
            stop_token_ids=req.stop_token_ids,
            prompt_lengths=req.prompt_lengths,
            pad_id=req.pad_id,
            max_response_len=req.max_response_len,
            max_total_len=self.cache_slots,
            cache_dtype=req.cache_dtype,
            min_prompt_bucket=req.min_prompt_bucket,
            **self.sampling,
        )

    def _resume_paused(self) -> None:
        """An empty append to the paused rows: the rest of their turn (a segment at most)."""
        b = len(self.turn_left)
        resume = np.zeros((b,), bool)
        resume[self.paused] = True
        self._call(np.zeros((b, 1), np.int32), np.zeros((b,), np.int32), resume, {})
        self.counts["segment_resumes"] += 1
        self.pausing, self.paused = False, []

    def _append_round(self) -> None:
        """The round's observations appended to the requeued rows (``fits`` agreed the width)."""
        width, _ = self.append
        b = len(self.turn_left)
        obs, lengths = np.zeros((b, max(width, 1)), np.int32), np.zeros((b,), np.int32)
        resume = np.zeros((b,), bool)
        for i, (ids, max_new) in self.queued.items():
            obs[i, : len(ids)], lengths[i], resume[i] = ids, len(ids), True
            self.turn_left[i] = max_new
        self._call(obs, lengths, resume, self.queued)
        self.queued = {}

    def _call(self, obs, lengths, resume, queued) -> None:
        """``append_and_continue`` of ``resume``'s rows (empty appends: ``false_stop_bucket``)."""
        width, floor = self.append or (0, self.limits.false_stop_bucket)
        self.append = None
        length = self.view().lengths
        budget = np.full((len(resume),), self.requests.max_new_tokens, np.int32)
        rows = np.flatnonzero(resume)
        budget[rows] = self._segment(self.turn_left[rows])
        self.call_start[rows] = length[rows] + lengths[rows]
        self.call_budget[rows] = budget[rows]
        self.out = self.sampler.append_and_continue(
            self.out.state, obs, lengths, resume, max_new_tokens=budget, min_obs_bucket=floor,
            **self.sampling,
        )  # fmt: skip

    def _settle(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` (decoded by the last call) minus the ones paused at a segment's end; the
        pause is agreed, and paused rows end (returned) without the cache room to resume."""
        view = self.view()
        n = view.lengths[rows].astype(np.int64)
        used = n - self.call_start[rows]
        self.turn_left[rows] -= used
        if not self.limits.segment:  # no row pauses (on any process: the same limits)
            return rows
        paused = (
            (view.finish_reason[rows] == LENGTH)
            & (n < self.requests.max_response_len)
            & (self.turn_left[rows] > 0)
            & (used >= self.call_budget[rows])
        )
        if not distributed.global_max([int(paused.sum())])[0]:  # any process's rows paused
            return rows
        if not self._room(0, self.limits.false_stop_bucket):
            self.counts["cache_exhausted"] += 1
            return rows  # they end: no room to resume
        self.paused, self.pausing = rows[paused].tolist(), True
        return rows[~paused]

    def _room(self, width: int, floor: int) -> bool:
        """The cache takes an append of ``width`` tokens (its bucket) and one more step."""
        first = int(np.argmax(self.layout.local))
        end = int(self.layout.read(self.out.state.cache.end)[first])  # the same in every row
        return end + protocol.bucket_length(width, floor) + 1 <= self.cache_slots

    def fits(self, rows, appended) -> np.ndarray:
        """One verdict for the round (every process's rows together): the cache takes the widest
        append's bucket and one more step. A round that does not fit counts ``cache_exhausted``."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        width = int(np.max(np.asarray(appended, np.int64), initial=0))
        any_resume, width = (int(x) for x in distributed.global_max([bool(rows.size), width]))
        if not any_resume:
            return np.zeros(rows.shape, bool)
        floor = self.limits.min_obs_bucket if width else self.limits.false_stop_bucket
        if not self._room(width, floor):
            self.counts["cache_exhausted"] += 1
            return np.zeros(rows.shape, bool)
        self.append = (width, floor)
        return np.ones(rows.shape, bool)

    def requeue(self, rows, obs, max_new) -> None:
        """Queues ``rows`` (of the round ``fits`` agreed) with their observations and turns."""
        for i, ids, budget in zip(rows, obs, max_new, strict=True):
            self.queued[int(i)] = (np.asarray(ids, np.int32), int(budget))

    def view(self) -> protocol.Progress:
        """This process's rows of the last call's output (one fetch per call)."""
        if self._progress is None:
            read = self.layout.read
            out = self.out
            self._progress = protocol.Progress(
                read(out.tokens), read(out.lengths).astype(np.int64), read(out.finish_reason)
            )
        return self._progress

    def output(self) -> protocol.SamplingOutput:
        return self.out

    def counters(self) -> dict[str, int]:
        """``decode_calls``, ``segment_resumes``, ``cache_exhausted`` (the agreed schedule)."""
        return dict(self.counts)
