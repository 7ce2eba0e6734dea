"""Attention of a cached chunk over a ``PagedKVCache`` (``mojax.models.paged_cache``).

``paged_layer`` writes the chunk's real keys and values into the row's pages, then attends the
chunk's queries over the row's keys ``[0, lengths)`` (causally: a query at position ``p`` sees the
keys ``<= p``). ``impl`` is ``Layouts.paged_attention`` (``mojax.models.layouts``):

* ``"gather"`` (every backend; any chunk length): the row's pages are gathered by its page table
  into ``[N, K, Pr*Ps, D]`` and the cache attention of ``mojax.models.layers`` runs on them (the
  ``attend_fn`` the caller passes: ``attend`` or ``attend_layer_major``, as for a ``KVCache``), so
  it computes what the dense cache's attention computes on the same keys;
* ``"pallas_gpu"``: a one-token query (a decode step) runs JAX's Pallas GPU paged-attention kernel
  (``jax.experimental.pallas.ops.gpu.paged_attention``: online softmax over blocks of pages, the
  keys masked by ``lengths``; grouped-query heads); longer chunks, and shapes the kernel does not
  take (``gpu_kernel_fits``: power-of-two page size and head dim >= 16), take the gather path.
  ``"pallas_gpu_interpret"`` runs the same kernel in Pallas' interpreter (the CPU tests);
* ``"pallas_tpu"``: a decode step runs JAX's Pallas TPU paged-attention kernel
  (``jax.experimental.pallas.ops.tpu.paged_attention``), which loads keys and values as bf16: a
  bf16 cache only (``tpu_kernel_fits``; other caches take the gather path);
  ``"pallas_tpu_interpret"`` runs it in the TPU interpreter.

A cache of several shards (a mesh: one pool per shard of rows) takes the gather path, per shard;
the kernels read one pool (running them per device under ``shard_map`` is not built).

Shape legend: N rows, T tokens, H query heads, K kv heads, G = H / K, D head dim, Np pool pages,
Ps page size, Pr pages per row.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp

from mojax.models.paged_cache import PagedKVCache, gather_layer, layer_pool, write_layer

PAGED_IMPLS = (
    "gather",
    "pallas_gpu",
    "pallas_gpu_interpret",
    "pallas_tpu",
    "pallas_tpu_interpret",
)

#: Pages the GPU kernel reads per block, and the most partitions it splits a row's pages into.
_GPU_PAGES_PER_BLOCK = 8
_GPU_MAX_SPLITS = 16


def gpu_kernel_blocks(pages: int, page_size: int) -> tuple[int, int, int]:
    """``(pages_per_compute_block, k_splits, padded pages)`` for a page table of ``pages``
    columns: a block of a power-of-two number of pages and at least 16 keys (Triton's dot and
    ``arange`` take power-of-two extents of at least 16), whole blocks per partition."""
    per_block = 1
    while per_block * 2 <= min(pages, _GPU_PAGES_PER_BLOCK):
        per_block *= 2
    while per_block * page_size < 16:
        per_block *= 2
    splits = max(1, min(_GPU_MAX_SPLITS, pages // per_block))
    unit = per_block * splits
    return per_block, splits, -(-pages // unit) * unit


def gpu_kernel_fits(page_size: int, head_dim: int) -> bool:
    """Whether the GPU kernel takes these shapes: power-of-two page size and head dim >= 16."""
    pow2 = lambda x: x > 0 and x & (x - 1) == 0
    return pow2(page_size) and pow2(head_dim) and head_dim >= 16


def pallas_gpu(q, k_pages, v_pages, page_table, lengths, *, interpret: bool = False):
    """JAX's Pallas GPU paged attention of one query token per row.

    Args:
      q: ``[N, H, D]`` (unscaled: the kernel does not scale, so ``q * D**-0.5`` goes in).
      k_pages, v_pages: one layer's pool ``[K, Np, Ps, D]``.
      page_table: int32 ``[N, Pr]`` (Np where the row owns no page: read as page 0, masked).
      lengths: int32 ``[N]``, the keys each row attends over (``[0, lengths)``).
    Returns ``[N, H, D]`` in ``q``'s dtype.
    """
    from jax.experimental.pallas.ops.gpu import paged_attention as kernel

    per_block, splits, padded = gpu_kernel_blocks(page_table.shape[1], k_pages.shape[2])
    table = jnp.where(page_table < k_pages.shape[1], page_table, 0)
    table = jnp.pad(table, ((0, 0), (0, padded - table.shape[1])))
    scaled = (q.astype(jnp.float32) * q.shape[-1] ** -0.5).astype(q.dtype)
    return kernel.paged_attention(
        scaled,
        k_pages.astype(q.dtype),
        v_pages.astype(q.dtype),
        table,
        lengths.astype(jnp.int32),
        pages_per_compute_block=per_block,
        k_splits=splits,
        interpret=interpret,
    )


def tpu_kernel_fits(page_size: int, head_dim: int, dtype, interpret: bool) -> bool:
    """Whether the TPU kernel takes these shapes and keeps the values: it loads keys and values
    as bf16, so only a bf16 cache; on a TPU, head dim a multiple of 128 and page size of 16
    (its tiles); the interpreter takes any shape."""
    if jnp.dtype(dtype) != jnp.bfloat16:
        return False
    return interpret or (head_dim % 128 == 0 and page_size % 16 == 0)


def pallas_tpu(q, k_pages, v_pages, page_table, lengths, *, interpret: bool = False):
    """JAX's Pallas TPU paged attention (``jax.experimental.pallas.ops.tpu.paged_attention``) of
    one query token per row; arguments and result as ``pallas_gpu`` (the kernel loads keys and
    values as bf16: ``tpu_kernel_fits``). ``interpret`` runs it in the TPU interpreter."""
    import contextlib

    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    per_block = 1
    while per_block * 2 <= min(page_table.shape[1], _GPU_PAGES_PER_BLOCK):
        per_block *= 2
    padded = -(-page_table.shape[1] // per_block) * per_block
    table = jnp.where(page_table < k_pages.shape[1], page_table, 0)
    table = jnp.pad(table, ((0, 0), (0, padded - table.shape[1])))
    scaled = (q.astype(jnp.float32) * q.shape[-1] ** -0.5).astype(q.dtype)
    mode = pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext()
    with mode:
        return paged_attention(
            scaled, k_pages, v_pages, lengths.astype(jnp.int32), table,
            pages_per_compute_block=per_block,
        )  # fmt: skip


def _kernel(impl: str, cache: PagedKVCache, head_dim: int):
    """The kernel function of ``impl`` for this cache, or None (the gather path)."""
    if impl in ("pallas_gpu", "pallas_gpu_interpret") and gpu_kernel_fits(
        cache.page_size, head_dim
    ):
        return functools.partial(pallas_gpu, interpret=impl == "pallas_gpu_interpret")
    dtype = layer_pool(cache.k, 0).dtype
    interpret = impl == "pallas_tpu_interpret"
    if impl in ("pallas_tpu", "pallas_tpu_interpret") and tpu_kernel_fits(
        cache.page_size, head_dim, dtype, interpret
    ):
        return functools.partial(pallas_tpu, interpret=interpret)
    return None


def paged_layer(q, kk, vv, cache: PagedKVCache, layer, write, q_idx, lengths, *, impl, attend_fn,
                layer_major: bool, dtype):  # fmt: skip
    """Writes a chunk into ``cache`` at ``layer`` and attends over it (module docstring).

    Args:
      q: ``[N, T, H, D]`` queries; kk, vv: ``[N, T, K, D]`` the chunk's keys and values (after
        RoPE / norms).
      write: ``(page, offset)`` int32 ``[N, T]`` where each token goes (page Np: not written).
      q_idx: int32 ``[N, T]`` each query's position; lengths: int32 ``[N]`` after the write.
      attend_fn: ``attend`` (``layer_major`` False: keys ``[N, S, K, D]``) or
        ``attend_layer_major`` (keys ``[N, K, D, S]``) of ``mojax.models.layers``.
    Returns ``(out [N, T, H, D], cache)``.
    """
    n, t, h, d = q.shape
    k = kk.shape[2]
    page, offset = write
    cache = cache.replace(
        k=write_layer(cache.k, layer, kk, page, offset, cache.shards),
        v=write_layer(cache.v, layer, vv, page, offset, cache.shards),
    )
    kernel = _kernel(impl, cache, d) if t == 1 and cache.shards == 1 else None
    if kernel is not None:
        out = kernel(
            q[:, 0].astype(dtype),
            layer_pool(cache.k, layer),
            layer_pool(cache.v, layer),
            cache.page_table,
            lengths,
        )
        visible = (lengths > 0)[:, None, None, None]  # a row with no key: zeros, as ``attend``
        return jnp.where(visible, out[:, None], jnp.zeros((), dtype)).astype(dtype), cache
    keys = gather_layer(cache.k, layer, cache.page_table, cache.shards).astype(
        dtype
    )  # [N, K, S, D]
    values = gather_layer(cache.v, layer, cache.page_table, cache.shards).astype(dtype)
    s = keys.shape[2]
    slots = jnp.arange(s)[None, None, :]
    visible = (slots <= q_idx[:, :, None]) & (slots < lengths[:, None, None])  # [N, T, S]
    if layer_major:
        keys = jnp.swapaxes(keys, 2, 3)  # [N, K, D, S]
    else:
        keys, values = jnp.swapaxes(keys, 1, 2), jnp.swapaxes(values, 1, 2)  # [N, S, K, D]
    out = attend_fn(q.reshape(n, t, k, h // k, d), keys, values, visible, dtype)
    return out.reshape(n, t, h, d), cache


def check_impl(impl: str) -> None:
    if impl not in PAGED_IMPLS:
        raise ValueError(f"Layouts.paged_attention={impl!r} is not one of {PAGED_IMPLS}")
