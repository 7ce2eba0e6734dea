"""The cached call path equals the uncached one.

* prefill (left-padded prompt bucket) + T=1 decode steps == one full-sequence call;
* appending chunks of different valid lengths per row (padding anywhere in a chunk, as tool
  observations are appended) == one call over each row's concatenated real tokens.

Reference: the uncached full-sequence forward (itself checked against transformers in
test_qwen_parity.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
from conftest import assert_cached_equals_packed_reference

ATOL = 2e-5


@pytest.fixture(scope="module", params=["tiny-qwen2", "tiny-qwen3"])
def model(request):
    return mm.from_pretrained(request.param, dtype="float32", seed=1)


def masked_max(a, b, mask):
    return float(np.abs(np.where(np.asarray(mask, bool)[..., None], a - b, 0)).max())


def test_prefill_then_decode_equals_full_sequence(model):
    rng = np.random.RandomState(0)
    b, tp, n_new = 3, 8, 5
    tokens = rng.randint(0, model.config.vocab_size, (b, tp + n_new)).astype(np.int32)
    mask = np.ones((b, tp + n_new), np.int32)
    mask[1, :3] = 0  # left-padded prompts of different lengths
    mask[2, :6] = 0
    full = np.asarray(model(tokens, attention_mask=mask))

    cache = mm.init_cache(model.config, b, max_len=16)
    logits, cache = model(tokens[:, :tp], attention_mask=mask[:, :tp], cache=cache)
    steps = [np.asarray(logits)]
    for i in range(tp, tp + n_new):
        logits, cache = model(tokens[:, i : i + 1], attention_mask=mask[:, i : i + 1], cache=cache)
        steps.append(np.asarray(logits))
    cached = np.concatenate(steps, axis=1)
    assert masked_max(cached, full, mask) <= ATOL
    np.testing.assert_array_equal(np.asarray(cache.end), [tp + n_new] * b)
    np.testing.assert_array_equal(np.asarray(cache.slot_mask)[:, : tp + n_new], mask.astype(bool))
    assert not np.asarray(cache.slot_mask)[:, tp + n_new :].any()


def test_chunked_appends_equal_one_shot(model):
    rng = np.random.RandomState(1)
    b, chunks = 3, [6, 1, 4, 1, 3]
    toks, masks = [], []
    for t in chunks:
        toks.append(rng.randint(0, model.config.vocab_size, (b, t)).astype(np.int32))
        m = (rng.rand(b, t) < 0.7).astype(np.int32)
        m[:, 0] = 1 if t == 1 else m[:, 0]
        masks.append(m)
    cache = mm.init_cache(model.config, b, max_len=sum(chunks) + 3)
    outs = []
    for t_, m_ in zip(toks, masks):
        logits, cache = model(t_, attention_mask=m_, cache=cache)
        outs.append(np.asarray(logits))
    # reference: each row's real tokens packed to the left (right padding only at the end)
    mask = assert_cached_equals_packed_reference(model, toks, masks, outs, ATOL)
    np.testing.assert_array_equal(np.asarray(cache.num_valid), mask.sum(1))


def test_cached_step_under_jit_with_bf16_cache(model):
    """A jitted, donated decode step works with a bf16 cache and keeps the layout documented."""
    cfg = model.config
    cache = mm.init_cache(cfg, 2, max_len=8, dtype=jnp.bfloat16)
    assert cache.k.shape == (cfg.num_layers, 2, 8, cfg.num_kv_heads, cfg.head_dim)

    @jax.jit
    def step(params, tokens, cache):
        return model.apply_fn({"params": params}, tokens, cache=cache)

    step = jax.jit(step, donate_argnums=2)
    tokens = jnp.array([[3, 4, 5], [6, 7, 8]], jnp.int32)
    logits, cache = step(model.params, tokens, cache)
    logits2, cache = step(model.params, tokens[:, :1], cache)
    assert cache.k.dtype == jnp.bfloat16 and logits.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(cache.end), [4, 4])
    full = np.asarray(model(jnp.concatenate([tokens, tokens[:, :1]], 1)))
    assert np.abs(np.asarray(logits2)[:, 0] - full[:, 3]).max() < 0.05  # bf16 k/v storage only


def test_shared_prefill_repeated_rows_decode_like_separate_prefills(model):
    """One prefill per prompt, repeated G times (prompt-major), then per-sample decode tokens."""
    rng = np.random.RandomState(2)
    prompts = rng.randint(0, model.config.vocab_size, (2, 5)).astype(np.int32)
    pmask = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], np.int32)
    cache = mm.init_cache(model.config, 2, max_len=8)
    _, cache = model(prompts, attention_mask=pmask, cache=cache)
    cache = cache.repeat_rows(3)
    nxt = rng.randint(0, model.config.vocab_size, (6, 1)).astype(np.int32)
    got, _ = model(nxt, cache=cache)
    full_tokens = np.concatenate([np.repeat(prompts, 3, 0), nxt], 1)
    full_mask = np.concatenate([np.repeat(pmask, 3, 0), np.ones((6, 1), np.int32)], 1)
    ref = np.asarray(model(full_tokens, attention_mask=full_mask))[:, -1]
    np.testing.assert_allclose(np.asarray(got)[:, 0], ref, atol=ATOL, rtol=0)


def test_writes_past_capacity_are_dropped_not_wrapped(model):
    cache = mm.init_cache(model.config, 1, max_len=4)
    _, cache = model(jnp.ones((1, 3), jnp.int32), cache=cache)
    k_before = np.asarray(cache.k)
    _, cache = model(jnp.ones((1, 2), jnp.int32), cache=cache)  # slot 3 written, slot 4 dropped
    assert np.asarray(cache.slot_mask).all()
    np.testing.assert_array_equal(np.asarray(cache.k)[:, :, :3], k_before[:, :, :3])
