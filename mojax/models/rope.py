"""Rotary position embeddings (RoFormer; YaRN's NTK-by-parts scaling), in fp32 as transformers.

``apply_rope`` rotates queries / keys ``[B, T, N, D]`` (the "rotate_half" convention);
``rope_frequencies`` gives the inverse frequencies and cos / sin scale that the decode kernel
(``mojax.models.decode_kernel``) uses too. Re-exported by ``mojax.models.layers``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from mojax.models.config import QwenConfig


def rope_frequencies(config: QwenConfig) -> tuple[np.ndarray, float]:
    """Inverse frequencies ``[D/2]`` (fp32) and the cos/sin scale of the configured RoPE.

    "default": ``theta^(-2i/D)`` (RoFormer eq. 15). "yarn": the NTK-by-parts interpolation of YaRN
    (Peng et al. 2023, eqs. 17-19) with the attention factor ``0.1 ln(s) + 1`` (eq. 22), computed
    step by step as transformers' ``_compute_yarn_parameters`` does (fp32), so logits match it.
    """
    dim = config.head_dim
    base = config.rope_theta
    exponent = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    pos_freqs = np.power(np.float32(base), exponent, dtype=np.float32)
    rs = config.rope_scaling_dict
    rope_type = rs.get("rope_type", "default")
    if rope_type == "default":
        return (np.float32(1.0) / pos_freqs).astype(np.float32), 1.0
    # yarn
    orig_max = rs.get("original_max_position_embeddings") or config.max_position_embeddings
    factor = rs.get("factor")
    if factor is None:
        factor = config.max_position_embeddings / orig_max
    factor = float(factor)

    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = rs.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def correction_dim(num_rotations):
        return (dim * math.log(orig_max / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip(
        (np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1
    ).astype(np.float32)
    extrapolation_factor = np.float32(1) - ramp
    inv_extra = np.float32(1.0) / pos_freqs
    inv_inter = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    inv_freq = inv_inter * (1 - extrapolation_factor) + inv_extra * extrapolation_factor
    return inv_freq.astype(np.float32), float(attention_factor)


def apply_rope(x: jax.Array, positions: jax.Array, config: QwenConfig) -> jax.Array:
    """Rotates ``x [B, T, N, D]`` by ``positions [B, T]`` (HF "rotate_half" convention), in fp32."""
    inv_freq, scale = rope_frequencies(config)
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, D/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, D]
    cos, sin = jnp.cos(emb) * scale, jnp.sin(emb) * scale
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)
