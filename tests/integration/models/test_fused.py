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


@pytest.mark.parametrize(
    "variant, unrolled",
    [("tiny-qwen2", True), ("tiny-qwen3", False)],  # bias and q/k norm
)
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
