"""Building blocks of the Qwen decoder: RMSNorm, RoPE (default and YaRN), GQA attention, SwiGLU.

Every parameter carries logical axis names (``nn.with_logical_partitioning``) and the main
activations are constrained with ``nn.with_logical_constraint``; outside a mesh / rules context both
are no-ops. Shapes use the package legend (``mojax/__init__.py``): B rows, T tokens, C key (cache)
slots, E embed, H heads, K kv heads, Q = H / K, D head dim, F mlp width.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from mojax.models import attention as attention_lib
from mojax.models import cache as cache_lib
from mojax.models import decode_kernel, layer_cache, layouts, paged_attention
from mojax.models import lora as lora_lib
from mojax.models.config import QwenConfig
from mojax.models.paged_cache import PagedKVCache
from mojax.models.rope import apply_rope, rope_frequencies

_NEG = -1e30  # finite, so a row with no visible key gives a uniform (not NaN) softmax


def _init(config: QwenConfig):
    return nn.initializers.normal(stddev=config.initializer_range)


def constrain(x, *names):
    return nn.with_logical_constraint(x, names)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * scale`` computed in fp32, like HF ``Qwen2RMSNorm``."""

    config: QwenConfig
    axis_name: str = "norm"

    @nn.compact
    def __call__(self, x, scale_only=False):
        """The normed ``x``, or with ``scale_only`` the scale itself (``x``: its shape only)."""
        cfg = self.config
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
            (x.shape[-1],),
            cfg.jnp_param_dtype,
        )
        if scale_only:
            return scale
        x32 = x.astype(jnp.float32)
        var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        y = (x32 * jax.lax.rsqrt(var + cfg.rms_norm_eps)).astype(cfg.jnp_dtype)
        return y * scale.astype(cfg.jnp_dtype)


# --------------------------------------------------------------------------------------------------
# attention and MLP


class Projection(nn.Module):
    """Projection with a kernel of any shape (e.g. ``[E, H, D]``) and optional bias.

    The leading ``n_in`` kernel dims contract with the trailing ``n_in`` dims of ``x``. The product
    is one 2-D matmul ``[B*T, in] @ [in, out]`` (free reshapes), whose weight gradient XLA's CPU
    backend runs as one matmul (a 3-D einsum contracting over both B and T is not).
    """

    config: QwenConfig
    n_in: int
    kernel_shape: tuple[int, ...]
    kernel_axes: tuple[str, ...]
    bias_ndim: int = 0  # trailing kernel dims that carry a bias (0 = no bias)

    @nn.compact
    def __call__(self, x, weights_only=False):
        """The product, or with ``weights_only`` ``(kernel [in, out], bias or None)``."""
        cfg = self.config
        in_shape, out_shape = self.kernel_shape[: self.n_in], self.kernel_shape[self.n_in :]
        lead = x.shape[: x.ndim - self.n_in]
        n_in, n_out = math.prod(in_shape), math.prod(out_shape)
        kernel = self._kernel_2d(n_in, n_out)
        bias = None
        if self.bias_ndim:
            bias = self.param(
                "bias",
                nn.with_logical_partitioning(
                    nn.initializers.zeros, self.kernel_axes[-self.bias_ndim :]
                ),
                self.kernel_shape[-self.bias_ndim :],
                cfg.jnp_param_dtype,
            )
        if weights_only:
            return kernel, bias
        y = x.reshape(-1, n_in) @ kernel
        lora = cfg.lora
        if lora is not None and self.name in lora.targets:
            y = y + _lora_delta(self, x.reshape(-1, n_in), in_shape, out_shape)
        if bias is not None:
            y = y + bias.astype(cfg.jnp_dtype).reshape(n_out)
        return y.reshape(*lead, *out_shape)

    def _kernel_2d(self, n_in, n_out):
        """The kernel as ``[n_in, n_out]`` in the compute dtype (dequantised from its QLoRA
        storage, ``mojax.models.lora``, when the base is quantised)."""
        cfg = self.config
        quant = "none" if cfg.lora is None else cfg.lora.quant
        if quant == "none":
            kernel = self.param(
                "kernel",
                nn.with_logical_partitioning(_init(cfg), self.kernel_axes),
                self.kernel_shape,
                cfg.jnp_param_dtype,
            )
            return kernel.astype(cfg.jnp_dtype).reshape(n_in, n_out)
        axes = (self.kernel_axes[0], self.kernel_axes[self.n_in])
        packed = n_out // 2 if quant == "nf4" else n_out
        codes = self.param(
            "kernel_q",
            nn.with_logical_partitioning(nn.initializers.zeros, axes),
            (n_in, packed),
            jnp.uint8 if quant == "nf4" else jnp.int8,
        )
        rows = lora_lib.block_rows(n_in, cfg.lora.block)
        scale = self.param(
            "kernel_scale",
            nn.with_logical_partitioning(nn.initializers.ones, (None, axes[1])),
            (n_in // rows, n_out),
            jnp.float32,
        )
        return lora_lib.dequantize(codes, scale, quant, cfg.jnp_dtype)


def _lora_delta(mod: Projection, x2, in_shape, out_shape):
    """``(alpha / r) · dropout(x) A B`` of a targeted projection, ``x2 [N, n_in]`` -> ``[N,
    n_out]``; dropout only when the call has a ``"dropout"`` RNG (training)."""
    cfg = mod.config
    lora = cfg.lora
    r, n_in = lora.rank, x2.shape[-1]
    in_axes, out_axes = mod.kernel_axes[: mod.n_in], mod.kernel_axes[mod.n_in :]
    a = mod.param(
        "lora_a",
        nn.with_logical_partitioning(nn.initializers.zeros, (*in_axes, "lora")),
        (*in_shape, r),
        cfg.jnp_param_dtype,
    )
    b = mod.param(
        "lora_b",
        nn.with_logical_partitioning(nn.initializers.zeros, ("lora", *out_axes)),
        (r, *out_shape),
        cfg.jnp_param_dtype,
    )
    if lora.dropout > 0.0 and mod.has_rng("dropout"):
        keep = jax.random.bernoulli(mod.make_rng("dropout"), 1.0 - lora.dropout, x2.shape)
        x2 = jnp.where(keep, x2 / (1.0 - lora.dropout), jnp.zeros((), x2.dtype))
    h = x2 @ a.astype(cfg.jnp_dtype).reshape(n_in, r)
    return (h @ b.astype(cfg.jnp_dtype).reshape(r, -1)) * jnp.asarray(lora.scale, cfg.jnp_dtype)


def _zero_unseen(out, visible):
    """``out [B, T, K, G, D]`` with zeros where a query sees no key (``visible [B, T, S]``): a
    left-padding position, whose softmax would otherwise average every value it is given, so
    its output would depend on how many keys (or key blocks) the call passed."""
    seen = jnp.any(visible, axis=-1)[:, :, None, None, None]
    return jnp.where(seen, out, jnp.zeros((), out.dtype))


def _attend_one_query(qg, keys, values, visible, dtype):
    """``attend`` for one query token (T = 1, a decode step) as fused multiply-reduces.

    The two einsums of ``attend`` contract a ``[B, S, K, D]`` cache slice whose batch axes (B, K)
    are not leading, so XLA CPU copies (transposes) every layer's keys and values before its
    batched dots; broadcast-multiply + sum reads them in place (``Layouts.one_query_reduce``).
    """
    d = qg.shape[-1]
    q = qg[:, 0].astype(jnp.float32)  # [B, K, G, D]
    scores = jnp.sum(q[:, None] * keys.astype(jnp.float32)[:, :, :, None, :], -1)  # [B, S, K, G]
    scores = jnp.where(visible[:, 0, :, None, None], scores * (d**-0.5), _NEG)
    # probs rounded to ``dtype`` as the einsum path feeds them (a no-op in fp32)
    probs = jax.nn.softmax(scores, axis=1).astype(dtype).astype(jnp.float32)
    out = jnp.sum(probs[..., None] * values.astype(jnp.float32)[:, :, :, None, :], axis=1)
    return _zero_unseen(out[:, None].astype(dtype), visible)  # [B, 1, K, G, D]


def attend(qg, keys, values, visible, dtype, one_query=False):
    """Softmax attention of grouped queries ``qg [B, T, K, G, D]`` over ``keys`` / ``values``
    ``[B, S, K, D]`` where ``visible [B, T, S]``; fp32 scores, output ``[B, T, K, G, D]``.

    A query that sees no key (a left-padding position) gets zeros. With ``one_query``
    (``Layouts.one_query_reduce``) a single query token takes ``_attend_one_query`` (same values up
    to fp32 summation order); otherwise two einsums.
    """
    if qg.shape[1] == 1 and one_query:
        return _attend_one_query(qg, keys, values, visible, dtype)
    d = qg.shape[-1]
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, keys, preferred_element_type=jnp.float32)
    scores = scores * (d**-0.5)
    scores = jnp.where(visible[:, None, None], scores, _NEG)  # [B, K, G, T, S]
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    return _zero_unseen(jnp.einsum("bkgts,bskd->btkgd", probs, values), visible)


def _attend_one_query_layer_major(qg, keys_t, values, visible, dtype):
    """``attend_layer_major`` for one query token (a decode step) as fused multiply-reduces.

    The scores reduce over D and the output over S, both non-minor axes of their operands, so
    each reduction is vectorised along the minor axis (``mojax/models/layer_cache.py``).
    """
    d = qg.shape[-1]
    q = qg[:, 0].astype(jnp.float32)  # [B, K, G, D]
    keys = keys_t.astype(jnp.float32)[:, :, None]  # [B, K, 1, D, S]
    scores = jnp.sum(q[..., None] * keys, axis=3)  # [B, K, G, S]
    scores = jnp.where(visible[:, :, None], scores * (d**-0.5), _NEG)  # visible [B, 1, 1, S]
    # probs rounded to ``dtype`` as the einsum path feeds them (a no-op in fp32)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype).astype(jnp.float32)
    vals = values.astype(jnp.float32)[:, :, None]  # [B, K, 1, S, D]
    out = jnp.sum(probs[..., None] * vals, axis=3)  # [B, K, G, D]
    return _zero_unseen(out[:, None].astype(dtype), visible)


def attend_layer_major(qg, keys_t, values, visible, dtype, one_query=False):
    """``attend`` over one layer of a ``LayerKVCache``: ``keys_t [B, K, D, S]`` (slot axis minor),
    ``values [B, K, S, D]``; ``qg [B, T, K, G, D]``, ``visible [B, T, S]``; output ``[B, T, K, G,
    D]``, fp32 scores, zeros for a query that sees no key.

    One query token with ``one_query`` takes ``_attend_one_query_layer_major``; otherwise two
    einsums whose batch axes (B, K) lead in every operand (no transposing copies). Same values as
    ``attend`` up to fp32 summation order.
    """
    if qg.shape[1] == 1 and one_query:
        return _attend_one_query_layer_major(qg, keys_t, values, visible, dtype)
    d = qg.shape[-1]
    scores = jnp.einsum("btkgd,bkds->bkgts", qg, keys_t.astype(qg.dtype),
                        preferred_element_type=jnp.float32)  # fmt: skip
    scores = jnp.where(visible[:, None, None], scores * (d**-0.5), _NEG)  # [B, K, G, T, S]
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    out = jnp.einsum("bkgts,bksd->btkgd", probs, values.astype(dtype))
    return _zero_unseen(out, visible)


def attend_causal(qg, keys, values, visible, dtype, block=None, one_query=False):
    """``attend`` for a chunk over its own keys (uncached call: key ``j`` is visible to query ``t``
    only if ``j <= t``), one query block of ``block`` rows at a time (None: one block).

    Query block ``[a, a + block)`` can see keys ``[0, a + block)`` only, so it attends over that
    prefix and never computes the scores above it: in 8 blocks, 36 / 64 of the ``[T, T]`` scores;
    each block's scores also stay small enough to be reused from the CPU's caches by the softmax
    passes (``Layouts.causal_block``). Same values as ``attend`` up to fp32 summation order (zeros,
    in both, for a query that sees no key).
    """
    t = qg.shape[1]
    if block is None or t <= block:
        return attend(qg, keys, values, visible, dtype, one_query)
    outs = [
        attend(
            qg[:, a : a + block],
            keys[:, : a + block],
            values[:, : a + block],
            visible[:, a : a + block, : a + block],
            dtype,
            one_query,
        )
        for a in range(0, t, block)
    ]
    return jnp.concatenate(outs, axis=1)


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE, optional q/k RMSNorm, padding + causal masks, KV
    cache.

    Causality is by key index (slot index in the cache, token index otherwise): the query with index
    ``q_idx`` attends to the keys ``j <= q_idx`` with ``k_valid[j]``.
    """

    config: QwenConfig

    @nn.compact
    def __call__(self, x, positions, q_idx, k_valid, write_idx, kv, layer, ln_scale=None):
        """``ln_scale`` given (``decode_kernel.applies``): ``x`` is the residual stream before the
        input norm, which kernel A applies with the q/k/v product, q/k norms and RoPE."""
        cfg = self.config
        h, k, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        if ln_scale is not None:
            q, kk, vv = self._qkv_kernel(x, ln_scale, positions)
        else:
            q, kk, vv = self._qkv(x)
            if cfg.qk_norm:
                q = RMSNorm(cfg, "head_dim", name="q_norm")(q)
                kk = RMSNorm(cfg, "head_dim", name="k_norm")(kk)
            q, kk = apply_rope(q, positions, cfg), apply_rope(kk, positions, cfg)
        q = constrain(q, "batch", "length", "heads", "head_dim")
        kk = constrain(kk, "batch", "length", "kv_heads", "head_dim")
        vv = constrain(vv, "batch", "length", "kv_heads", "head_dim")

        lay = layouts.of(cfg)
        one = lay.one_query_reduce
        b, t = x.shape[:2]
        if isinstance(kv, PagedKVCache):  # q_idx: positions; k_valid: lengths after the write
            major = lay.decode_per_layer
            out, kv = paged_attention.paged_layer(
                q, kk, vv, kv, layer, write_idx, q_idx, k_valid, impl=lay.paged_attention,
                attend_fn=functools.partial(attend_layer_major if major else attend, one_query=one),
                layer_major=major, dtype=cfg.jnp_dtype,
            )  # fmt: skip
            return self._out(out), kv
        fresh = kv is None or (not isinstance(kv[0], tuple) and kv[0].shape[2] == t)
        if lay.attention != "reference" and fresh:  # the chunk over itself, no T x T scores
            return self._fused(q, kk, vv, k_valid, write_idx, kv, layer, lay.attention)
        if kv is None:  # full sequence: keys are this chunk
            keys, values, s = kk, vv, kk.shape[1]
            block = lay.causal_block_rows(kk.shape[1])
            attend_fn = functools.partial(attend_causal, block=block, one_query=one)
        elif isinstance(kv[0], tuple):  # a LayerKVCache (the decode layout)
            keys, values, kv = layer_cache.write_layer(kv, layer, kk, vv, write_idx)
            s = keys.shape[-1]  # keys [B, K, D, C]
            attend_fn = functools.partial(attend_layer_major, one_query=one)
            if decode_kernel.attends(lay.decode_kernel, t, s, d):  # kernel B
                attend_fn = functools.partial(
                    decode_kernel.attend_layer_major, impl=lay.decode_kernel
                )
        else:  # cached: write this chunk at each row's slots, attend over the whole cache row
            k_all, v_all = kv
            k_all = cache_lib.write_layer(k_all, layer, kk, write_idx)
            v_all = cache_lib.write_layer(v_all, layer, vv, write_idx)
            kv = (k_all, v_all)
            keys = k_all[layer].astype(cfg.jnp_dtype)  # [B, C, K, D]
            values = v_all[layer].astype(cfg.jnp_dtype)
            s, attend_fn = keys.shape[1], functools.partial(attend, one_query=one)

        qg = q.reshape(b, t, k, h // k, d)
        visible = (jnp.arange(s)[None, None, :] <= q_idx[:, :, None]) & _key_visible(k_valid)
        out = attend_fn(qg, keys, values, visible, cfg.jnp_dtype).reshape(b, t, h, d)
        return self._out(out), kv

    def _qkv(self, x):
        """q ``[B, T, H, D]``, k and v ``[B, T, K, D]``: three products, or one over the fused
        kernel (``config.fused_projections``, ``mojax.models.fused``)."""
        cfg = self.config
        e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        bias = 2 if cfg.qkv_bias else 0
        if cfg.fused_projections:
            qkv = Projection(cfg, 1, (e, h + 2 * k, d), ("embed", None, "head_dim"), bias,
                             name="qkv_proj")(x)  # fmt: skip
            return qkv[..., :h, :], qkv[..., h : h + k, :], qkv[..., h + k :, :]
        q = Projection(cfg, 1, (e, h, d), ("embed", "heads", "head_dim"), bias,
                       name="q_proj")(x)  # fmt: skip
        kk = Projection(cfg, 1, (e, k, d), ("embed", "kv_heads", "head_dim"), bias,
                        name="k_proj")(x)  # fmt: skip
        vv = Projection(cfg, 1, (e, k, d), ("embed", "kv_heads", "head_dim"), bias,
                        name="v_proj")(x)  # fmt: skip
        return q, kk, vv

    def _qkv_kernel(self, x, ln_scale, positions):
        """q, k, v as ``_qkv`` + q/k norms + RoPE, by ``decode_kernel.qkv_rope`` (kernel A)."""
        cfg = self.config
        e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        bias = 2 if cfg.qkv_bias else 0
        if cfg.fused_projections:
            parts = [(h + 2 * k, None, "qkv_proj")]
        else:
            parts = [(h, "heads", "q_proj"), (k, "kv_heads", "k_proj"), (k, "kv_heads", "v_proj")]
        ws = [Projection(cfg, 1, (e, n, d), ("embed", ax, "head_dim"), bias,
                         name=name)(x, weights_only=True) for n, ax, name in parts]  # fmt: skip
        w = jnp.concatenate([a.reshape(e, -1, d) for a, _ in ws], axis=1)
        b = jnp.concatenate([c for _, c in ws]) if bias else None
        shape = jax.ShapeDtypeStruct((d,), cfg.jnp_dtype)
        norms = (None, None)
        if cfg.qk_norm:
            norms = [RMSNorm(cfg, "head_dim", name=n)(shape, True) for n in ("q_norm", "k_norm")]
        inv_freq, rope_scale = rope_frequencies(cfg)
        qkv = decode_kernel.qkv_rope(
            x[:, 0], positions[:, 0], ln_scale, w, b, *norms,
            inv_freq, rope_scale, heads=h, kv_heads=k, eps=cfg.rms_norm_eps, dtype=cfg.jnp_dtype,
            interpret=layouts.of(cfg).decode_kernel == "pallas_gpu_interpret",
        )  # fmt: skip
        return tuple(a[:, None] for a in qkv)

    def _out(self, out):
        cfg = self.config
        h, d, e = cfg.num_heads, cfg.head_dim, cfg.hidden_size
        out = constrain(out, "batch", "length", "heads", "head_dim")
        y = Projection(cfg, 2, (h, d, e), ("heads", "head_dim", "embed"),
                       name="o_proj")(out)  # fmt: skip
        return constrain(y, "batch", "length", "embed")

    def _fused(self, q, kk, vv, k_valid, write_idx, kv, layer, impl):
        """An uncached chunk, or a prefill into a cache of exactly its length (the cache is
        written, then the chunk attends over itself): ``mojax.models.attention``."""
        cfg = self.config
        if kv is not None:
            kv = (
                cache_lib.write_layer(kv[0], layer, kk, write_idx),
                cache_lib.write_layer(kv[1], layer, vv, write_idx),
            )
            kk = kv[0][layer].astype(cfg.jnp_dtype)  # what the cache holds (its dtype)
            vv = kv[1][layer].astype(cfg.jnp_dtype)
        out = attention_lib.self_attention(q, kk, vv, k_valid, impl, cfg.jnp_dtype)
        return self._out(out), kv


def _key_visible(k_valid):
    """``[B, T, S]`` (broadcastable) keys a query may see besides causality: the real keys of a
    bool ``k_valid [B, S]``, or, for int32 segment ids (a packed uncached chunk, S = T), the real
    keys of the query's own segment."""
    if k_valid.dtype == jnp.bool_:
        return k_valid[:, None, :]
    return (k_valid[:, :, None] == k_valid[:, None, :]) & (k_valid[:, None, :] > 0)


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    config: QwenConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        e, f = cfg.hidden_size, cfg.intermediate_size
        if cfg.fused_projections:  # one product over the stacked kernels (``mojax.models.fused``)
            gate_up = Projection(cfg, 1, (e, 2, f), ("embed", None, "mlp"),
                                 name="gate_up_proj")(x)  # fmt: skip
            gate, up = gate_up[..., 0, :], gate_up[..., 1, :]
        else:
            gate = Projection(cfg, 1, (e, f), ("embed", "mlp"), name="gate_proj")(x)
            up = Projection(cfg, 1, (e, f), ("embed", "mlp"), name="up_proj")(x)
        hidden = constrain(jax.nn.silu(gate) * up, "batch", "length", "mlp")
        y = Projection(cfg, 1, (f, e), ("mlp", "embed"), name="down_proj")(hidden)
        return constrain(y, "batch", "length", "embed")


class DecoderLayer(nn.Module):
    """Pre-norm block ``x + attn(norm(x))``, then ``x + mlp(norm(x))``; scan-compatible call."""

    config: QwenConfig

    @nn.compact
    def __call__(self, carry, positions, q_idx, k_valid, write_idx, layer):
        x, kv = carry
        cfg = self.config
        norm = RMSNorm(cfg, name="input_layernorm")
        attn = Attention(cfg, name="self_attn")
        if decode_kernel.applies(layouts.of(cfg).decode_kernel, x.shape[1], cfg):  # kernel A
            a, kv = attn(x, positions, q_idx, k_valid, write_idx, kv, layer, norm(x, True))
        else:
            a, kv = attn(norm(x), positions, q_idx, k_valid, write_idx, kv, layer)
        x = x + a
        h = RMSNorm(self.config, name="post_attention_layernorm")(x)
        x = constrain(x + MLP(self.config, name="mlp")(h), "batch", "length", "embed")
        return (x, kv), None
