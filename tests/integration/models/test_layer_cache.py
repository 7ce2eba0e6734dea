"""The decode layout of the KV cache (``mojax.models.layer_cache.LayerKVCache``).

* its attention (``layers.attend_layer_major``, both the one-query multiply-reduce and the
  einsums) against a numpy float64 loop written from the equations;
* conversions to and from the stacked ``KVCache`` are exact, and so are truncate / write-back;
* cached calls of an unrolled model on a ``LayerKVCache`` (prefill, one-token steps, chunks with
  padding anywhere) against the uncached forward over each row's real tokens (itself checked
  against transformers in test_qwen_parity.py), and the caches both layouts end with;
* a scanned model refuses it with a clear error.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
from conftest import assert_cached_equals_packed_reference
from mojax.models import layer_cache, layers
from mojax.models.layer_cache import LayerKVCache, to_layer_major, to_stacked

ATOL = 2e-5
B, S, K, G, D = 3, 20, 2, 3, 8


def _reference(qg, keys, values, visible):
    """float64 loop; ``keys``/``values [B, S, K, D]``; zeros where a query sees no key."""
    out = np.zeros(qg.shape)
    for b in range(qg.shape[0]):
        for t in range(qg.shape[1]):
            seen = np.flatnonzero(visible[b, t])
            for k in range(qg.shape[2]):
                for g in range(qg.shape[3]):
                    if seen.size == 0:
                        continue
                    s = keys[b, seen, k].astype(np.float64) @ qg[b, t, k, g] / np.sqrt(D)
                    p = np.exp(s - s.max())
                    out[b, t, k, g] = (p / p.sum()) @ values[b, seen, k].astype(np.float64)
    return out


@pytest.mark.parametrize("t", [1, 4])
@pytest.mark.parametrize("path", ["one_query", "einsum"])
def test_attend_layer_major_equals_float64_reference(t, path):
    rng = np.random.RandomState(t)
    qg = rng.randn(B, t, K, G, D).astype(np.float32)
    keys = rng.randn(B, S, K, D).astype(np.float32)
    values = rng.randn(B, S, K, D).astype(np.float32)
    slot_valid = rng.rand(B, S) < 0.7
    slot_valid[2] = False  # a row whose queries see no key: zeros
    q_idx = np.arange(S - t, S)[None].repeat(B, 0)
    visible = (np.arange(S)[None, None] <= q_idx[:, :, None]) & slot_valid[:, None]
    keys_t = np.transpose(keys, (0, 2, 3, 1))  # [B, K, D, S]
    values_km = np.swapaxes(values, 1, 2)  # [B, K, S, D]
    # "one_query": the CPU layouts' multiply-reduces for T = 1; "einsum": the portable path
    one = path == "one_query"
    fn = lambda *a: layers.attend_layer_major(*a, jnp.float32, one_query=one)
    out = jax.jit(fn)(qg, keys_t, values_km, visible)
    np.testing.assert_allclose(np.asarray(out), _reference(qg, keys, values, visible), atol=2e-6)
    assert not np.asarray(out)[2].any()


def _random_cache(seed=0, layers_=3, b=4, c=12, k=2, d=8):
    rng = np.random.RandomState(seed)
    shape = (layers_, b, c, k, d)
    return mm.KVCache(
        k=jnp.asarray(rng.randn(*shape), jnp.float32),
        v=jnp.asarray(rng.randn(*shape), jnp.float32),
        slot_mask=jnp.asarray(rng.rand(b, c) < 0.5),
        end=jnp.full((b,), 7, jnp.int32),
    )


def _assert_same(a: mm.KVCache, b: mm.KVCache):
    for name in ("k", "v", "slot_mask", "end"):
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))


def test_conversions_truncate_write_back_and_broadcast_are_exact():
    from mojax.sampling import state as state_lib

    cache = _random_cache()
    lm = to_layer_major(cache)
    assert isinstance(lm, LayerKVCache) and lm.max_len == cache.max_len
    assert lm.k[0].shape == (4, 2, 8, 12) and lm.v[0].shape == (4, 2, 12, 8)
    np.testing.assert_array_equal(np.asarray(lm.k[1])[:, :, :, 5], np.asarray(cache.k)[1, :, 5])
    _assert_same(to_stacked(lm), cache)
    assert to_layer_major(lm) is lm and to_stacked(cache) is cache
    np.testing.assert_array_equal(np.asarray(lm.num_valid), np.asarray(cache.num_valid))
    # a segment: truncate, change the kept slots, write back; same as on the stacked layout
    part, part_lm = state_lib.truncate_cache(cache, 8), state_lib.truncate_cache(lm, 8)
    _assert_same(to_stacked(part_lm), part)
    new = _random_cache(seed=1, c=8)
    full = state_lib.write_back_cache(cache, new)
    full_lm = state_lib.write_back_cache(lm, to_layer_major(new))
    _assert_same(to_stacked(full_lm), full)
    np.testing.assert_array_equal(np.asarray(full.k)[:, :, 8:], np.asarray(cache.k)[:, :, 8:])
    # the prefill's broadcast to G samples per prompt and a longer cache
    grown = state_lib.broadcast_cache(cache, 3, 20)
    assert grown.k.shape == (3, 12, 20, 2, 8)
    _assert_same(to_stacked(state_lib.broadcast_cache(lm, 3, 20)), grown)


@pytest.fixture(scope="module", params=["tiny-qwen2", "tiny-qwen3"])
def model(request):
    return mm.unstack_layers(mm.from_pretrained(request.param, dtype="float32", seed=1))


def _chunks(vocab, b, sizes, seed):
    rng = np.random.RandomState(seed)
    toks, masks = [], []
    for t in sizes:
        toks.append(rng.randint(0, vocab, (b, t)).astype(np.int32))
        m = (rng.rand(b, t) < 0.7).astype(np.int32)
        m[:, 0] = 1 if t == 1 else m[:, 0]
        masks.append(m)
    return toks, masks


def test_cached_calls_on_layer_major_cache_equal_uncached_reference(model):
    b, sizes = 3, [6, 1, 1, 4, 1, 3, 1]
    toks, masks = _chunks(model.config.vocab_size, b, sizes, seed=2)
    stacked = mm.init_cache(model.config, b, max_len=sum(sizes) + 2)
    lm = to_layer_major(stacked)
    outs = []
    for t_, m_ in zip(toks, masks):
        logits, lm = model(t_, attention_mask=m_, cache=lm)
        _, stacked = model(t_, attention_mask=m_, cache=stacked)
        assert isinstance(lm, LayerKVCache)
        outs.append(np.asarray(logits))
    assert_cached_equals_packed_reference(model, toks, masks, outs, ATOL)
    # both layouts hold the same keys and values (up to fp32 summation order upstream)
    back = to_stacked(lm)
    np.testing.assert_allclose(np.asarray(back.k), np.asarray(stacked.k), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(back.v), np.asarray(stacked.v), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(np.asarray(back.slot_mask), np.asarray(stacked.slot_mask))
    np.testing.assert_array_equal(np.asarray(back.end), [sum(sizes)] * b)


def test_writes_past_the_last_slot_are_dropped(model):
    b = 2
    lm = to_layer_major(mm.init_cache(model.config, b, max_len=4))
    toks, masks = _chunks(model.config.vocab_size, b, [3, 3], seed=3)
    _, lm = model(toks[0], attention_mask=masks[0], cache=lm)
    before = [np.asarray(a) for a in lm.k]
    _, lm = model(toks[1], attention_mask=masks[1], cache=lm)
    for a, old in zip(lm.k, before):
        np.testing.assert_array_equal(np.asarray(a)[..., :3], old[..., :3])  # kept
    assert all(a.shape[-1] == 4 for a in lm.k)


def test_scanned_model_refuses_layer_major_cache():
    model = mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)
    assert model.config.scan_layers
    lm = to_layer_major(mm.init_cache(model.config, 2, max_len=8))
    with pytest.raises(TypeError, match="unrolled layers"):
        model(np.zeros((2, 1), np.int32), cache=lm)


def test_write_layer_update_axes():
    """``write_layer`` puts token t of row b at slot idx[b, t], for every head and dim."""
    rng = np.random.RandomState(4)
    ks = (jnp.zeros((2, 3, 5, 9)),)  # [B, K, D, C]
    vs = (jnp.zeros((2, 3, 9, 5)),)  # [B, K, C, D]
    new_k = jnp.asarray(rng.randn(2, 2, 3, 5), jnp.float32)  # [B, T, K, D]
    new_v = jnp.asarray(rng.randn(2, 2, 3, 5), jnp.float32)
    idx = jnp.asarray([[1, 2], [6, 9]])  # slot 9 is past C = 9: dropped
    keys_t, values, _ = layer_cache.write_layer((ks, vs), 0, new_k, new_v, idx)
    keys_t, values = np.asarray(keys_t), np.asarray(values)
    np.testing.assert_array_equal(keys_t[0, :, :, 2], np.asarray(new_k)[0, 1])
    np.testing.assert_array_equal(values[1, :, 6], np.asarray(new_v)[1, 0])
    assert np.count_nonzero(np.abs(keys_t).sum((1, 2))) == 3  # slots (0,1), (0,2), (1,6)


def test_rematerialised_unrolled_layers_take_the_layer_major_cache(model):
    """``remat`` keeps the layer index a Python int for unrolled layers (``static_argnums``), so
    the decode layout works with it (a traced index raised the ``TypeError`` above)."""
    remat = model.replace_config(remat="full")
    b = 2
    toks, masks = _chunks(model.config.vocab_size, b, [4, 1], seed=5)
    caches = {m: to_layer_major(mm.init_cache(model.config, b, max_len=6)) for m in ("a", "b")}
    for t_, m_ in zip(toks, masks):
        ref, caches["a"] = model(t_, attention_mask=m_, cache=caches["a"])
        out, caches["b"] = remat(t_, attention_mask=m_, cache=caches["b"])
        np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))
