"""The compiled pieces of the continuous-batching sampler: prefill, placing rows in slots, and a
decode segment over a fixed number of slots whose cache write positions differ per slot.

The slot state is a ``SamplingState`` of N slots (``row_id`` -1 on an empty slot, which is
``done``). Its cache stays in the decode layout (``LayerKVCache`` under
``Layouts.decode_per_layer``, else the stacked ``KVCache``) between segments; each slot writes at
its own ``cache.end`` (the model's cached call writes row ``b`` at ``end[b]``), so a slot holds one
row from its prefill to its end, whatever the other slots do. With a ``PagedKVCache``
(``mojax.models.paged_cache``) a slot's tokens live in the pool pages its page table names, which
the host allocator (``mojax.sampling.continuous.pages``) sets at each segment boundary.

* ``prefill``: a cached forward of right-padded chunks (the prompts, or a resumed row's whole
  context) on a fresh cache of the chunk's width: the next-token logits and the chunk's cache.
  ``prefill_rows`` splits the rows of a prefill over a mesh's batch axes.
* ``place``: writes n prefilled rows into n slots: the chunk's slots, the whole slot mask row (the
  slots past the chunk invalid) and ``end``; the slot's response buffers and per-row settings.
* ``resize``: the dense cache held at a segment's cache prefix between segments (a segment whose
  ``cap`` is the cache's width decodes it in place: no truncated copy in, no write back out).
* ``segment``: the decode loop of ``mojax.sampling.decode`` (``_decode_step``: per-row random
  streams, stops, budgets) over the slots, on a cache prefix of ``cap`` slots, until every slot is
  done, a running slot's write position reaches ``cap``, ``budget`` steps ran, or ``stop_on_free``
  slots finished (the caller's refill threshold; 0: never).

Shape legend: N slots, n placed rows, W chunk width, R response slots, C cache slots, V vocab,
J stop ids per row.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from mojax.models import layouts
from mojax.models.cache import KVCache, init_cache
from mojax.models.layer_cache import LayerKVCache, to_layer_major, to_stacked
from mojax.models.paged_cache import PagedKVCache, init_paged_cache, place_rows
from mojax.sampling import state as state_lib
from mojax.sampling.decode import _decode_step, _forward
from mojax.sampling.processors import SamplingParams
from mojax.sampling.state import RUNNING, SamplingState


@functools.partial(jax.jit, static_argnames=("cache_dtype",))
def prefill(model, tokens, mask, last_index, *, cache_dtype=None):
    """``(logits fp32 [n, V], cache [n, W])`` of chunks ``tokens [n, W]`` (``mask`` True on real
    tokens; ``last_index [n]`` the last real one). The cache is in the decode layout."""
    n, w = tokens.shape
    cache = init_cache(model.config, n, w, cache_dtype)
    logits, cache = _forward(model, tokens, mask, cache, last_index)
    if layouts.of(model.config).decode_per_layer:
        cache = to_layer_major(cache)
    return logits, cache


def prefill_rows(model, tokens, mask, last_index, *, cache_dtype=None, mesh=None, rules=()):
    """``prefill`` of host arrays ``tokens`` / ``mask`` [n, W], ``last_index`` [n]. On a mesh
    the rows are split over the logical "batch" axes (padded with copies of the last row to a
    multiple of their size; output row i is input row i, the padding rows are never read), so no
    device holds every row's prefill."""
    tokens, mask = np.asarray(tokens, np.int32), np.asarray(mask, bool)
    last = np.asarray(last_index, np.int32)
    if mesh is not None:
        from mojax import sharding as sharding_lib

        pad = -tokens.shape[0] % sharding_lib.num_shards(mesh, rules, "batch")
        grow = lambda x: np.concatenate([x, np.repeat(x[-1:], pad, axis=0)]) if pad else x
        put = lambda x: jax.device_put(grow(x), sharding_lib.batch_sharding(mesh, rules, x.ndim))
        tokens, mask, last = put(tokens), put(mask), put(last)
    return prefill(model, tokens, mask, last, cache_dtype=cache_dtype)


def empty_slots(
    model, n: int, r: int, c: int, j: int, cache_dtype=None, pages=None
) -> SamplingState:
    """N empty slots (all ``done``, ``row_id`` -1). Slot 0 of each cache row is marked valid (zero
    keys and values) so an empty slot's attention is finite; ``place`` overwrites the row.

    ``pages``: ``(num_pages, page_size)`` or ``(num_pages, page_size, shards)`` for a
    ``PagedKVCache`` (no slot owns a page; an empty slot holds no key, and its attention is
    zeros; ``shards`` pools on a mesh)."""
    if pages is not None:
        per_layer = layouts.of(model.config).decode_per_layer
        num_pages, page_size, *shards = pages
        cache = init_paged_cache(
            model.config, n, c, num_pages, page_size, cache_dtype, per_layer, *shards
        )
        cache = cache.replace(end=jnp.ones((n,), jnp.int32))
    else:
        cache = init_cache(model.config, n, c, cache_dtype)
        cache = cache.replace(
            slot_mask=cache.slot_mask.at[:, 0].set(True), end=jnp.ones((n,), jnp.int32)
        )
        if layouts.of(model.config).decode_per_layer:
            cache = to_layer_major(cache)
    i32 = lambda v: jnp.full((n,), v, jnp.int32)
    return SamplingState(
        cache=cache,
        logits=jnp.zeros((n, model.config.vocab_size), jnp.float32),
        tokens=jnp.zeros((n, r), jnp.int32),
        logprobs=jnp.zeros((n, r), jnp.float32),
        sampled=jnp.zeros((n, r), bool),
        length=i32(0),
        num_new=i32(0),
        max_new=i32(1),
        min_new=i32(0),
        stop_at=i32(0),
        done=jnp.ones((n,), bool),
        finish_reason=i32(RUNNING),
        stop_ids=jnp.full((n, j), -1, jnp.int32),
        prompt_lengths=i32(1),
        row_id=i32(-1),
        key=jax.random.key(0),
        step=jnp.zeros((), jnp.int32),
        pad_id=jnp.zeros((), jnp.int32),
    )


def slot_shardings(s: SamplingState, mesh, rules):
    """``NamedSharding`` per leaf of the slot state ``s`` on ``mesh``: the slot axis (N) over the
    mesh axes of logical "batch" (as the static sampler's rows), every other axis whole; the
    call key and the scalars replicated. A stacked ``KVCache`` holds its slots on axis 1; a
    ``PagedKVCache``'s pools lie over the same axes on their page axis (one shard's pool each)."""
    from jax.sharding import NamedSharding, PartitionSpec

    from mojax import sharding as sharding_lib

    batch = sharding_lib.batch_sharding(mesh, rules, 1).spec[0]
    on = lambda axis: NamedSharding(mesh, PartitionSpec(*([None] * axis), batch))
    whole = NamedSharding(mesh, PartitionSpec())
    c = s.cache
    if isinstance(c, KVCache):
        cache = KVCache(k=on(1), v=on(1), slot_mask=on(0), end=on(0))
    elif isinstance(c, LayerKVCache):
        cache = LayerKVCache(k=tuple(on(0) for _ in c.k), v=tuple(on(0) for _ in c.v),
                             slot_mask=on(0), end=on(0))  # fmt: skip
    elif isinstance(c, PagedKVCache):  # each shard's pool on its devices (its page axis)
        pool = lambda x: tuple(on(1) for _ in x) if isinstance(x, tuple) else on(2)
        cache = c.replace(k=pool(c.k), v=pool(c.v), page_table=on(0), lengths=on(0), end=on(0))
    else:
        raise ValueError(f"slot_shardings: no mesh layout for a {type(c).__name__}")
    rows = {f: on(0) for f in s.__dataclass_fields__ if f not in ("cache", "key", "step", "pad_id")}
    return s.replace(cache=cache, key=whole, step=whole, pad_id=whole, **rows)


def _place_cache(full, part, src, slots):
    """``full`` with rows ``src [n]`` of ``part`` (W slots) written to ``slots [n]`` (index N:
    dropped): the first W slots, the whole slot mask row, and ``end``; into a ``PagedKVCache``,
    the row's real slots into its pages (``paged_cache.place_rows``)."""
    if isinstance(full, PagedKVCache):
        return place_rows(full, to_stacked(part), src, slots)
    w, c = part.max_len, full.max_len
    mask = jnp.zeros((src.shape[0], c), bool).at[:, :w].set(part.slot_mask[src])
    slot_mask = full.slot_mask.at[slots].set(mask, mode="drop")
    end = full.end.at[slots].set(part.end[src], mode="drop")
    if isinstance(full, LayerKVCache):
        k = tuple(f.at[slots, :, :, :w].set(p[src], mode="drop") for f, p in zip(full.k, part.k))
        v = tuple(f.at[slots, :, :w].set(p[src], mode="drop") for f, p in zip(full.v, part.v))
        return LayerKVCache(k=k, v=v, slot_mask=slot_mask, end=end)
    k = full.k.at[:, slots, :w].set(part.k[:, src], mode="drop")
    v = full.v.at[:, slots, :w].set(part.v[:, src], mode="drop")
    return KVCache(k=k, v=v, slot_mask=slot_mask, end=end)


@functools.partial(jax.jit, donate_argnames=("s",))
def place(s: SamplingState, part, logits, src, slots, rows: dict) -> SamplingState:
    """Rows ``src [n]`` of the prefilled ``part`` / ``logits`` into ``slots [n]`` (N = no-op).

    ``rows`` holds the placed rows' buffers and settings, each [n, ...]: ``tokens``, ``logprobs``,
    ``sampled`` ([n, R]), ``length``, ``max_new``, ``min_new``, ``stop_at``, ``stop_ids`` [n, J],
    ``prompt_lengths``, ``row_id``, and optionally ``num_new`` (a preempted row's sampled count).
    The rows start running (``num_new`` 0 unless given, not done).
    """
    put = lambda a, x: a.at[slots].set(x.astype(a.dtype), mode="drop")
    n = slots.shape[0]
    rows = dict(rows)
    num_new = rows.pop("num_new", jnp.zeros((n,), jnp.int32))
    return s.replace(
        cache=_place_cache(s.cache, part, src, slots),
        logits=put(s.logits, logits[src]),
        num_new=put(s.num_new, num_new),
        done=put(s.done, jnp.zeros((n,), bool)),
        finish_reason=put(s.finish_reason, jnp.full((n,), RUNNING, jnp.int32)),
        **{name: put(getattr(s, name), x) for name, x in rows.items()},
    )


@functools.partial(jax.jit, static_argnames=("width",))
def resize(s: SamplingState, width: int) -> SamplingState:
    """``s`` with its dense cache holding ``width`` slots per row: the first ``width`` (every
    running row's ``end`` is below it) or zero-padded, the new slots invalid. The session keeps
    the cache at the next segment's ``cap``, so a segment copies nothing in or out; a copy is
    made only when ``cap`` changes (``ContinuousSession.step``)."""
    c = s.cache
    if not isinstance(c, (KVCache, LayerKVCache)):
        raise ValueError(f"resize: a dense cache only, got a {type(c).__name__}")
    return s.replace(cache=c.truncate(width) if width <= c.max_len else c.pad_to(width))


@functools.partial(jax.jit, static_argnames=("params", "cap", "max_len"), donate_argnames=("s",))
def segment(
    model, s: SamplingState, key, budget, stop_on_free, *, params: SamplingParams, cap, max_len=None
):
    """Decodes the slots (see the module docstring); ``model`` already unstacked for the decode
    layout. ``key`` is the call's key (every row's stream derives from it and its ``row_id``).
    ``stop_on_free``: int32, the segment ends once that many slots have finished in it (0: never;
    a bool is 0 / 1). ``max_len``: C, the cache slots a row may fill (default the cache's width;
    a cache held at ``cap`` by ``resize`` passes the call's C)."""
    max_len = s.cache.max_len if max_len is None else max_len
    step = functools.partial(_decode_step, model, params, max_len)
    part = s.replace(cache=state_lib.truncate_cache(s.cache, cap), key=key)
    done0, step0 = part.done, part.step
    refill = jnp.asarray(stop_on_free, jnp.int32)

    def cond(x):
        running = ~x.done
        # one sum over the slots (one collective where they are split over devices): the running
        # slots, those of them without room for another token, and the slots freed in the segment
        counts = jnp.sum(
            jnp.stack([running, running & (x.cache.end >= cap), x.done & ~done0], axis=-1),
            axis=0,
            dtype=jnp.int32,
        )
        return (
            (counts[0] > 0)
            & (counts[1] == 0)
            & (x.step - step0 < budget)
            & ~((refill > 0) & (counts[2] >= refill))
        )

    part = jax.lax.while_loop(cond, step, part)
    return part.replace(cache=state_lib.write_back_cache(s.cache, part.cache))
