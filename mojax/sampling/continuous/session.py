"""One call of the continuous-batching sampler, driven segment by segment (``ContinuousSampler``):
the continuous engine's ``protocol.Session``.

A ``ContinuousSession`` holds a call's slots (device), the rows each slot holds and the queue of
rows waiting for one (host). ``step`` runs one segment boundary and one segment: it places queued
rows in the free slots (``continuous_rows.admit``), with a paged cache grows the running slots by a
segment (preempting the newest rows when the pool runs short), decodes one segment
(``slots.segment``), and moves the rows that finished out of their slots into the host-side
``ContinuousState``; it returns those rows. ``requeue`` puts finished rows back in the queue with
appended tokens (a tool row's observation), at its front, so they enter the next free slots while
the other rows decode on. ``ContinuousSampler.generate`` and ``append_and_continue`` step a session
until it is idle; a multi-turn rollout (``mojax.rollout.continuous_agent``) steps it itself and
requeues each tool row as soon as its observation is ready.

Each row keeps its own random stream (call key, row id, response position), so what a row samples
does not depend on when it is requeued or which slot it decodes in.

The session reads its slots' small state and the finished rows' buffers after each segment: all
on this process's devices (with several processes each runs its own session over its own rows;
``mojax.sampling.continuous.engine``).

Shape legend: B rows, N slots, R response slots, C cache slots, J stop ids per row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mojax import distributed
from mojax.sampling import api
from mojax.sampling.continuous import rows as continuous_rows
from mojax.sampling.continuous import slots
from mojax.sampling.continuous.rows import ContinuousState, Work
from mojax.sampling.processors import SamplingParams
from mojax.sampling.protocol import Progress
from mojax.sampling.state import RUNNING, SamplingOutput

_PREEMPT_FIELDS = ("tokens", "logprobs", "sampled", "length", "num_new")


class ContinuousSession:
    """The slots and queue of one continuous-batching call (module docstring).

    ``rounds = False``: requeued rows enter one by one. ``layout``: the rows of this process's
    prompt groups (``distributed.group_layout``; one process: all).

    Args:
      sampler: the ``ContinuousSampler`` (model, mesh, slots, segment length).
      state: the call's rows on the host (``continuous_rows.start`` / ``resume``).
      work: their queue and per-row settings.
      params: the sampling parameters; caps: the segments' cache prefixes.
      pages: the call's page pool (``mojax.sampling.continuous.pages.PagedSlots``; None: a dense cache).
    """

    rounds = False

    def __init__(self, sampler, state: ContinuousState, work: Work, params: SamplingParams, caps,
                 pages=None):  # fmt: skip
        self.sampler, self.state, self.work = sampler, state, work
        self.layout = distributed.group_layout(state.batch, state.num_samples)
        self.exhausted = 0  # rows ``fits`` turned away
        self.params, self.caps, self.pages = params, caps, pages
        r, c, j = state.tokens.shape[1], state.max_total_len, state.stop_ids.shape[1]
        steps = sampler.segment_tokens or np.iinfo(np.int32).max
        layout = None
        if pages is not None:
            layout = (pages.pool.num_pages, sampler.page_size, pages.pool.shards)
        s = slots.empty_slots(sampler.model, sampler.num_slots, r, c, j, state.cache_dtype, layout)
        if sampler.mesh is not None:
            s = jax.device_put(s, slots.slot_shardings(s, sampler.mesh, sampler.rules))
        self.s = s
        self.held = np.full((sampler.num_slots,), -1, np.int64)  # the row each slot holds
        self.ends = np.zeros((sampler.num_slots,), np.int64)
        self.budget = jnp.asarray(steps if pages is None else pages.budget, jnp.int32)
        self.segments = 0

    def view(self) -> Progress:
        """The rows' host buffers (``protocol.Session.view``; updated in place by each step)."""
        state = self.state
        return Progress(state.tokens, state.length, state.finish_reason)

    def output(self) -> SamplingOutput:
        """The rows' ``SamplingOutput`` (``state`` the host ``ContinuousState``)."""
        return self.state.output()

    def counters(self) -> dict[str, int]:
        """One decode call of ``segments`` segments; ``cache_exhausted``: rows ``fits`` turned
        away."""
        out = {"decode_calls": 1, "segments": self.segments}
        return {**out, "cache_exhausted": self.exhausted} if self.exhausted else out

    def fits(self, rows, appended) -> np.ndarray:
        """bool per row: its context, ``appended[k]`` more tokens and one more fit its slot's
        cache past the prompt bucket (``max_total_len``; ``protocol.Session.fits``)."""
        state = self.state
        room = state.max_total_len - state.prompts.shape[1]
        rows = np.asarray(rows, np.int64).reshape(-1)
        need = state.length[rows].astype(np.int64) + np.asarray(appended, np.int64) + 1
        self.exhausted += int((need > room).sum())
        return need <= room

    @property
    def busy(self) -> bool:
        """Rows wait for a slot or decode in one."""
        return bool(self.work.queue) or bool((self.held >= 0).any())

    def run(self) -> None:
        """Steps until every queued row is done."""
        while self.busy:
            self.step()

    def step(self, more_coming: bool = False) -> np.ndarray:
        """Places queued rows, decodes one segment and harvests; returns the rows that finished
        in it (row order). ``more_coming``: rows will be requeued later (tool calls running), so
        the segment also ends when a slot frees with nothing queued."""
        sampler, work, held = self.sampler, self.work, self.held
        self.s = continuous_rows.admit(
            sampler.model, self.s, self.state, work, held, self.ends, self.pages, sampler._prefill
        )
        if self.pages is not None:
            out = self.pages.before_segment(self.s, held)
            self.s = self.pages.upload(self._preempt(out))
        running = held >= 0
        if not running.any():
            return np.zeros((0,), np.int64)
        top = self.ends[running].max()
        c = self.state.max_total_len
        cap = min(next((x for x in self.caps if x > top), c), c)
        if self.pages is None and self.s.cache.max_len != cap:  # a dense cache is held at cap
            self.s = slots.resize(self.s, cap)
        self.s = slots.segment(
            sampler.decode_model,
            self.s,
            self.state.key,
            self.budget,
            np.int32(self._refill(more_coming)),
            params=self.params,
            cap=cap,
            max_len=c,
        )
        self.segments += 1
        self.ends = np.asarray(self.s.cache.end).astype(np.int64)
        freed, rows = self._harvest()
        if self.pages is not None:
            self.pages.release(freed)
        return np.sort(rows)

    def _refill(self, more_coming: bool) -> int:
        """How many finished slots end the next segment: the sampler's ``refill`` while rows
        wait (fewer when fewer wait), 1 when only requeued rows may come, else 0 (never)."""
        waiting = len(self.work.queue)
        if waiting:
            return min(self.sampler.refill, waiting)
        return 1 if more_coming else 0

    def requeue(self, rows, obs, max_new, *, min_new_tokens=0, force_stop_at=0) -> None:
        """Queues finished ``rows`` again (at the queue's front, in row order), each with its
        appended tokens ``obs[k]`` (loss-masked; may be empty) and ``max_new[k]`` new tokens.

        Raises:
          ValueError: a row still queued or decoding, or one whose context and one more token do
            not fit its response buffer or its cache slot (``max_response_len``,
            ``max_total_len``), or that a paged cache's pool cannot hold.
        """
        state, work = self.state, self.work
        rows = np.asarray(rows, np.int64).reshape(-1)
        busy = set(work.queue) | set(self.held[self.held >= 0].tolist())
        if busy & set(rows.tolist()) or (state.finish_reason[rows] == RUNNING).any():
            raise ValueError(
                f"requeue: rows {rows.tolist()} must have finished and left their slots"
            )
        obs = [np.asarray(o, np.int32).reshape(-1) for o in obs]
        _check_tokens(obs, self.sampler.model.config.vocab_size)
        b, r, tb = state.batch, state.tokens.shape[1], state.prompts.shape[1]
        new = state.length[rows] + np.asarray([len(o) for o in obs], np.int64)
        limits = ((r, "max_response_len", 0), (state.max_total_len, "max_total_len", tb))
        for limit, name, extra in limits:
            over = rows[new + extra + 1 > limit]
            if over.size:
                raise ValueError(f"{name}={limit} too small for requeued rows {over.tolist()}")
        res = np.zeros((b,), bool)
        res[rows] = True
        full = np.ones((b,), np.int32)
        full[rows] = np.asarray(max_new, np.int32).reshape(-1)
        min_new, stop_at = api.stop_controls(
            min_new_tokens, force_stop_at, state.stop_ids, full, b, 1, res
        )
        for k, i in enumerate(rows):
            n, m = int(state.length[i]), len(obs[k])
            state.tokens[i, n : n + m], state.logprobs[i, n : n + m] = obs[k], 0.0
            state.sampled[i, n : n + m] = False
            state.length[i], state.finish_reason[i] = n + m, RUNNING
            work.max_new[i], work.min_new[i], work.stop_at[i] = full[i], min_new[i], stop_at[i]
            work.resumed.add(int(i))
        if self.pages is not None:
            self.pages.check(state, queued_only(work, rows))
        work.queue[:0] = sorted(rows.tolist())

    def _preempt(self, out: np.ndarray):
        """Moves the rows of the preempted slots ``out`` (their pages already released) back to
        the front of the queue with their buffers so far; the slots are marked done."""
        s, state, work, held = self.s, self.state, self.work, self.held
        if not out.size:
            return s
        fields = {name: np.asarray(getattr(s, name)) for name in _PREEMPT_FIELDS}
        rows = sorted(int(held[slot]) for slot in out)
        for slot in out:
            row = held[slot]
            for name in _PREEMPT_FIELDS[:4]:
                getattr(state, name)[row] = fields[name][slot]
            work.preempted[int(row)] = int(fields["num_new"][slot])
            held[slot] = -1
        work.queue[:0] = rows
        return s.replace(done=s.done.at[jnp.asarray(out)].set(True))

    def _harvest(self) -> tuple[np.ndarray, np.ndarray]:
        """Moves the finished rows out of their slots into ``state`` (one fetch of the buffers);
        returns the slots it freed and their rows."""
        state, held = self.state, self.held
        done = np.asarray(self.s.done) & (held >= 0)
        if not done.any():
            return np.zeros((0,), np.int64), np.zeros((0,), np.int64)
        fields = {name: np.asarray(getattr(self.s, name)) for name in continuous_rows.ROW_BUFFERS}
        freed = np.flatnonzero(done)
        rows = held[freed].copy()
        for slot, row in zip(freed, rows, strict=True):
            for name, value in fields.items():
                getattr(state, name)[row] = value[slot]
        held[freed] = -1
        return freed, rows


def queued_only(work: Work, rows: np.ndarray) -> Work:
    """``work`` with only ``rows`` queued (what ``PagedSlots.check`` reads)."""
    return Work(sorted(np.asarray(rows).tolist()), work.max_new, work.min_new, work.stop_at, None)


def _check_tokens(obs: list[np.ndarray], vocab: int) -> None:
    bad = [k for k, o in enumerate(obs) if o.size and (o.min() < 0 or o.max() >= vocab)]
    if bad:
        raise ValueError(f"requeue: obs[{bad[0]}] has ids outside [0, vocab={vocab})")
