"""Host side of the continuous-batching sampler: the rows of a call, their queue, and placing them
in free slots (``mojax.sampling.continuous.engine``).

``start`` checks a ``generate`` call's arguments (the checks of ``mojax.sampling.api``), prefills
its P prompts and queues its B rows; ``resume`` checks an ``append_and_continue`` call, writes the
observations into the resumed rows' buffers and queues those rows; ``admit`` places queued rows in
the free slots: a first-turn row from its prompt's prefill, a resumed row from one prefill of its
context (its prompt bucket, then its response, observations included).

Shape legend: P prompts, G samples per prompt, B = P*G rows, N slots, n placed rows, Tb prompt
bucket, W chunk width, To observation bucket, R response slots, C cache slots, J stop ids per row.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mojax.models.paged_cache import PagedKVCache
from mojax.sampling import api, buckets
from mojax.sampling.continuous import slots
from mojax.sampling.processors import SamplingParams, uses_stop_controls
from mojax.sampling.state import RUNNING, SamplingOutput

#: a ``ContinuousState``'s per-row buffers ([B, ...] each)
ROW_BUFFERS = ("tokens", "logprobs", "sampled", "length", "finish_reason")
_SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "logprobs", "draw")
_SAMPLING_DEFAULTS = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
_GENERATE_KEYS = _SAMPLING_KEYS + (
    "stop_token_ids",
    "min_new_tokens",
    "force_stop_at",
    "prompt_lengths",
    "pad_id",
    "max_response_len",
    "max_total_len",
    "cache_dtype",
    "min_prompt_bucket",
    "segmented",
    "segment_growth",
)
_APPEND_KEYS = _SAMPLING_KEYS + (
    "max_new_tokens",
    "min_new_tokens",
    "force_stop_at",
    "min_obs_bucket",
    "segmented",
    "segment_growth",
)


@dataclasses.dataclass
class CacheView:
    """What a rollout reads of a state's cache: ``end`` [B], the cache slots the longest row's
    context (prompt bucket + response) takes, the same in every row."""

    end: np.ndarray


@dataclasses.dataclass
class ContinuousState:
    """The rows of a continuous-batching call on the host, to resume with ``append_and_continue``.

    Attributes:
      tokens, logprobs, sampled: [B, R] response buffers (as ``SamplingState``).
      length, finish_reason: int32 [B].
      prompts: int32 [P, Tb] bucketed prompts; prompt_lengths: int32 [B] (per row).
      stop_ids: int32 [B, J]. key: the call key. num_samples: G. pad_id: int.
      max_total_len: C, the cache slots of one slot. cache_dtype: k/v dtype name or None.
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    sampled: np.ndarray
    length: np.ndarray
    finish_reason: np.ndarray
    prompts: np.ndarray
    prompt_lengths: np.ndarray
    stop_ids: np.ndarray
    key: jax.Array
    num_samples: int
    pad_id: int
    max_total_len: int
    cache_dtype: str | None

    @property
    def cache(self) -> CacheView:
        need = self.prompts.shape[1] + int(self.length.max(initial=0))
        return CacheView(end=np.full(self.length.shape, need, np.int32))

    @property
    def batch(self) -> int:
        return self.tokens.shape[0]

    def output(self) -> SamplingOutput:
        """The call's ``SamplingOutput`` (device copies of the buffers; ``state`` is this)."""
        return SamplingOutput(
            tokens=jnp.asarray(self.tokens),
            logprobs=jnp.asarray(self.logprobs),
            loss_mask=jnp.asarray(self.sampled),
            lengths=jnp.asarray(self.length),
            finish_reason=jnp.asarray(self.finish_reason),
            state=self,
        )


@dataclasses.dataclass
class Work:
    """Rows waiting for a slot (row order) and the per-row settings of the call ([B] each).

    ``prompts``: the first-turn rows' prompt prefill (``PromptPrefill``); None on resumption
    (each row is prefilled from its context when it is placed).
    ``preempted``: row -> tokens it sampled in this call before a paged cache preempted it
    (``mojax.sampling.continuous.pages``); placed again, it is prefilled from its context and goes on.
    ``resumed``: rows requeued in this call with appended tokens
    (``ContinuousSession.requeue``); placed, each is prefilled from its context.
    """

    queue: list[int]
    max_new: np.ndarray
    min_new: np.ndarray
    stop_at: np.ndarray
    prompts: PromptPrefill | None
    preempted: dict[int, int] = dataclasses.field(default_factory=dict)
    resumed: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class PromptPrefill:
    """The prompts' prefill for first-turn rows, by chunks of ``chunk`` prompts: a chunk is
    prefilled when its first row is placed and dropped when its last row is, so at most the
    chunks of the rows being placed are held (``chunk`` >= P: one prefill of every prompt). The
    last chunk is padded with copies of its last prompt, so every chunk runs one program.

    ``tokens`` int32 [P, Tb], ``mask`` bool [P, Tb], ``last`` int32 [P]; ``num_samples`` G;
    ``first``, ``end``: the prompts whose rows this call places (a process's own block of
    prompts with several processes; default all), chunked from ``first``."""

    tokens: np.ndarray
    mask: np.ndarray
    last: np.ndarray
    chunk: int
    num_samples: int
    cache_dtype: str | None
    prefill: Any
    first: int = 0
    end: int | None = None
    left: dict = dataclasses.field(default_factory=dict)  # chunk -> its rows not yet placed
    live: dict = dataclasses.field(default_factory=dict)  # chunk -> (logits, cache)

    def chunk_of(self, rows: np.ndarray) -> np.ndarray:
        return (np.asarray(rows) // self.num_samples - self.first) // self.chunk

    def get(self, model, c: int):
        """``(logits [k, V], cache [k, Tb])`` of chunk ``c`` (prefilled on first use)."""
        if c not in self.live:
            p = self.tokens.shape[0] if self.end is None else self.end
            lo = self.first + c * self.chunk
            hi = min(lo + self.chunk, p)
            idx = np.minimum(np.arange(lo, lo + self.chunk), hi - 1)
            self.live[c] = self.prefill(
                model, self.tokens[idx], self.mask[idx], self.last[idx],
                cache_dtype=self.cache_dtype,
            )  # fmt: skip
            self.left[c] = (hi - lo) * self.num_samples
        return self.live[c]

    def placed(self, c: int, count: int) -> None:
        self.left[c] -= count
        if not self.left[c]:
            del self.live[c]


def _options(kwargs: dict, allowed: tuple[str, ...], call: str) -> tuple[dict, SamplingParams]:
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"ContinuousSampler.{call}: unexpected arguments {unknown}")
    params = {k: kwargs.get(k, _SAMPLING_DEFAULTS.get(k)) for k in _SAMPLING_KEYS}
    params = {k: v for k, v in params.items() if v is not None}
    controls = uses_stop_controls(kwargs.get("min_new_tokens", 0), kwargs.get("force_stop_at", 0))
    return kwargs, SamplingParams(**params, stop_controls=controls)


def start(
    model,
    prompt_tokens,
    key,
    max_new_tokens,
    num_samples,
    kwargs,
    check=None,
    prefill=None,
    prompt_chunk: int = 0,
    own: tuple[int, int] | None = None,
):
    """``(state, work, params, caps)`` of a ``generate`` call (module docstring); ``check(state,
    work)`` runs on the queued rows before anything is prefilled; ``prefill``: the sampler's
    ``slots.prefill_rows`` (with its mesh), default one device; ``prompt_chunk``: prompts per
    prefill (``PromptPrefill``; 0: all P at once); ``own``: prompts ``[lo, hi)`` whose rows are
    queued (a process's own block; default all P). The state holds every row either way."""
    prefill = prefill or slots.prefill_rows
    kw, params = _options(kwargs, _GENERATE_KEYS, "generate")
    padded, lengths, max_new, g = api._prompt_arrays(
        model,
        prompt_tokens,
        kw.get("prompt_lengths"),
        num_samples,
        max_new_tokens,
        kw.get("min_prompt_bucket", 16),
    )
    p, tb = padded.shape
    b = p * g
    r = int(kw.get("max_response_len") or max_new.max())
    c = int(kw.get("max_total_len") or tb + r)
    if c < tb + 1:
        raise ValueError(f"max_total_len={c} leaves no slot after the prompt bucket {tb}")
    stop_ids = api.stop_id_array(kw.get("stop_token_ids", ()), p, g)
    min_new, stop_at = api.stop_controls(
        kw.get("min_new_tokens", 0), kw.get("force_stop_at", 0), stop_ids, max_new, p, g
    )
    dtype = kw.get("cache_dtype")
    dtype = None if dtype is None else jnp.dtype(dtype).name
    pad_id = int(kw.get("pad_id", 0))
    state = ContinuousState(
        tokens=np.full((b, r), pad_id, np.int32),
        logprobs=np.zeros((b, r), np.float32),
        sampled=np.zeros((b, r), bool),
        length=np.zeros((b,), np.int32),
        finish_reason=np.full((b,), RUNNING, np.int32),
        prompts=padded,
        prompt_lengths=np.repeat(lengths, g).astype(np.int32),
        stop_ids=stop_ids,
        key=key,
        num_samples=g,
        pad_id=pad_id,
        max_total_len=c,
        cache_dtype=dtype,
    )
    lo, hi = (0, p) if own is None else (int(own[0]), int(own[1]))
    if not 0 <= lo <= hi <= p:
        raise ValueError(f"own prompts [{lo}, {hi}) must lie within the {p} prompts")
    work = Work(list(range(lo * g, hi * g)), max_new, min_new, stop_at, None)
    if check is not None:
        check(state, work)  # before anything compiles
    mask = np.arange(tb)[None, :] < np.asarray(lengths)[:, None]
    chunk = max(min(int(prompt_chunk) or p, hi - lo), 1)
    last = (np.asarray(lengths) - 1).astype(np.int32)
    work.prompts = PromptPrefill(padded, mask, last, chunk, g, dtype, prefill, lo, hi)
    return state, work, params, _caps(kw, tb, c)


def _caps(kw: dict, start_slot: int, c: int) -> tuple[int, ...]:
    if not kw.get("segmented", True):
        return (c,)
    return buckets.segment_caps(start_slot, c, growth=kw.get("segment_growth", 1.25))


def resume(model, state: ContinuousState, obs_tokens, obs_lengths, resume_rows, kwargs):
    """``(state, work, params, caps)`` of an ``append_and_continue`` call: a new state whose
    resumed rows hold their observations (loss-masked) and wait for a slot."""
    kw, params = _options(kwargs, _APPEND_KEYS, "append_and_continue")
    if "max_new_tokens" not in kw:
        raise TypeError("ContinuousSampler.append_and_continue: max_new_tokens is required")
    b, r, c = state.batch, state.tokens.shape[1], state.max_total_len
    obs, obs_len, res, max_new = api._append_arrays(
        model, b, obs_tokens, obs_lengths, resume_rows, kw["max_new_tokens"], 1
    )
    tb = state.prompts.shape[1]
    long = res & (state.length + obs_len + 1 > r)
    if long.any():
        raise ValueError(
            f"max_response_len={r} too small for the observations of rows "
            f"{np.flatnonzero(long).tolist()}"
        )
    full = res & (tb + state.length + obs_len + 1 > c)
    if full.any():
        raise ValueError(
            f"max_total_len={c} too small: rows {np.flatnonzero(full).tolist()} cannot hold their "
            "context and one more token; pass a larger max_total_len to generate"
        )
    min_new, stop_at = api.stop_controls(
        kw.get("min_new_tokens", 0), kw.get("force_stop_at", 0), state.stop_ids, max_new, b, 1, res
    )
    new = dataclasses.replace(
        state, **{k: getattr(state, k).copy() for k in ("tokens", "logprobs", "sampled")}
    )
    new.length, new.finish_reason = state.length.copy(), state.finish_reason.copy()
    for i in np.flatnonzero(res):
        n, m = int(state.length[i]), int(obs_len[i])
        new.tokens[i, n : n + m] = obs[i, :m]
        new.logprobs[i, n : n + m], new.sampled[i, n : n + m] = 0.0, False
        new.length[i], new.finish_reason[i] = n + m, RUNNING
    work = Work(np.flatnonzero(res).tolist(), max_new, min_new, stop_at, None)
    return new, work, params, _caps(kw, 0, c)


def _context_prefill(model, state: ContinuousState, rows: np.ndarray, prefill):
    """``(logits [n, V], cache [n, W], W)``: one prefill of each row's prompt bucket followed by
    its response (observations included); W the chunk width (< C)."""
    tb, g, c = state.prompts.shape[1], state.num_samples, state.max_total_len
    length = state.length[rows]
    w = min(tb + buckets.bucket_length(int(length.max(initial=1)), 8), c - 1)
    tokens = np.zeros((len(rows), w), np.int32)
    mask = np.zeros((len(rows), w), bool)
    tokens[:, :tb] = state.prompts[rows // g]
    mask[:, :tb] = np.arange(tb)[None] < state.prompt_lengths[rows][:, None]
    for k, i in enumerate(rows):
        tokens[k, tb : tb + length[k]] = state.tokens[i, : length[k]]
        mask[k, tb : tb + length[k]] = True
    last = np.where(length > 0, tb + length - 1, state.prompt_lengths[rows] - 1)
    logits, cache = prefill(model, tokens, mask, last, cache_dtype=state.cache_dtype)
    return logits, cache, w


def admit(
    model,
    s,
    state: ContinuousState,
    work: Work,
    held: np.ndarray,
    ends: np.ndarray,
    pages=None,
    prefill=None,
):
    """Places queued rows in the free slots of ``s`` (updates ``held``, ``ends``, ``work.queue``).

    ``pages`` (a paged cache, ``mojax.sampling.continuous.pages.PagedSlots``): only the leading queued
    rows whose pages the pool holds enter; the rest wait, in order. Preempted rows
    (``work.preempted``) enter from a prefill of their context with their sampled count."""
    free = np.flatnonzero(held < 0)
    take = np.asarray(work.queue[: len(free)], np.int64)
    if pages is not None:
        take = take[: pages.admit(take, free, state, work, s, held)]
        s = pages.upload(s)
    if not take.size:
        return s
    del work.queue[: take.size]
    dest = free[: take.size]
    again = np.asarray([int(row) in work.preempted for row in take])
    resumed = np.asarray([int(row) in work.resumed for row in take]) & ~again
    work.resumed.difference_update(int(row) for row in take[resumed])
    first = ~again & ~resumed
    first, first_dest = take[first], dest[first]
    chunks = work.prompts.chunk_of(first) if work.prompts is not None else None
    for c in [None] if chunks is None else np.unique(chunks):  # first-turn rows by prompt chunk
        sel = slice(None) if c is None else chunks == c
        if first[sel].size:
            s = _place(model, s, state, work, first[sel], first_dest[sel], held, ends, prefill, c)
    for group in (again, resumed):  # from one prefill of their context each
        if group.any():
            s = _place(model, s, state, work, take[group], dest[group], held, ends, prefill)
    return s


def _place(
    model, s, state: ContinuousState, work: Work, take, dest_slots, held, ends, prefill, chunk=None
):
    """Places rows ``take`` (first-turn rows of prompt chunk ``chunk``, or all resumed, or all
    preempted) in ``dest_slots``."""
    n = buckets.next_power_of_two(take.size)  # placements of up to n rows share one program
    dest = np.full((n,), held.shape[0], np.int32)  # slot N: dropped
    dest[: take.size] = dest_slots
    rows = np.concatenate([take, np.full((n - take.size,), take[0], np.int64)])
    again = int(take[0]) in work.preempted
    if chunk is not None:
        logits, cache = work.prompts.get(model, int(chunk))
        src = rows // state.num_samples - work.prompts.first - int(chunk) * work.prompts.chunk
        width = state.prompts.shape[1]
        work.prompts.placed(int(chunk), take.size)
    else:
        logits, cache, width = _context_prefill(model, state, rows, prefill or slots.prefill_rows)
        src = np.arange(n)
    fields = dict(
        tokens=state.tokens[rows],
        logprobs=state.logprobs[rows],
        sampled=state.sampled[rows],
        length=state.length[rows],
        max_new=work.max_new[rows],
        min_new=work.min_new[rows],
        stop_at=work.stop_at[rows],
        stop_ids=state.stop_ids[rows],
        prompt_lengths=state.prompt_lengths[rows],
        row_id=rows.astype(np.int32),
    )
    if again:
        fields["num_new"] = np.asarray([work.preempted[int(r)] for r in rows], np.int32)
        for row in take:
            del work.preempted[int(row)]
    if not isinstance(s.cache, PagedKVCache) and width > s.cache.max_len:
        s = slots.resize(s, width)  # a dense cache held at a smaller segment cap
    # host arrays go to the jitted call as they are: one transfer each inside its dispatch, where
    # ``jnp.asarray`` would dispatch an eager op per array (12 per placement)
    s = slots.place(s, cache, logits, np.asarray(src, np.int32), dest, fields)
    held[dest_slots] = take
    ends[dest_slots] = width
    return s
