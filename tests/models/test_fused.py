"""``mojax.models.fused``: the fused q/k/v and gate/up params give the unfused model's logits.

Reference: the same model with its separate projections (stacked and unrolled layers, with and
without the q/k/v bias of qwen2), through the cached path the decode loop runs too.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
from mojax.models import fused
from mojax.models.lora import LoraConfig
from mojax.models.qwen import unstack_layers


@pytest.mark.parametrize("variant", ["tiny-qwen2", "tiny-qwen3"])
@pytest.mark.parametrize("unrolled", [False, True])
def test_fused_projections_give_the_same_logits(variant, unrolled):
    model = mm.from_pretrained(variant, dtype="float32", seed=2)
    if unrolled:
        model = unstack_layers(model)
    f = fused.fuse_projections(model)
    assert f.config.fused_projections
    layer = f.params["layers_0" if unrolled else "layers"]
    cfg = model.config
    e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    lead = () if unrolled else (cfg.num_layers,)
    assert layer["self_attn"]["qkv_proj"]["kernel"].shape == (*lead, e, h + 2 * k, d)
    assert ("bias" in layer["self_attn"]["qkv_proj"]) == cfg.qkv_bias
    assert layer["mlp"]["gate_up_proj"]["kernel"].shape == (*lead, e, 2, cfg.intermediate_size)
    assert "q_proj" not in layer["self_attn"] and "gate_proj" not in layer["mlp"]
    tokens = np.asarray([[5, 9, 3, 7, 2, 0], [4, 1, 8, 2, 6, 11]], np.int32)
    mask = np.asarray([[1, 1, 1, 1, 1, 0], [1] * 6], bool)
    want = np.asarray(model(tokens, attention_mask=mask))
    got = np.asarray(f(tokens, attention_mask=mask))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)
    cache = mm.init_cache(cfg, 2, 8, jnp.float32)
    want_c, _ = model(tokens, attention_mask=mask, cache=cache)
    got_c, _ = f(tokens, attention_mask=mask, cache=cache)
    np.testing.assert_allclose(np.asarray(got_c), np.asarray(want_c), atol=2e-5, rtol=1e-5)


def test_fuse_leaves_lora_and_fused_models_alone():
    model = mm.from_pretrained("tiny-qwen3", dtype="float32", seed=2)
    f = fused.fuse_projections(model)
    assert fused.fuse_projections(f) is f
    lora = model.replace(config=model.config.replace(lora=LoraConfig(rank=2)))
    assert fused.fuse_projections(lora) is lora


def test_fuse_is_traceable():
    model = unstack_layers(mm.from_pretrained("tiny-qwen2", dtype="float32", seed=2))
    tokens = jnp.asarray([[5, 9, 3, 7]], jnp.int32)

    @jax.jit
    def logits(m):
        return fused.fuse_projections(m)(tokens)

    np.testing.assert_allclose(np.asarray(logits(model)), np.asarray(model(tokens)), atol=2e-5)


@pytest.mark.parametrize("base", ["portable", "cpu"])
def test_fused_learner_gives_the_same_gradients(base):
    """The learner's log-probs with ``fuse_learner_projections``: the same values and the same
    gradients with respect to the separate (stacked) kernels, through the concatenation."""
    import dataclasses

    from mojax.learner.logprobs import token_logprobs
    from mojax.models import layouts

    model = mm.from_pretrained("tiny-qwen2", dtype="float32", seed=3)
    lay = {"portable": layouts.PORTABLE, "cpu": layouts.CPU}[base]
    tokens = jnp.asarray([[5, 9, 3, 7, 2, 8], [4, 1, 8, 2, 6, 11]], jnp.int32)
    weights = jnp.linspace(-1.0, 1.0, 12).reshape(2, 6)

    def loss_and_grad(fuse):
        cfg = model.config.replace(layouts=dataclasses.replace(lay, fuse_learner_projections=fuse))

        def loss(params):
            lp, _ = token_logprobs(cfg, params, tokens)
            return jnp.sum(lp * weights)

        return jax.value_and_grad(loss)(model.params)

    want, want_g = loss_and_grad(False)
    got, got_g = loss_and_grad(True)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    assert jax.tree.structure(got_g) == jax.tree.structure(want_g)
    for g, w in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-6, rtol=1e-4)
