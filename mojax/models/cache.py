"""The KV cache: a plain pytree the sampler carries through ``lax.while_loop`` (and may donate).

Layout (shape legend: L layers, B rows, S = S_max slots, K kv heads, D head dim)::

    k, v       [L, B, C, K, D]  keys (after q/k-norm and RoPE) and values; any dtype (bf16 ok)
    slot_mask  bool  [B, C]     True where a slot holds a real (non-padding) token
    end        int32 [B]        next slot each row writes to (slots [0, end) are used, valid or not)

One call path serves prefill, decode and appends of tool observations of different lengths per row:
a cached call with ``tokens [B, T]`` and ``token_mask [B, T]`` writes the T new keys/values of row b
at slots ``end[b] .. end[b] + T - 1`` (padding in the chunk takes a slot with ``slot_mask`` False),
then advances ``end`` by T. Because slots are written in time order, causality is by slot index: the
query written to slot s attends to the valid slots ``<= s``. RoPE positions are explicit per token;
their default continues each row from its number of valid slots (``n_valid + cumsum(token_mask) -
1``), so a row padded at any point sees exactly the positions an unpadded sequence would.

Writes past ``S_max`` are dropped (scatter ``mode="drop"``), never wrapped; size the cache for the
longest row (``max(end) + T <= S_max``).
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from mojax.models.config import QwenConfig

#: Logical axis names of the cache fields (map them with the model's logical axis rules).
CACHE_LOGICAL_AXES = {
    "k": ("layers", "batch", "cache_length", "kv_heads", "head_dim"),
    "v": ("layers", "batch", "cache_length", "kv_heads", "head_dim"),
    "slot_mask": ("batch", "cache_length"),
    "end": ("batch",),
}


@flax.struct.dataclass
class KVCache:
    """Per-layer keys/values of every row plus which slots are real (see the module docstring)."""

    k: jax.Array  # [L, B, C, K, D]
    v: jax.Array  # [L, B, C, K, D]
    slot_mask: jax.Array  # bool [B, C]
    end: jax.Array  # int32 [B]

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def num_valid(self) -> jax.Array:
        """int32 [B]: real tokens held per row (the next token's default RoPE position)."""
        return jnp.sum(self.slot_mask, axis=-1, dtype=jnp.int32)

    def repeat_rows(self, n: int) -> KVCache:
        """Each row repeated ``n`` times, prompt-major (row ``p * n + g``), e.g. to share one
        prefill across the G samples of a prompt."""
        return KVCache(
            k=jnp.repeat(self.k, n, axis=1),
            v=jnp.repeat(self.v, n, axis=1),
            slot_mask=jnp.repeat(self.slot_mask, n, axis=0),
            end=jnp.repeat(self.end, n, axis=0),
        )

    def broadcast(self, num_samples: int, max_len: int) -> KVCache:
        """Each row repeated ``num_samples`` times (``repeat_rows``), slots padded to ``max_len``."""
        rep = self.repeat_rows(num_samples)
        return rep.replace(
            k=pad_slots(rep.k, 2, max_len),
            v=pad_slots(rep.v, 2, max_len),
            slot_mask=pad_slots(rep.slot_mask, 1, max_len),
        )

    def truncate(self, cap: int) -> KVCache:
        """The first ``cap`` slots of every row (a decode segment's working cache)."""
        if cap == self.max_len:
            return self
        return self.replace(
            k=self.k[:, :, :cap], v=self.v[:, :, :cap], slot_mask=self.slot_mask[:, :cap]
        )

    def pad_to(self, max_len: int) -> KVCache:
        """Every row zero-padded to ``max_len`` slots (the new slots invalid)."""
        grow = lambda a, axis: pad_slots(a, axis, max_len)
        return self.replace(k=grow(self.k, 2), v=grow(self.v, 2), slot_mask=grow(self.slot_mask, 1))

    def write_back(self, part: KVCache) -> KVCache:
        """Writes a segment's cache (its first ``cap`` slots) back into this one, in place."""
        if part.max_len == self.max_len:
            return part
        return jax.tree.map(put_prefix, self.replace(end=part.end), part)

    def logical_axes(self) -> KVCache:
        """A KVCache of ``PartitionSpec``s of logical names, for ``nn.logical_to_mesh_sharding``."""
        return KVCache(**{k: PartitionSpec(*v) for k, v in CACHE_LOGICAL_AXES.items()})


def pad_slots(a: jax.Array, slot_axis: int, max_len: int) -> jax.Array:
    """``a`` zero-padded along ``slot_axis`` to ``max_len`` slots."""
    pad = [(0, 0)] * a.ndim
    pad[slot_axis] = (0, max_len - a.shape[slot_axis])
    return jnp.pad(a, pad)


def put_prefix(full: jax.Array, part: jax.Array) -> jax.Array:
    """``full`` with ``part`` written at its origin (``dynamic_update_slice``, in place)."""
    return jax.lax.dynamic_update_slice(full, part, (0,) * full.ndim)


def init_cache(config: QwenConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache for ``batch`` rows of up to ``max_len`` slots.

    Args:
      config: the model config (L, K, D).
      batch: B.
      max_len: S_max, slots per row (prompt + everything generated or appended).
      dtype: storage dtype of k/v; defaults to the compute dtype (``jnp.bfloat16`` halves memory).
    """
    dtype = jnp.dtype(dtype or config.dtype)
    shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_dim)
    return KVCache(
        k=jnp.zeros(shape, dtype),
        v=jnp.zeros(shape, dtype),
        slot_mask=jnp.zeros((batch, max_len), bool),
        end=jnp.zeros((batch,), jnp.int32),
    )


def write_indices(cache: KVCache, num_tokens: int) -> jax.Array:
    """int32 [B, T]: the slots the next T tokens of each row go to."""
    return cache.end[:, None] + jnp.arange(num_tokens, dtype=jnp.int32)[None, :]


def update_slot_mask(cache: KVCache, token_mask: jax.Array) -> jax.Array:
    """bool [B, C]: the slot mask after writing a chunk with ``token_mask [B, T]``."""
    idx = write_indices(cache, token_mask.shape[1])
    return set_rows(cache.slot_mask, 0, idx, token_mask.astype(bool))


def write_layer(kv: jax.Array, layer, new: jax.Array, idx: jax.Array) -> jax.Array:
    """Scatters ``new [B, T, K, D]`` into ``kv [L, B, C, K, D]`` at ``layer`` and slots ``idx [B,
    T]``.

    Only B*T slots are written (in place inside a donated loop carry), not the whole layer; each
    row's write is its own (``scatter_rows``): no collective where the rows are split over devices.
    """
    return scatter_rows(kv, 1, 2, idx, new, fixed={0: layer})


def set_rows(x: jax.Array, slot_axis: int, idx: jax.Array, new: jax.Array) -> jax.Array:
    """``x [B, ...]`` with ``new [B, T, ...]`` written at slots ``idx [B, T]`` (or one slot each,
    ``idx [B]``, ``new [B, ...]``) of axis ``slot_axis`` of each row ``x[b]``; writes past the end
    are dropped. See ``scatter_rows``."""
    return scatter_rows(x, 0, slot_axis + 1, idx, new)


def scatter_rows(x, row_axis: int, slot_axis: int, idx, new, fixed=None) -> jax.Array:
    """``x`` with ``new [B, T, *W]`` written at slots ``idx [B, T]`` (or ``idx [B]``, ``new [B,
    *W]``) of ``slot_axis``, row ``b`` of ``row_axis`` getting ``new[b]``; ``fixed`` maps other
    axes to one index each (a layer); ``W``: the remaining axes of ``x`` in order. Writes past the
    end are dropped.

    The same values as ``x.at[..., rows, ..., idx].set(new)`` with ``rows`` an ``arange``, as one
    scatter whose row axis is a batch axis (``operand_batching_dims``), which XLA's SPMD
    partitioner keeps on the devices that hold the rows. With explicit row indices it all-gathers
    every row's update onto every device: one collective per write, per layer and per decode step
    on a sampler whose rows are split over devices. (A ``vmap`` of the write gives the same batch
    axis, but moves it to the front: a copy of the whole cache where it is not there already.)
    """
    fixed = dict(fixed or {})
    one = idx.ndim == 1
    idx, new = (idx[:, None], new[:, None]) if one else (idx, new)
    cols = [jnp.broadcast_to(jnp.asarray(v, jnp.int32), idx.shape) for v in fixed.values()]
    indices = jnp.stack([*cols, idx.astype(jnp.int32)], axis=-1)  # [B, T, n]
    indexed = (*fixed, slot_axis)
    windows = [a for a in range(x.ndim) if a not in indexed and a != row_axis]
    dims = jax.lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(2, 2 + len(windows))),
        inserted_window_dims=tuple(sorted(indexed)),
        scatter_dims_to_operand_dims=indexed,
        operand_batching_dims=(row_axis,),
        scatter_indices_batching_dims=(0,),
    )
    mode = jax.lax.GatherScatterMode.FILL_OR_DROP
    return jax.lax.scatter(x, indices, new.astype(x.dtype), dims, mode=mode)
