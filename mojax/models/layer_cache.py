"""The decode layout of the KV cache: one array per layer, keys stored with the slot axis minor.

``KVCache`` (``mojax.models.cache``) stacks the layers, ``[L, B, C, K, D]``, as a scanned model
needs. In the CPU decode loop that layout costs twice:

* each layer's ``k_all[layer]`` is a slice that XLA CPU copies out of the stacked array before the
  attention reads it, on every token;
* the scores ``q . k`` reduce over D, the minor axis of a ``[B, C, K, D]`` slice, which YNNPACK's
  multiply-reduce runs at a few GFLOP/s.

``LayerKVCache`` holds one array per layer instead (a tuple, so it works with unrolled layers only):

    k          L x [B, K, D, C]  keys (after q/k-norm and RoPE); the scores reduce over D, a
                                 non-minor axis, vectorised along the C slots
    v          L x [B, K, C, D]  values; the output reduces over C, vectorised along D
    slot_mask  bool  [B, C]      as in ``KVCache``
    end        int32 [B]         as in ``KVCache``

Both einsums of a multi-token cached call (an appended observation) then have their batch axes
(B, K) leading too. The slot semantics (writes at ``end``, ``mode="drop"`` past ``C``, causality by
slot index) are those of ``KVCache``; ``to_layer_major`` and ``LayerKVCache.to_stacked`` convert
between the two exactly (transposes only).

The decode loop uses this layout when ``Layouts.decode_per_layer`` is set (the CPU and GPU layouts).

Shape legend (``mojax/__init__.py``): L layers, B rows, C cache slots, K kv heads, D head dim,
T tokens.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from mojax.models.cache import KVCache, pad_slots, put_prefix, set_rows

#: Logical axis names of one layer's arrays (map them with the model's logical axis rules).
LAYER_CACHE_LOGICAL_AXES = {
    "k": ("batch", "kv_heads", "head_dim", "cache_length"),
    "v": ("batch", "kv_heads", "cache_length", "head_dim"),
    "slot_mask": ("batch", "cache_length"),
    "end": ("batch",),
}


@flax.struct.dataclass
class LayerKVCache:
    """Per-layer keys (slot axis minor) and values, plus which slots are real (module docstring)."""

    k: tuple[jax.Array, ...]  # L x [B, K, D, C]
    v: tuple[jax.Array, ...]  # L x [B, K, C, D]
    slot_mask: jax.Array  # bool [B, C]
    end: jax.Array  # int32 [B]

    @property
    def max_len(self) -> int:
        return self.slot_mask.shape[-1]

    @property
    def num_valid(self) -> jax.Array:
        """int32 [B]: real tokens held per row (the next token's default RoPE position)."""
        return jnp.sum(self.slot_mask, axis=-1, dtype=jnp.int32)

    def to_stacked(self) -> KVCache:
        """The same cache in the stacked ``KVCache`` layout ``[L, B, C, K, D]``."""
        return KVCache(
            k=jnp.stack([jnp.transpose(a, (0, 3, 1, 2)) for a in self.k]),
            v=jnp.stack([jnp.swapaxes(a, 1, 2) for a in self.v]),
            slot_mask=self.slot_mask,
            end=self.end,
        )

    def truncate(self, cap: int) -> LayerKVCache:
        """The first ``cap`` slots of every row (a decode segment's working cache)."""
        if cap == self.max_len:
            return self
        return self.replace(
            k=tuple(a[..., :cap] for a in self.k),
            v=tuple(a[:, :, :cap] for a in self.v),
            slot_mask=self.slot_mask[:, :cap],
        )

    def pad_to(self, max_len: int) -> LayerKVCache:
        """Every row zero-padded to ``max_len`` slots (the new slots invalid)."""
        grow = lambda a, axis: pad_slots(a, axis, max_len)
        return self.replace(
            k=tuple(grow(a, 3) for a in self.k),
            v=tuple(grow(a, 2) for a in self.v),
            slot_mask=grow(self.slot_mask, 1),
        )

    def write_back(self, part: LayerKVCache) -> LayerKVCache:
        """Writes a segment's cache (its first ``cap`` slots) back into this one, in place."""
        if part.max_len == self.max_len:
            return part
        return jax.tree.map(put_prefix, self.replace(end=part.end), part)

    def broadcast(self, num_samples: int, max_len: int) -> LayerKVCache:
        """Each row repeated ``num_samples`` times (prompt-major), slots padded to ``max_len``."""

        def grow(a, slot_axis):
            return pad_slots(jnp.repeat(a, num_samples, axis=0), slot_axis, max_len)

        return LayerKVCache(
            k=tuple(grow(a, 3) for a in self.k),
            v=tuple(grow(a, 2) for a in self.v),
            slot_mask=grow(self.slot_mask, 1),
            end=jnp.repeat(self.end, num_samples, axis=0),
        )


def to_layer_major(cache: KVCache | LayerKVCache) -> LayerKVCache:
    """``cache`` in the decode layout (returned as is if it already is)."""
    if isinstance(cache, LayerKVCache):
        return cache
    n = cache.k.shape[0]
    return LayerKVCache(
        k=tuple(jnp.transpose(cache.k[i], (0, 2, 3, 1)) for i in range(n)),
        v=tuple(jnp.swapaxes(cache.v[i], 1, 2) for i in range(n)),
        slot_mask=cache.slot_mask,
        end=cache.end,
    )


def to_stacked(cache: KVCache | LayerKVCache) -> KVCache:
    """``cache`` in the stacked ``KVCache`` layout (returned as is if it already is)."""
    return cache.to_stacked() if isinstance(cache, LayerKVCache) else cache


def write_layer(
    kv: tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]],
    layer: int,
    new_k: jax.Array,
    new_v: jax.Array,
    idx: jax.Array,
):
    """Scatters ``new_k`` / ``new_v [B, T, K, D]`` into layer ``layer`` at slots ``idx [B, T]``.

    Returns ``(keys [B, K, D, C], values [B, K, C, D], kv)``, ``kv`` the updated pair of tuples.
    Only B*T slots are written (in place inside a donated loop carry); writes past C are dropped.
    """
    if not isinstance(layer, int):
        raise TypeError(
            "a LayerKVCache needs unrolled layers (a Python int layer index, scan_layers=False); "
            f"got layer={layer!r}. Use mojax.models.unstack_layers, or a stacked KVCache"
        )
    ks, vs = list(kv[0]), list(kv[1])
    ks[layer] = set_rows(ks[layer], 2, idx, new_k)  # a row's keys [K, D, C]: slots on axis 2
    vs[layer] = set_rows(vs[layer], 1, idx, new_v)  # a row's values [K, C, D]: slots on axis 1
    return ks[layer], vs[layer], (tuple(ks), tuple(vs))
