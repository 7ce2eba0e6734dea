"""Fused projections for the decode loop: one matmul for q/k/v and one for gate/up.

A GPU decode step at small batch is a chain of many small kernels that each run far below the
memory bandwidth (``docs/performance.md`` section 6, the profile in ``benchmarks/logs/HISTORY.md``:
~430 kernels per step of qwen2.5-0.5b on an H200, the GPU busy the whole step). Each layer's q,
k and v products read the same input, and so do its gate and up products; concatenated along
their outputs they are one wider product each, which XLA runs nearer the bandwidth (0.5B batch 1
-19%, 1.5B batch 64 -7%). The values are the same products (each output column's reduction is
over the same E inputs), so up to the matmul library's choice of blocking for the wider product
they equal the separate ones.

:func:`fuse_projections` rewrites the params once, before a decode loop (inside its jit, or once
per weight update for the continuous sampler; the static sampler's jit fuses again on each
call, a copy of those weights per call): per layer (stacked on a leading L axis or not)

* ``self_attn/{q,k,v}_proj/kernel [E, H|K, D]`` -> ``self_attn/qkv_proj/kernel [E, H + 2K, D]``
  (and the biases ``[H + 2K, D]``), the q heads first, then k, then v;
* ``mlp/{gate,up}_proj/kernel [E, F]`` -> ``mlp/gate_up_proj/kernel [E, 2, F]``.

A LoRA model is left as it is (its adapters act on the separate projections). The fused copy is
as large as the projections it replaces; the unfused params stay alive beside it for the call.
"""

from __future__ import annotations

import jax.numpy as jnp

from mojax.models import layouts


def _fuse_layer(layer: dict) -> dict:
    """One layer's params (any leading axes) with the fused q/k/v and gate/up projections."""
    attn = dict(layer["self_attn"])
    parts = [attn.pop(name) for name in ("q_proj", "k_proj", "v_proj")]
    qkv = {"kernel": jnp.concatenate([p["kernel"] for p in parts], axis=-2)}
    if "bias" in parts[0]:
        qkv["bias"] = jnp.concatenate([p["bias"] for p in parts], axis=-2)
    attn["qkv_proj"] = qkv
    mlp = dict(layer["mlp"])
    gate, up = mlp.pop("gate_proj"), mlp.pop("up_proj")
    mlp["gate_up_proj"] = {"kernel": jnp.stack([gate["kernel"], up["kernel"]], axis=-2)}
    return {**layer, "self_attn": attn, "mlp": mlp}


def fuse_projections(model):
    """``model`` with fused q/k/v and gate/up kernels (``config.fused_projections``). Pure; works
    on traced params. A LoRA model, or one already fused, comes back unchanged."""
    cfg = model.config
    if cfg.fused_projections or cfg.lora is not None:
        return model
    params = {
        k: _fuse_layer(v) if k == "layers" or k.startswith("layers_") else v
        for k, v in model.params.items()
    }
    return model.replace(config=cfg.replace(fused_projections=True), params=params)


def for_decode(model):
    """``model`` as the decode loop runs it: fused when its layouts ask for it
    (``Layouts.fuse_decode_projections``), else unchanged."""
    if layouts.of(model.config).fuse_decode_projections:
        return fuse_projections(model)
    return model
