"""``config.dry_run``: build the run abstractly, check the mesh and shardings, print memory per device.

Nothing is allocated: the train state is ``jax.eval_shape``-d with its shardings, the PPO step is
lowered (which checks that every sharding fits the mesh) against an abstract rollout batch, and
bytes per device are summed from each array's shard shape. Activation memory is an estimate
(stated in the printout): layer inputs kept for the backward pass (all of them with ``remat``,
plus one layer's internals), the fp32 logits of one log-prob chunk, and the sampler's KV cache.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from mojax import learner, models
from mojax import sharding as sharding_lib
from mojax.rl.model_config import qwen_config

GIB = 1024**3


def _bytes_per_device(tree) -> int:
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def dry_run(spec) -> dict[str, float]:
    """Prints and returns the per-device memory of ``spec``'s run on its mesh."""
    mesh = sharding_lib.mesh_from_config(spec.mesh.as_dict())
    rules = spec.rules
    mc = qwen_config(spec, tokenizer=None)  # the vocabulary of tokenizer.vocab_size
    opt = spec.optimizer
    tx = learner.make_optimizer(opt)
    state = learner.abstract_train_state(mc, tx, mesh, rules)
    rc, ppo = spec.rollout, spec.ppo
    b = int(rc.prompts_per_step) * int(rc.num_samples)
    t = int(rc.max_prompt_len or 1024) + int(rc.max_response_len)
    batch_shapes = {
        "tokens": ((b, t), np.int32),
        "attention_mask": ((b, t), np.int32),
        "loss_mask": ((b, t), np.float32),
        "old_logprobs": ((b, t), np.float32),
        "advantages": ((b,), np.float32),
    }
    if ppo.kl_coef:
        batch_shapes["ref_logprobs"] = ((b, t), np.float32)
    batch = {
        k: jax.ShapeDtypeStruct(s, d, sharding=sharding_lib.batch_sharding(mesh, rules, len(s)))
        for k, (s, d) in batch_shapes.items()
    }
    step = learner.make_train_step(mc, tx, ppo, mesh, rules, lr_schedule=learner.make_schedule(opt))
    step.jitted(batch).lower(state, batch)  # raises if a sharding does not fit the mesh

    n_dev = mesh.devices.size
    batch_shards = sharding_lib.batch_divisor(mesh, rules)
    tensor = int(mesh.shape["tensor"])
    rows = max(1, b // (ppo.num_minibatches * ppo.num_microbatches * batch_shards))
    act_bytes = np.dtype(mc.jnp_dtype).itemsize
    tokens = rows * t
    layer_inputs = mc.num_layers * tokens * mc.hidden_size * act_bytes
    per_layer = (
        tokens
        * act_bytes
        * (
            4 * mc.hidden_size
            + (mc.num_heads + 2 * mc.num_kv_heads) * mc.head_dim // tensor
            + 3 * mc.intermediate_size // tensor
        )
    )
    chunk = int(ppo.logprob_chunk or t)
    logits = rows * min(chunk, t) * mc.vocab_size * 4 // tensor
    activations = (
        layer_inputs + per_layer + logits
        if mc.remat != "none"
        else (mc.num_layers * per_layer + logits)
    )
    cache_rows = max(1, b // batch_shards)
    kv_heads = max(1, mc.num_kv_heads // tensor)
    cache_dtype = np.dtype(spec.model.cache_dtype or mc.dtype).itemsize
    kv_cache = 2 * mc.num_layers * cache_rows * t * kv_heads * mc.head_dim * cache_dtype
    out = {
        "devices": float(n_dev),
        "params_total": float(models.param_count(mc)),
        "params_gib_per_device": _bytes_per_device(state.params) / GIB,
        "optimizer_gib_per_device": _bytes_per_device(state.opt_state) / GIB,
        "activations_gib_per_device_estimate": activations / GIB,
        "kv_cache_gib_per_device_estimate": kv_cache / GIB,
    }
    if jax.process_index() == 0:  # every process lowers; process 0 reports
        _report(spec, mesh, mc, out, b, t, rows)
    return out


def _report(spec, mesh, mc, out, b, t, rows) -> None:
    n_dev, n_proc = int(out["devices"]), jax.process_count()
    procs = f", {n_proc} processes" if n_proc > 1 else ""
    print(
        f"mojax dry run: mesh {dict(mesh.shape)} ({n_dev} devices{procs}), model "
        f"{spec.model.checkpoint or spec.model.variant} ({out['params_total'] / 1e9:.3f}B "
        f"params, {mc.dtype} compute / {mc.param_dtype} params, remat={mc.remat})"
    )
    print(f"  rollout batch B={b} x T={t}; per optimizer micro-batch and device: {rows} rows")
    for k, v in out.items():
        if k.endswith(("per_device", "estimate")):
            print(f"  {k:<40} {v:9.3f}")
    print("  train step lowered with explicit shardings: OK")
