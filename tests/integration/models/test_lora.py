"""LoRA / QLoRA: the adapted projections against a dense reference ``W + (alpha / r) A B`` (forward
and gradients of A and B by the chain rule), the quantised base, a train step that moves only the
adapters, and the sampler on the adapted weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax import learner, models
from mojax import sharding as sharding_lib
from mojax.models import lora

CFG = models.get_variant("tiny-qwen3", vocab_size=64, dtype="float32")
TOKENS = np.asarray(jax.random.randint(jax.random.key(2), (2, 10), 0, 64))
N_IN = {"o_proj": CFG.num_heads * CFG.head_dim, "down_proj": CFG.intermediate_size}


def _lora_tree(cfg_lora, seed=0):
    dense = models.init_params(CFG, jax.random.key(seed))
    base = lora.base_from_dense(cfg_lora, dense)
    shapes = models.param_shapes(cfg_lora)
    ad = lora.init_adapters(cfg_lora, jax.random.key(1), shapes)
    noise = lambda x: x + 0.05 * jax.random.normal(jax.random.key(3), x.shape)
    ad = jax.tree.map(noise, ad)  # non-zero B: the adapters matter
    return dense, base, ad


def _numpy_merge(cfg_lora, dense, ad):
    """Reference: each targeted kernel ``W + s A B`` in numpy, from the 2-D forms."""
    out = jax.tree.map(np.asarray, dense)
    s, r = cfg_lora.lora.scale, cfg_lora.lora.rank
    for group in ("self_attn", "mlp"):
        for name, proj in ad["layers"][group].items():
            k = out["layers"][group][name]["kernel"]
            n_in = N_IN.get(name, CFG.hidden_size)
            a = np.asarray(proj["lora_a"]).reshape(CFG.num_layers, n_in, r)
            b = np.asarray(proj["lora_b"]).reshape(CFG.num_layers, r, -1)
            w = k.reshape(CFG.num_layers, n_in, -1) + s * np.einsum("lir,lro->lio", a, b)
            out["layers"][group][name]["kernel"] = w.reshape(k.shape)
    return out


@pytest.mark.parametrize("targets", [lora.PROJECTIONS, ("q_proj", "v_proj", "down_proj")])
def test_lora_forward_and_grads_match_dense_reference(targets):
    cl = CFG.replace(lora=lora.LoraConfig(rank=4, alpha=8.0, targets=targets))
    dense, base, ad = _lora_tree(cl)
    w = jax.random.normal(jax.random.key(5), (*TOKENS.shape, 64))

    def loss_lora(a):
        return jnp.sum(models.Qwen(cl).apply({"params": lora.merge(base, a)}, TOKENS) * w)

    def loss_dense(p):
        return jnp.sum(models.Qwen(CFG).apply({"params": p}, TOKENS) * w)

    ref = _numpy_merge(cl, dense, ad)
    np.testing.assert_allclose(loss_lora(ad), loss_dense(ref), rtol=1e-5)
    g_ad = jax.grad(loss_lora)(ad)
    g_w = jax.grad(loss_dense)(ref)
    s, r = cl.lora.scale, cl.lora.rank
    for group in ("self_attn", "mlp"):
        for name, proj in ad["layers"][group].items():
            n_in = N_IN.get(name, CFG.hidden_size)
            gw = np.asarray(g_w["layers"][group][name]["kernel"]).reshape(CFG.num_layers, n_in, -1)
            a = np.asarray(proj["lora_a"]).reshape(CFG.num_layers, n_in, r)
            b = np.asarray(proj["lora_b"]).reshape(CFG.num_layers, r, -1)
            want_a = s * np.einsum("lio,lro->lir", gw, b)  # dL/dA = s dL/dW B^T
            want_b = s * np.einsum("lir,lio->lro", a, gw)  # dL/dB = s A^T dL/dW
            got = g_ad["layers"][group][name]
            # fp32: x W + s (x A) B and x (W + s A B) round differently; compare at the
            # gradient's scale
            for key, want in (("lora_a", want_a), ("lora_b", want_b)):
                np.testing.assert_allclose(
                    np.asarray(got[key]).reshape(want.shape),
                    want,
                    rtol=1e-4,
                    atol=1e-5 * np.abs(want).max(),
                )
    assert set(ad["layers"]["self_attn"]) | set(ad["layers"]["mlp"]) == set(targets)


@pytest.mark.parametrize("quant", ["nf4", "int8"])
def test_quantised_base(quant):
    w = np.asarray(jax.random.normal(jax.random.key(0), (128, 48))) * 0.02
    codes, scale = lora.quantize(jnp.asarray(w), quant, 64)
    assert codes.dtype == (jnp.uint8 if quant == "nf4" else jnp.int8)
    assert codes.shape == ((128, 24) if quant == "nf4" else (128, 48)) and scale.shape == (2, 48)
    back = np.asarray(lora.dequantize(codes, scale, quant, jnp.float32))
    absmax = np.abs(w.reshape(2, 64, 48)).max(1)  # per block and column
    if quant == "int8":
        bound = absmax / 127.0 / 2 + 1e-9
    else:  # half the widest gap between NF4 levels
        bound = absmax * np.max(np.diff(lora.NF4)) / 2 + 1e-9
    err = np.abs(back - w).reshape(2, 64, 48)
    assert (err <= bound[:, None, :] * 1.0001).all()
    # QLoRA model == the dense model on the dequantised kernels (+ adapters)
    cl = CFG.replace(lora=lora.LoraConfig(rank=2, quant=quant))
    _, base, ad = _lora_tree(cl)
    full = lora.merge(base, ad)
    md = lora.merged_dense(cl, full, models.param_shapes(CFG))
    np.testing.assert_allclose(
        models.Qwen(cl).apply({"params": full}, TOKENS),
        models.Qwen(CFG).apply({"params": md}, TOKENS),
        atol=2e-5,
    )


def test_train_step_moves_only_adapters_and_sampler_uses_them():
    cl = CFG.replace(lora=lora.LoraConfig(rank=4, quant="nf4"))
    mesh = sharding_lib.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-2))
    dense = models.init_params(CFG, jax.random.key(0))
    state = learner.create_train_state(cl, tx, mesh=mesh, params=dense)
    n_ad = sum(x.size for x in jax.tree.leaves(state.params))
    moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim > 0]
    assert sum(x.size for x in moments) == 2 * n_ad < models.param_count(CFG) // 4
    frozen0 = jax.tree.map(np.asarray, state.frozen)
    b, t = 4, 12
    rng = np.random.default_rng(0)
    batch = learner.PPOBatch(
        tokens=rng.integers(0, 64, (b, t)).astype(np.int32),
        loss_mask=np.ones((b, t), np.float32),
        old_logprobs=np.full((b, t), -4.0, np.float32),
        advantages=np.array([1.0, -1.0, 0.5, -0.5], np.float32),
    )
    step = learner.make_train_step(cl, tx, learner.PPOConfig(), mesh)
    state, m = step(state, batch)
    assert np.isfinite(float(m["loss"])) and float(m["skipped_updates"]) == 0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, state.frozen), frozen0)
    b_norm = sum(float(jnp.abs(x).sum()) for x in jax.tree.leaves(lora.split(state.params)[1]))
    assert b_norm > 0  # B moved off zero
    # the sampler runs the adapted weights: greedy tokens of the LoRA tree == of the merged dense
    from mojax.sampling import InGraphSampler

    full = learner.policy_params(state)
    merged = lora.merged_dense(cl, full, models.param_shapes(CFG))
    outs = []
    for config, params in ((cl, full), (CFG, merged)):
        sampler = InGraphSampler(config)
        sampler.update_weights(params)
        out = sampler.generate(TOKENS[:, :6], key=jax.random.key(0), max_new_tokens=8,
                               temperature=0.0)  # fmt: skip
        outs.append(np.asarray(out.tokens))
    np.testing.assert_array_equal(outs[0], outs[1])
