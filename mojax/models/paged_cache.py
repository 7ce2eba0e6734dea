"""The paged KV cache: a pool of fixed-size pages shared by the rows, each row's pages named by its
page table, so the memory in use follows the tokens the rows hold, not rows x cache length.

Layout (shape legend: L layers, N rows, Np pages in the pool, Ps page size, Pr pages per row, C
cache slots of a row, K kv heads, D head dim)::

    k, v        [L, K, Np, Ps, D]  the page pool (the layout of JAX's Pallas paged-attention
                                   kernels, ``mojax.models.paged_attention``); any dtype. Under
                                   unrolled layers (``Layouts.decode_per_layer``) a tuple of L
                                   ``[K, Np, Ps, D]`` arrays, so a kernel reads one layer's pool
                                   without a slice copy
    page_table  int32 [N, Pr]      the pool page holding a row's tokens ``[j*Ps, (j+1)*Ps)``;
                                   ``Np`` (out of range) where the row has no page
    lengths     int32 [N]          real tokens a row holds (its next token goes to position
                                   ``lengths``: page ``page_table[row, lengths // Ps]``, offset
                                   ``lengths % Ps``)
    end         int32 [N]          the write position a ``KVCache`` row would have (padding slots
                                   included): the sampler's segment bookkeeping reads it
    max_len     C (static)         the slots a ``KVCache`` row would have; Pr = ceil(C / Ps)

On a mesh (``shards`` S > 1, the continuous sampler's slots split over the mesh's batch axes) the
pool is S pools of ``Np / S`` pages, one per shard of slots, laid end to end on the page axis and
sharded over the same axes: slot ``n`` (of shard ``n // (N / S)``) takes pages of its shard's pool
only, and its page table holds shard-local ids (``Np / S``: none). Reads and writes run per shard
(a ``vmap`` over the shard axis, which XLA partitions without collectives), so a device holds
and touches its own shard's pages only; placing prefilled rows scatters with global ids.

Unlike ``KVCache`` (``mojax.models.cache``) a row's pages hold its real tokens only, packed from
position 0: a cached call writes the chunk's real tokens at ``lengths + cumsum(token_mask) - 1`` and
drops its padding, so a row's keys are exactly ``[0, lengths)`` (what the paged-attention kernels
take) and RoPE positions, which count real tokens in both caches, are the same. Writes to a page
the row does not own (``Np``), past ``Pr`` pages, or of padding are dropped (``mode="drop"``), so an
idle or finished row never writes into a page that the host allocator
(``mojax.sampling.continuous.pages``) has given to another row.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from mojax.models.cache import KVCache


@flax.struct.dataclass
class PagedKVCache:
    """A page pool, per-row page tables and lengths (see the module docstring)."""

    k: jax.Array | tuple[jax.Array, ...]  # [L, K, Np, Ps, D] or L x [K, Np, Ps, D]
    v: jax.Array | tuple[jax.Array, ...]
    page_table: jax.Array  # int32 [N, Pr]
    lengths: jax.Array  # int32 [N]
    end: jax.Array  # int32 [N]
    max_len: int = flax.struct.field(pytree_node=False)
    shards: int = flax.struct.field(pytree_node=False, default=1)

    @property
    def num_pages(self) -> int:
        return layer_pool(self.k, 0).shape[1]

    @property
    def local_pages(self) -> int:
        """Pages of one shard's pool (``Np / S``; the page table's "none" id)."""
        return self.num_pages // self.shards

    @property
    def page_size(self) -> int:
        return layer_pool(self.k, 0).shape[2]

    @property
    def num_valid(self) -> jax.Array:
        """int32 [N]: real tokens held per row (the next token's default RoPE position)."""
        return self.lengths

    @property
    def slots(self) -> int:
        """The positions a row's page table spans (Pr x Ps, the width attention gathers)."""
        return self.page_table.shape[1] * self.page_size

    def truncate(self, cap: int) -> PagedKVCache:
        """The page table's first ``ceil(cap / Ps)`` pages (a decode segment: a row at
        ``end <= cap`` holds at most ``cap`` real tokens)."""
        pages = min(-(-cap // self.page_size), self.page_table.shape[1])
        return self.replace(page_table=self.page_table[:, :pages])

    def write_back(self, part: PagedKVCache) -> PagedKVCache:
        """This cache with a segment's pool, lengths and ends (its page table is unchanged)."""
        return self.replace(k=part.k, v=part.v, lengths=part.lengths, end=part.end)


def init_paged_cache(
    config,
    rows: int,
    max_len: int,
    num_pages: int,
    page_size: int,
    dtype=None,
    per_layer=False,
    shards: int = 1,
) -> PagedKVCache:
    """An empty paged cache: ``num_pages`` pages of ``page_size`` slots, ``rows`` rows of up to
    ``max_len`` slots, no page owned by any row (``per_layer``: one pool array per layer;
    ``shards``: that many pools of ``num_pages / shards`` pages, module docstring)."""
    if num_pages % shards or rows % shards:
        raise ValueError(f"{num_pages} pages and {rows} rows must split into {shards} shards")
    dtype = jnp.dtype(dtype or config.dtype)
    shape = (config.num_kv_heads, num_pages, page_size, config.head_dim)
    per_row = -(-max_len // page_size)

    def pool():
        if per_layer:
            return tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers))
        return jnp.zeros((config.num_layers, *shape), dtype)

    return PagedKVCache(
        k=pool(),
        v=pool(),
        page_table=jnp.full((rows, per_row), num_pages // shards, jnp.int32),
        lengths=jnp.zeros((rows,), jnp.int32),
        end=jnp.zeros((rows,), jnp.int32),
        max_len=max_len,
        shards=shards,
    )


def token_positions(cache: PagedKVCache, token_mask: jax.Array) -> jax.Array:
    """int32 [N, T]: the position each token of a chunk takes (``lengths + cumsum - 1``; padding
    gets the position of the real token before it, or ``lengths - 1``)."""
    counts = jnp.cumsum(token_mask.astype(jnp.int32), axis=-1)
    return cache.lengths[:, None] + counts - 1


def physical_pages(cache: PagedKVCache, positions: jax.Array, write: jax.Array):
    """``(page, offset)`` int32 [N, T] of ``positions`` (shard-local pages); ``page`` is
    ``local_pages`` (a dropped write) where ``write`` is False, the position is past the table,
    or the row owns no page there."""
    ps, pr = cache.page_size, cache.page_table.shape[1]
    logical = positions // ps
    inside = write & (positions >= 0) & (logical < pr)
    rows = jnp.arange(positions.shape[0])[:, None]
    page = cache.page_table[rows, jnp.clip(logical, 0, pr - 1)]
    return jnp.where(inside, page, cache.local_pages), positions % ps


def layer_pool(pool, layer) -> jax.Array:
    """One layer's pool ``[K, Np, Ps, D]`` (a slice of a stacked pool, a tuple entry otherwise)."""
    if isinstance(pool, tuple):
        return pool[_int_layer(layer)]
    return pool[jnp.asarray(layer, jnp.int32)]


def _int_layer(layer) -> int:
    if not isinstance(layer, int):
        raise TypeError(
            "a per-layer page pool needs unrolled layers (a Python int layer index); "
            f"got layer={layer!r}. Use mojax.models.unstack_layers, or a stacked pool"
        )
    return layer


def _by_shard(x: jax.Array, shards: int, axis: int) -> jax.Array:
    """``x`` with its ``axis`` split into ``[shards, size / shards]`` and the shard axis first."""
    shape = x.shape[:axis] + (shards, x.shape[axis] // shards) + x.shape[axis + 1 :]
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def _from_shards(x: jax.Array, axis: int) -> jax.Array:
    """The inverse of ``_by_shard``."""
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2 :])


def _scatter(pool_layer, new, page, offset):
    """One layer's ``[K, Np', Ps, D]`` with ``new [N, T, K, D]`` at ``(page, offset)`` (page
    out of range: dropped)."""
    k = new.shape[2]
    at = (jnp.arange(k)[None, None, :], page[..., None], offset[..., None])
    return pool_layer.at[at].set(new.astype(pool_layer.dtype), mode="drop")


def write_layer(pool, layer, new: jax.Array, page: jax.Array, offset: jax.Array, shards: int = 1):
    """Scatters ``new [N, T, K, D]`` into the pool (``[L, K, Np, Ps, D]`` or L x ``[K, Np, Ps,
    D]``) at ``layer`` and ``(page, offset) [N, T]`` (shard-local pages; ``local_pages``:
    dropped), each shard's rows into its own pool. Only N*T*K slots are written; returns the
    pool."""
    if isinstance(pool, tuple):
        i = _int_layer(layer)
        one = _write_one(pool[i], new, page, offset, shards)
        return pool[:i] + (one,) + pool[i + 1 :]
    layer = jnp.asarray(layer, jnp.int32)
    if shards == 1:
        k = new.shape[2]
        at = (jnp.arange(k)[None, None, :], page[..., None], offset[..., None])
        return pool.at[(layer, *at)].set(new.astype(pool.dtype), mode="drop")
    one = _write_one(pool[layer], new, page, offset, shards)
    return jax.lax.dynamic_update_index_in_dim(pool, one, layer, 0)


def _write_one(pool_layer, new, page, offset, shards: int):
    if shards == 1:
        return _scatter(pool_layer, new, page, offset)
    parts = [_by_shard(x, shards, 0) for x in (new, page, offset)]
    out = jax.vmap(_scatter)(_by_shard(pool_layer, shards, 1), *parts)
    return _from_shards(out, 1)


def gather_layer(pool, layer, page_table: jax.Array, shards: int = 1) -> jax.Array:
    """One layer's pages of every row, in row order: ``[N, K, Pr*Ps, D]``, each shard's rows from
    its own pool (a missing page reads its pool's last page: its slots are past the row's length,
    masked by the caller)."""
    n, pr = page_table.shape
    heads_, num_pages, ps, d = layer_pool(pool, 0).shape
    heads = jnp.arange(heads_)[None, :, None]
    if isinstance(pool, tuple):
        one = pool[_int_layer(layer)]
    elif shards == 1:  # index the stacked pool directly: no copy of the layer's slice
        pages = jnp.minimum(page_table, num_pages - 1)[:, None, :]  # [N, 1, Pr]
        got = pool[jnp.asarray(layer, jnp.int32), heads, pages]
        return got.reshape(n, heads_, pr * ps, d)  # [N, K, Pr, Ps, D] -> rows
    else:
        one = pool[jnp.asarray(layer, jnp.int32)]
    local = num_pages // shards
    take = lambda p, table: p[heads, jnp.minimum(table, local - 1)[:, None, :]]
    if shards == 1:
        got = take(one, page_table)
    else:
        got = _from_shards(
            jax.vmap(take)(_by_shard(one, shards, 1), _by_shard(page_table, shards, 0)), 0
        )
    return got.reshape(n, heads_, pr * ps, d)  # [N, K, Pr, Ps, D] -> rows


def place_rows(full: PagedKVCache, part: KVCache, src: jax.Array, rows: jax.Array) -> PagedKVCache:
    """``full`` with rows ``src [n]`` of a prefilled ``KVCache`` ``part`` (``[L, n', W, K, D]``)
    written to rows ``rows [n]`` (index N: dropped): each row's real slots packed from position 0
    into the pages its (already set) page table names, in its shard's pool (one scatter with
    global page ids); ``lengths`` its real tokens, ``end`` W."""
    mask = part.slot_mask[src]  # [n, W]
    n = full.lengths.shape[0]
    keep = rows < n
    table = full.page_table[jnp.minimum(rows, n - 1)]
    target = full.replace(page_table=table, lengths=jnp.zeros_like(rows))
    page, offset = physical_pages(target, token_positions(target, mask), mask & keep[:, None])
    # shard-local pages -> global ids in the pools laid end to end (none -> Np: dropped)
    shard = (jnp.minimum(rows, n - 1) // (n // full.shards))[:, None]
    page = jnp.where(page < full.local_pages, page + shard * full.local_pages, full.num_pages)
    k, v = full.k, full.v
    for layer in range(part.k.shape[0]):  # L
        k = write_layer(k, layer, part.k[layer, src], page, offset)
        v = write_layer(v, layer, part.v[layer, src], page, offset)
    return full.replace(
        k=k,
        v=v,
        lengths=full.lengths.at[rows].set(jnp.sum(mask, axis=-1, dtype=jnp.int32), mode="drop"),
        end=full.end.at[rows].set(part.end[src], mode="drop"),
    )
