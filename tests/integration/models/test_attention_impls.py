"""The attention implementations of ``Layouts.attention`` against the reference einsum path.

``xla`` (``jax.nn.dot_product_attention``, the call cuDNN runs on a GPU) and Pallas splash attention
in interpret mode (the TPU kernel, run on the CPU) must give the reference's logits and parameter
gradients at every real position, for right padding, left padding and packed segments (causal
within a segment, nothing across segments), and a prefill into a fresh cache must give the
reference's next-token logits and cache contents.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax import models
from mojax.models import layouts

CFG = models.get_variant("tiny-qwen3", vocab_size=64, dtype="float32")
T = 12
TOKENS = np.asarray(jax.random.randint(jax.random.key(1), (3, T), 0, 64))
MASKS = {
    "right": np.array([[1] * T, [1] * 7 + [0] * 5, [1] * 10 + [0] * 2], bool),
    "left": np.array([[1] * T, [0] * 4 + [1] * 8, [0] * 2 + [1] * 9 + [0]], bool),
}
SEGMENTS = np.array(
    [[1] * 5 + [2] * 7, [0] * 2 + [1] * 3 + [2] * 4 + [0] * 3, [1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 4, 0]]
)


@pytest.fixture(scope="module")
def params():
    return models.init_params(CFG, jax.random.key(0))


def _loss_and_grads(impl, params, mask, segments):
    cfg = CFG.replace(layouts=layouts.Layouts(attention=impl))
    real = mask if segments is None else segments > 0
    w = jax.random.normal(jax.random.key(2), (*TOKENS.shape, CFG.vocab_size))

    def loss(p):
        logits = models.Qwen(cfg).apply(
            {"params": p}, TOKENS, attention_mask=real, segment_ids=segments
        )
        return jnp.sum(jnp.where(real[..., None], logits * w, 0.0)), logits

    (val, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return val, np.where(real[..., None], logits, 0.0), grads


@pytest.mark.parametrize("impl", ["xla", "splash_interpret"])
@pytest.mark.parametrize("case", ["right", "left", "packed"])
def test_forward_and_grads_match_reference(params, impl, case):
    mask = MASKS.get(case, SEGMENTS > 0)
    segments = SEGMENTS if case == "packed" else None
    v0, l0, g0 = _loss_and_grads("reference", params, mask, segments)
    v1, l1, g1 = _loss_and_grads(impl, params, mask, segments)
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v1, v0, rtol=1e-5, atol=1e-4)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_packed_segments_equal_separate_rows(params):
    """A packed row's segments give the logits of each sequence run alone (positions restart)."""
    cfg = CFG.replace(layouts=layouts.Layouts(attention="xla"))
    seg = SEGMENTS[2:3]
    packed = models.Qwen(cfg).apply({"params": params}, TOKENS[2:3], segment_ids=seg)
    for s in range(1, 5):
        cols = np.flatnonzero(seg[0] == s)
        alone = models.QwenModel(CFG, params)(TOKENS[2:3, cols])
        np.testing.assert_allclose(packed[0, cols], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["xla", "splash_interpret"])
def test_prefill_into_fresh_cache_matches_reference(params, impl):
    mask = MASKS["right"]
    out = {}
    for name in ("reference", impl):
        cfg = CFG.replace(layouts=layouts.Layouts(attention=name))
        cache = models.init_cache(cfg, 3, T)
        logits, cache = models.Qwen(cfg).apply(
            {"params": params}, TOKENS, attention_mask=mask, cache=cache
        )
        out[name] = (np.where(mask[..., None], logits, 0.0), cache)
    np.testing.assert_allclose(out[impl][0], out["reference"][0], rtol=1e-5, atol=1e-5)
    valid = mask[None, :, :, None, None]  # the cache's padding slots are never read
    for kv in ("k", "v"):
        got, want = getattr(out[impl][1], kv), getattr(out["reference"][1], kv)
        np.testing.assert_allclose(np.where(valid, got, 0), np.where(valid, want, 0), atol=1e-5)
    np.testing.assert_array_equal(out[impl][1].slot_mask, out["reference"][1].slot_mask)


def test_backends_choose_their_attention():
    assert layouts.for_backend("cpu").attention == "reference"
    assert layouts.for_backend("gpu").attention == "cudnn"
    assert layouts.for_backend("tpu").attention == "splash"


def test_an_fp32_model_under_cudnn_takes_the_xla_call():
    """cuDNN's fused attention takes bf16 / fp16 only: under the GPU layouts an fp32 model (its
    default dtype) runs XLA's call, the same numbers (on this CPU the cuDNN call itself cannot run,
    so without that fallback the forward raises)."""
    from mojax.models.attention import self_attention

    rng = np.random.RandomState(0)
    q = jnp.asarray(rng.randn(2, 6, 4, 8), jnp.float32)
    k, v = (jnp.asarray(rng.randn(2, 6, 2, 8), jnp.float32) for _ in range(2))
    mask = jnp.asarray([[1] * 6, [1] * 4 + [0] * 2], bool)
    got = self_attention(q, k, v, mask, "cudnn", jnp.float32)
    want = self_attention(q, k, v, mask, "xla", jnp.float32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
