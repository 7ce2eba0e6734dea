"""Self-attention of an uncached chunk (training, log-probs, prefill) without ``[B, H, T, T]`` scores.

``self_attention(q, k, v, mask, impl, dtype)`` attends the chunk's queries ``q [B, T, H, D]`` over its
own keys and values ``k, v [B, T, K, D]`` (grouped-query: ``H % K == 0``), causally, where ``mask``
is either

* bool ``[B, T]``: the real tokens (left, right or inner padding False), or
* int32 ``[B, T]`` segment ids of a packed row (``mojax.learner.packing``): 0 on padding, ``s >= 1``
  on the tokens of the row's ``s``-th sequence; a query sees only the earlier keys of its own
  segment.

The output ``[B, T, H, D]`` is zero at every padding position (a padding query's output is never
used: the layers after it are per-position, the loss masks it, and causal attention hides it from
the real queries). ``impl`` is ``Layouts.attention`` (``mojax.models.layouts``), chosen once per
backend:

* ``"xla"``: ``jax.nn.dot_product_attention(implementation="xla")`` (scores materialised; the
  portable reference of the fused call, used on the CPU in tests);
* ``"cudnn"``: the same call with cuDNN's fused flash-attention kernel (GPU; bf16 / fp16 only, an
  fp32 model takes the ``"xla"`` call): scores live in on-chip tiles; the padding / segment rule is passed as a boolean ``[B, 1, T, T]`` mask (one byte
  per query-key pair, no head axis; cuDNN turns it into an additive bias);
* ``"splash"``: Pallas splash attention (TPU; ``interpret=True`` runs it on the CPU for tests):
  block-sparse causal mask and segment ids, nothing of size T×T at all.

The ``"reference"`` layout keeps the explicit einsum path of ``mojax.models.layers.attend`` and does
not come here. Shape legend: B rows, T tokens, H query heads, K kv heads, G = H / K, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

IMPLS = ("reference", "xla", "cudnn", "splash", "splash_interpret")
_NEG = -1e30


def _real(mask: jax.Array) -> jax.Array:
    """bool [B, T]: the real (non-padding) positions of a bool mask or segment ids."""
    return mask if mask.dtype == jnp.bool_ else mask > 0


def _dpa(q, k, v, mask, impl):
    """``jax.nn.dot_product_attention`` with the causal rule and ``mask``'s padding / segments."""
    if mask.dtype == jnp.bool_:  # keys must be real; no query-key pair term, no [T, T] array
        allowed = mask[:, None, None, :]  # [B, 1, 1, T]
        if impl == "cudnn":  # cuDNN takes a full [B, 1, T, S] mask
            allowed = jnp.broadcast_to(allowed, (q.shape[0], 1, q.shape[1], k.shape[1]))
    else:  # same segment, key not padding: [B, 1, T, T] booleans
        allowed = ((mask[:, :, None] == mask[:, None, :]) & (mask[:, None, :] > 0))[:, None]
    return jax.nn.dot_product_attention(q, k, v, mask=allowed, is_causal=True, implementation=impl)


def _splash_kernel(t: int, heads: int, block: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mask = sm.MultiHeadMask([sm.CausalMask((t, t)) for _ in range(heads)])
    sizes = sk.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    return sk.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret), sk


def _splash(q, k, v, mask, interpret: bool):
    """Splash attention: per row and kv head, an MQA kernel over that head's G query heads."""
    b, t, h, d = q.shape
    kh = k.shape[2]
    seg = mask.astype(jnp.int32)  # bool -> 0 / 1; ids stay ids
    block = 128  # the kernel's lane width: T is padded to whole blocks
    tp = -(-t // block) * block
    if tp != t:  # pad to whole blocks: padded positions are a segment of their own (-1)
        pad = ((0, 0), (0, tp - t))
        q, k, v = (jnp.pad(x, pad + ((0, 0), (0, 0))) for x in (q, k, v))
        seg = jnp.pad(seg, pad, constant_values=-1)
    kernel, sk = _splash_kernel(tp, h // kh, block, interpret)
    qs = (q * (d**-0.5)).astype(q.dtype)
    qs = qs.reshape(b, tp, kh, h // kh, d).transpose(0, 2, 3, 1, 4)  # [B, K, G, T, D]
    ks, vs = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, T, D]

    def one(qg, kk, vv, s):
        return kernel(qg, kk, vv, segment_ids=sk.SegmentIds(q=s, kv=s))

    per_head = jax.vmap(one, in_axes=(0, 0, 0, None))  # over kv heads
    out = jax.vmap(per_head)(qs, ks, vs, seg)  # [B, K, G, T, D]
    out = out.transpose(0, 3, 1, 2, 4).reshape(b, tp, h, d)
    return out[:, :t]


def self_attention(q, k, v, mask, impl: str, dtype) -> jax.Array:
    """Causal attention of a chunk over itself (see the module docstring): ``[B, T, H, D]``."""
    if impl == "cudnn" and jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        impl = "xla"  # cuDNN's fused kernel takes half precision only: fp32 runs XLA's attention
    if impl in ("xla", "cudnn"):
        out = _dpa(q.astype(dtype), k.astype(dtype), v.astype(dtype), mask, impl)
    elif impl in ("splash", "splash_interpret"):
        out = _splash(q, k, v, mask, interpret=impl == "splash_interpret")
    else:
        raise ValueError(f"attention implementation {impl!r} is not one of {IMPLS[1:]}")
    real = _real(mask)[:, :, None, None]
    return jnp.where(real, out.astype(dtype), jnp.zeros((), dtype))
