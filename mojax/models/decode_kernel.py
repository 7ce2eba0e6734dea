"""A decode step's attention half in two Pallas kernels (``Layouts.decode_kernel``).

A GPU decode step at small batch is a chain of many small kernels, each far below the memory
bandwidth (``docs/performance.md`` section 6: ~290 per step at 0.5B, half the step). Per layer the
reference path launches the input RMSNorm (a reduction and a scale), the q/k/v product, the bias,
the q/k RMSNorms, RoPE's cos / sin and rotations for q and k, the scores, the masked softmax
(two reductions) and the weighted sum. Here one query token per row takes:

* **kernel A** (``qkv_rope``): the input RMSNorm, the q/k/v product over the fused kernel ``[E,
  (H + 2K) D]``, the bias (Qwen2), the q/k RMSNorm (Qwen3) and RoPE (cos / sin computed in the
  kernel from the positions) -- one launch. Grid: (blocks of 16 to 64 rows, the H + 2K heads); a
  program recomputes its rows' norm (``E`` floats a row) and runs a GEMV-shaped product of its
  head's ``D`` columns, as two halves of ``D / 2`` so that RoPE's rotate-half needs no slicing of
  values.
* **kernel B** (``attend_dense``): the one-query attention of each row and kv head over the
  dense per-layer cache (``LayerKVCache``: keys ``[B, K, D, C]``, values ``[B, K, C, D]``), an
  online softmax over blocks of slots (flash-decoding's inner loop), the G query heads of a kv
  head in one dot (padded to 16 rows); the mask is the row's visible slots. When the rows and kv
  heads give fewer than ~128 programs (small batches) a row's slots are split over several
  programs (flash-decoding) whose partial softmaxes a few XLA ops merge.

Not fused: the cache write (the XLA scatter of ``mojax.models.layer_cache.write_layer`` between
A and B: a Pallas kernel writes whole blocks, a row's one new slot is a scatter); the output
projection, the residual add, the MLP half. On a ``PagedKVCache`` kernel A runs, then the paged
write and attention of ``mojax.models.paged_attention`` (``Layouts.paged_attention``: JAX's
Pallas paged kernels); on a stacked ``KVCache`` kernel A, then the reference write and attention.

Numerics: the reference path's roundings are kept step by step (fp32 norm statistics rounded to
the compute dtype before the scale, the product rounded before the bias, fp32 RoPE rounded once).
What differs: fp32 summation order (the norms, the product, the softmax), the softmax
normaliser (kernel B rounds the unnormalised probabilities to the compute dtype for the value
product and divides once at the end; the reference rounds the normalised ones), and cos / sin
(the kernel's, not XLA's).

Not built: a TPU (Mosaic) variant (these kernels do not lower for Mosaic as written: its tiles
want other block shapes); a fused cache write; the kernels under a mesh that splits the rows
(a Pallas call is not partitioned: XLA would gather its operands; the paged path takes the
gather attention per shard there). Without fused projections (``fuse_decode_projections``) the
layer concatenates the q/k/v kernels for kernel A on each call.

``impl``: ``"pallas_gpu"`` (Triton lowering) or ``"pallas_gpu_interpret"`` (the same kernels in
Pallas' interpreter, the CPU tests). Shapes the Triton lowering does not take (``fits``) run the
reference layer. Shape legend (``mojax/__init__.py``): B rows, C slots, E embed, H heads, K kv
heads, G = H / K, D head dim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

DECODE_KERNELS = ("none", "pallas_gpu", "pallas_gpu_interpret")

_ROWS = (16, 64)  # rows of kernel A's programs: at least 16 (Triton's dot), at most 64
_HEADS = 16  # kernel B's query heads per program (a kv head's G, padded)
_PROGRAMS = 128  # kernel B splits a row's slots until about this many programs run (~SMs)
_NEG = -1e30  # as ``mojax.models.layers._NEG``


def check_impl(impl: str) -> None:
    if impl not in DECODE_KERNELS:
        raise ValueError(f"Layouts.decode_kernel={impl!r} is not one of {DECODE_KERNELS}")


def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two ``<= cap`` that divides ``n``."""
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def _pow2_at_most(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


def fits(hidden: int, head_dim: int, slots: int | None) -> bool:
    """Whether the Triton lowering takes these shapes: power-of-two head dim >= 32 (halves of
    at least 16 for its dot), an embed dim with a power-of-two divisor >= 16, a cache of at least
    16 slots (``slots`` None: no dense cache attention)."""
    half = head_dim // 2
    ok = head_dim % 2 == 0 and half >= 16 and half & (half - 1) == 0
    ok = ok and _pow2_divisor(hidden, 256) >= 16
    return ok and (slots is None or slots >= 16)


def _dot(a, b, exact):
    """fp32-accumulated product of two operands of one dtype; ``exact``: as fp32 operands at full
    precision (no TF32; the interpreter, whose XLA CPU has no bf16 x bf16 -> fp32 dot, and fp32
    models: a bf16 operand is exact in fp32, so the products are the same)."""
    if exact:
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
        return jnp.dot(a, b, preferred_element_type=jnp.float32, precision=lax.Precision.HIGHEST)
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


def _exact(dtype, interpret: bool) -> bool:
    return interpret or jnp.dtype(dtype) == jnp.float32


def _rms(x32, sumsq, n, eps, scale, dtype):
    """``mojax.models.layers.RMSNorm``'s roundings: fp32 statistics, then the scale in dtype."""
    return (x32 * lax.rsqrt(sumsq / n + eps)).astype(dtype) * scale.astype(dtype)


def _qkv_rope_kernel(pos_ref, x_ref, ln_ref, w_ref, b_ref, qn_ref, kn_ref, inv_ref, o_ref, *,
                     heads, kv_heads, block_e, eps, rope_scale, qk_norm, dtype, exact):  # fmt: skip
    """One program: a block of rows x one output head (module docstring, kernel A)."""
    h = pl.program_id(1)
    e = x_ref.shape[1]
    rows = x_ref.shape[0]

    def sumsq(i, acc):
        xc = x_ref[:, pl.ds(i * block_e, block_e)].astype(jnp.float32)
        return acc + jnp.sum(xc * xc, axis=1, keepdims=True)

    ss = lax.fori_loop(0, e // block_e, sumsq, jnp.zeros((rows, 1), jnp.float32))

    def product(i, acc):
        sl = pl.ds(i * block_e, block_e)
        xn = _rms(x_ref[:, sl].astype(jnp.float32), ss, e, eps, ln_ref[:, sl], dtype)
        lo = acc[0] + _dot(xn, w_ref[sl, 0, :].astype(dtype), exact)
        return lo, acc[1] + _dot(xn, w_ref[sl, 1, :].astype(dtype), exact)

    half = w_ref.shape[-1]
    zero = jnp.zeros((rows, half), jnp.float32)
    lo, hi = lax.fori_loop(0, e // block_e, product, (zero, zero))
    lo = lo.astype(dtype) + b_ref[0].astype(dtype)  # the product rounded, then the bias
    hi = hi.astype(dtype) + b_ref[1].astype(dtype)
    is_q, is_v = h < heads, h >= heads + kv_heads
    if qk_norm:
        lo32, hi32 = lo.astype(jnp.float32), hi.astype(jnp.float32)
        ssh = jnp.sum(lo32 * lo32, axis=1, keepdims=True) + jnp.sum(hi32 * hi32, axis=1,
                                                                    keepdims=True)  # fmt: skip
        s_lo = jnp.where(is_q, qn_ref[0], kn_ref[0])
        s_hi = jnp.where(is_q, qn_ref[1], kn_ref[1])
        lo = jnp.where(is_v, lo, _rms(lo32, ssh, 2 * half, eps, s_lo, dtype))
        hi = jnp.where(is_v, hi, _rms(hi32, ssh, 2 * half, eps, s_hi, dtype))
    freqs = pos_ref[...].astype(jnp.float32) * inv_ref[...]  # [rows, D/2]
    cos, sin = jnp.cos(freqs) * rope_scale, jnp.sin(freqs) * rope_scale
    lo32, hi32 = lo.astype(jnp.float32), hi.astype(jnp.float32)
    r_lo = (lo32 * cos + (-hi32) * sin).astype(dtype)  # rotate-half: [-hi, lo]
    r_hi = (hi32 * cos + lo32 * sin).astype(dtype)
    o_ref[:, 0, :] = jnp.where(is_v, lo, r_lo).astype(o_ref.dtype)
    o_ref[:, 1, :] = jnp.where(is_v, hi, r_hi).astype(o_ref.dtype)


def qkv_rope(x, positions, ln_scale, kernel, bias, q_scale, k_scale, inv_freq, rope_scale, *,
             heads, kv_heads, eps, dtype, interpret=False):  # fmt: skip
    """Kernel A: ``RMSNorm(x) @ kernel (+ bias)``, q/k RMSNorm, RoPE, for one token per row.

    Args:
      x: ``[B, E]`` the residual stream (before the input norm); positions: int ``[B]``.
      ln_scale: ``[E]`` the input norm's scale; kernel: ``[E, H + 2K, D]`` (q heads, k, v);
        bias: ``[H + 2K, D]`` or None; q_scale, k_scale: ``[D]`` or None (no q/k norm).
      inv_freq: fp32 ``[D / 2]`` and rope_scale: ``mojax.models.layers.rope_frequencies``.
    Returns ``(q [B, H, D], k [B, K, D], v [B, K, D])`` in ``dtype``.
    """
    b, e = x.shape
    nh, d = kernel.shape[1], kernel.shape[2]
    half = d // 2
    block = max(_ROWS[0], _pow2_at_most(2 * b - 1, _ROWS[1]))  # one block up to 64 rows
    rows = -(-b // block) * block
    if rows != b:
        x = jnp.pad(x, ((0, rows - b), (0, 0)))
        positions = jnp.pad(positions, (0, rows - b))
    qk_norm = q_scale is not None
    ones = jnp.ones((d,), dtype)
    q_scale, k_scale = (q_scale, k_scale) if qk_norm else (ones, ones)
    bias = jnp.zeros((nh, d), dtype) if bias is None else bias
    block_e = _pow2_divisor(e, 256)
    body = functools.partial(
        _qkv_rope_kernel, heads=heads, kv_heads=kv_heads, block_e=block_e, eps=eps,
        rope_scale=float(rope_scale), qk_norm=qk_norm, dtype=jnp.dtype(dtype),
        exact=_exact(dtype, interpret),
    )  # fmt: skip
    full = lambda shape: pl.BlockSpec(shape, lambda i, j: (0,) * len(shape))
    out = pl.pallas_call(
        body,
        grid=(rows // block, nh),
        in_specs=[
            pl.BlockSpec((block, 1), lambda i, j: (i, 0)),
            pl.BlockSpec((block, e), lambda i, j: (i, 0)),
            full((1, e)),
            pl.BlockSpec((e, None, 2, half), lambda i, j: (0, j, 0, 0)),
            pl.BlockSpec((None, 2, 1, half), lambda i, j: (j, 0, 0, 0)),
            full((2, 1, half)),
            full((2, 1, half)),
            full((1, half)),
        ],
        out_specs=pl.BlockSpec((block, None, 2, half), lambda i, j: (i, j, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, nh, 2, half), dtype),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
        interpret=interpret,
        name="mojax_qkv_rope",
    )(
        positions.astype(jnp.int32)[:, None],
        x,
        ln_scale.reshape(1, e),
        kernel.reshape(e, nh, 2, half),
        bias.reshape(nh, 2, 1, half),
        q_scale.reshape(2, 1, half),
        k_scale.reshape(2, 1, half),
        jnp.asarray(inv_freq, jnp.float32).reshape(1, half),
    )
    out = out[:b].reshape(b, nh, d)
    return out[:, :heads], out[:, heads : heads + kv_heads], out[:, heads + kv_heads :]


def _attend_kernel(q_ref, k_ref, v_ref, m_ref, *out_refs, block_c, per_split, dtype, exact):
    """One program: one row and kv head over its slots, or over the ``per_split`` blocks of
    slots of its split (module docstring, kernel B)."""
    slots, d = v_ref.shape
    q = q_ref[...].astype(dtype)  # [Gp, D]
    n_blocks = -(-slots // block_c)

    def body(i, carry):
        m, l, acc, seen = carry
        start = jnp.minimum(i * block_c, slots - block_c)  # the last block overlaps, masked
        sl = pl.ds(start, block_c)
        slot = start + lax.broadcasted_iota(jnp.int32, (1, block_c), 1)
        vis = (m_ref[:, sl] > 0) & (slot >= i * block_c)  # [1, bc]
        s = _dot(q, k_ref[:, sl].astype(dtype), exact) * (d**-0.5)  # [Gp, bc]
        s = jnp.where(vis, s, _NEG)
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new)
        l = l * alpha + jnp.sum(p, axis=1, keepdims=True)
        acc = acc * alpha + _dot(p.astype(dtype), v_ref[sl, :].astype(dtype), exact)
        seen = jnp.maximum(seen, jnp.max(vis.astype(jnp.float32), axis=1, keepdims=True))
        return m_new, l, acc, seen

    gp = q.shape[0]
    init = (
        jnp.full((gp, 1), _NEG, jnp.float32),
        jnp.zeros((gp, 1), jnp.float32),
        jnp.zeros((gp, d), jnp.float32),
        jnp.zeros((1, 1), jnp.float32),
    )
    if per_split is None:  # one split: normalise here
        _, l, acc, seen = lax.fori_loop(0, n_blocks, body, init)
        out = jnp.where(seen > 0, acc / l, 0.0)  # no visible key: zeros, as ``layers.attend``
        out_refs[0][...] = out.astype(out_refs[0].dtype)
        return
    first = pl.program_id(2) * per_split
    m, l, acc, _ = lax.fori_loop(first, jnp.minimum(first + per_split, n_blocks), body, init)
    acc_ref, m_out, l_out = out_refs
    acc_ref[...], m_out[...], l_out[...] = acc, m, l


def _splits(rows: int, kv_heads: int, n_blocks: int) -> tuple[int, int]:
    """``(splits, blocks per split)``: a row's slots split so that about ``_PROGRAMS`` programs
    run (flash-decoding), one split when the rows and kv heads already give that many."""
    splits = max(1, min(n_blocks, _PROGRAMS // (rows * kv_heads)))
    per = -(-n_blocks // splits)
    return -(-n_blocks // per), per


def _combine(acc, m, l, visible, dtype):
    """The splits' partial softmaxes ``acc [B, K, S, Gp, D]``, ``m`` / ``l [B, K, S, Gp, 1]``
    rescaled to their common maximum and normalised once; zeros where a row sees no slot."""
    w = jnp.exp(m - jnp.max(m, axis=2, keepdims=True))
    out = jnp.sum(w * acc, axis=2) / jnp.sum(w * l, axis=2)
    return jnp.where(jnp.any(visible, axis=1)[:, None, None, None], out, 0.0).astype(dtype)


def attend_dense(q, keys_t, values, visible, *, dtype, interpret=False, splits=None):
    """Kernel B: one query token per row over one layer of a ``LayerKVCache``.

    Args:
      q: ``[B, H, D]`` (after RoPE); keys_t: ``[B, K, D, C]``; values: ``[B, K, C, D]``;
      visible: bool ``[B, C]`` the slots the query sees (causal and real), C >= 16.
      splits: partitions of a row's slots (None: ``_splits``); several: each program returns its
        partial softmax and ``_combine`` merges them (a few XLA ops).
    Returns ``[B, H, D]`` in ``dtype``: ``layers.attend_layer_major`` up to the numerics of the
    module docstring (zeros for a row that sees no slot).
    """
    b, h, d = q.shape
    k, c = keys_t.shape[1], keys_t.shape[3]
    g = h // k
    gp = max(_HEADS, _pow2_at_most(2 * g - 1, 1 << 20))
    qg = jnp.pad(q.reshape(b, k, g, d).astype(dtype), ((0, 0), (0, 0), (0, gp - g), (0, 0)))
    block_c = _pow2_at_most(c, 128)
    n_blocks = -(-c // block_c)
    n, per = _splits(b, k, n_blocks) if splits is None else (splits, -(-n_blocks // splits))
    body = functools.partial(
        _attend_kernel, block_c=block_c, per_split=per if n > 1 else None,
        dtype=jnp.dtype(dtype), exact=_exact(dtype, interpret),
    )  # fmt: skip
    part = lambda w, t: (
        pl.BlockSpec((None, None, None, gp, w), lambda i, j, s: (i, j, s, 0, 0)),
        jax.ShapeDtypeStruct((b, k, n, gp, w), t),
    )
    outs = [part(d, jnp.float32), part(1, jnp.float32), part(1, jnp.float32)]
    if n == 1:
        outs = [part(d, dtype)]
    res = pl.pallas_call(
        body,
        grid=(b, k, n),
        in_specs=[
            pl.BlockSpec((None, None, gp, d), lambda i, j, s: (i, j, 0, 0)),
            pl.BlockSpec((None, None, d, c), lambda i, j, s: (i, j, 0, 0)),
            pl.BlockSpec((None, None, c, d), lambda i, j, s: (i, j, 0, 0)),
            pl.BlockSpec((1, c), lambda i, j, s: (i, 0)),
        ],
        out_specs=[o[0] for o in outs],
        out_shape=[o[1] for o in outs],
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
        interpret=interpret,
        name="mojax_decode_attention",
    )(qg, keys_t, values, visible.astype(jnp.int32))
    out = res[0][:, :, 0] if n == 1 else _combine(*res, visible, dtype)
    return out[:, :, :g].reshape(b, h, d)


def applies(impl: str, tokens: int, config) -> bool:
    """Whether a layer call of ``tokens`` tokens takes kernel A (a decode step of a model
    without LoRA adapters, whose shapes the Triton lowering takes; the interpreter takes any)."""
    if impl == "none" or tokens != 1 or config.lora is not None:
        return False
    return impl == "pallas_gpu_interpret" or fits(config.hidden_size, config.head_dim, None)


def attends(impl: str, tokens: int, slots: int, head_dim: int) -> bool:
    """Whether a decode step over a ``LayerKVCache`` of ``slots`` slots takes kernel B (the
    Triton lowering: at least 16 slots, a power-of-two head dim >= 16)."""
    if impl == "none" or tokens != 1:
        return False
    pow2 = head_dim >= 16 and head_dim & (head_dim - 1) == 0
    return impl == "pallas_gpu_interpret" or (slots >= 16 and pow2)


def attend_layer_major(qg, keys_t, values, visible, dtype, *, impl):
    """``mojax.models.layers.attend_layer_major``'s call for one query token, by kernel B:
    ``qg [B, 1, K, G, D]``, ``visible [B, 1, C]``; output ``[B, 1, K, G, D]``."""
    b, _, k, g, d = qg.shape
    out = attend_dense(
        qg.reshape(b, k * g, d), keys_t, values, visible[:, 0], dtype=dtype,
        interpret=impl == "pallas_gpu_interpret",
    )  # fmt: skip
    return out.reshape(b, 1, k, g, d)
