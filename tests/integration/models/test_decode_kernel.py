"""The Pallas decode kernels (``mojax.models.decode_kernel``, ``Layouts.decode_kernel``), run in
Pallas' interpreter on this CPU, against the reference layer.

References:
* kernel A (input RMSNorm, q/k/v product, bias, q/k norm, RoPE) against the reference layer's
  own functions (``RMSNorm`` maths, ``apply_rope``) written out in jnp: fp32 to 1e-5;
* kernel B (one-query attention over a ``LayerKVCache`` layer) against
  ``layers.attend_layer_major``: fp32 to 1e-6 (an online softmax: a few fp32 roundings of O(1)
  values), a row that sees no slot gives zeros in both;
* a model's cached decode steps (dense per-layer, stacked and paged caches) with the kernels
  against the same calls without: fp32 logits to 1e-5 (the model tests' fp32 tolerance);
* 64 greedy tokens through ``mojax.sampling.generate`` (the static decode loop) with and without
  the kernels: the same tokens and log-probs to 1e-5, for Qwen2 (q/k/v bias) and Qwen3 (q/k
  norm), both GQA, ragged prompts (left padding in the bucket); and the continuous sampler
  (dense slots, pages) with the kernels against the static sampler without;
* bf16: XLA CPU runs no bf16 x bf16 -> fp32 dot, so a bf16 model's prefill does not run here
  (the model tests have no bf16 logits to borrow a tolerance from); a bf16 model decoded token
  by token (one-token calls, whose reference attention is a multiply-reduce) is compared with
  the same params in fp32: the kernels' error is the reference's (mean within 10%, max within
  25%), and the greedy tokens are the reference's wherever its top-2 margin exceeds its own
  bf16 error. Free-running bf16 greedy decodes of a random model part at near-ties (margins
  below bf16's rounding), as the reference's bf16 and fp32 decodes do.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
import mojax.sampling as ms
from mojax.models import decode_kernel, layer_cache, layouts
from mojax.models.layers import attend_layer_major
from mojax.models.paged_cache import init_paged_cache
from mojax.models.qwen import unstack_layers
from mojax.models.rope import apply_rope, rope_frequencies

KERNEL = "pallas_gpu_interpret"


def _rms(x, scale, eps):
    x32 = x.astype(jnp.float32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * jax.lax.rsqrt(var + eps)).astype(x.dtype) * scale.astype(x.dtype)


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


@pytest.mark.parametrize(
    "qk_norm, bias, b, rope", [(True, False, 19, None), (False, True, 70, YARN)]
)
def test_qkv_rope_kernel_equals_the_reference_maths(qk_norm, bias, b, rope):
    """19 rows (one block of 32, padded) or 70 (two of 64), E = 96 (three chunks of 32), H = 6,
    K = 2, D = 32; default RoPE or YaRN (its cos / sin scale 1.14)."""
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", hidden_size=96, num_heads=6, head_dim=32)
    cfg = cfg.replace(rope_scaling=rope) if rope else cfg
    e, h, k, d = 96, 6, 2, 32
    rng = np.random.RandomState(0)
    f = lambda *s: jnp.asarray(rng.randn(*s), jnp.float32)
    x, ln, w = f(b, e), 1 + 0.1 * f(e), 0.2 * f(e, h + 2 * k, d)
    bias_v = f(h + 2 * k, d) if bias else None
    qs, ks = (1 + 0.1 * f(d), 1 + 0.1 * f(d)) if qk_norm else (None, None)
    pos = jnp.asarray(rng.randint(0, 500, b), jnp.int32)
    inv_freq, scale = rope_frequencies(cfg)
    got = decode_kernel.qkv_rope(
        x, pos, ln, w, bias_v, qs, ks, inv_freq, scale, heads=h, kv_heads=k,
        eps=cfg.rms_norm_eps, dtype=jnp.float32, interpret=True,
    )  # fmt: skip
    y = (_rms(x, ln, cfg.rms_norm_eps) @ w.reshape(e, -1)).reshape(b, 1, h + 2 * k, d)
    y = y + bias_v if bias else y
    q, kk, v = y[:, :, :h], y[:, :, h : h + k], y[:, :, h + k :]
    if qk_norm:
        q, kk = _rms(q, qs, cfg.rms_norm_eps), _rms(kk, ks, cfg.rms_norm_eps)
    want = (apply_rope(q, pos[:, None], cfg), apply_rope(kk, pos[:, None], cfg), v)
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r[:, 0]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("c, splits", [(40, 1), (40, None), (300, 2), (300, 3)])
def test_attend_kernel_equals_attend_layer_major(c, splits):
    """GQA (3 query heads per kv head, padded to 16), C = 40 slots in blocks of 32 or 300 in
    blocks of 128 (the last block overlapping the one before), in one program per row and kv
    head or split over 2 or 3 (None: as many as blocks here), ragged masks, a row with no
    visible slot (zeros)."""
    b, h, k, d = 4, 6, 2, 32
    rng = np.random.RandomState(1)
    q = jnp.asarray(rng.randn(b, h, d), jnp.float32)
    keys_t = jnp.asarray(rng.randn(b, k, d, c), jnp.float32)
    values = jnp.asarray(rng.randn(b, k, c, d), jnp.float32)
    visible = rng.rand(b, c) < 0.6
    visible[1, : c - 10] = False  # only the overlapping last block's own slots
    visible[3] = False
    got = decode_kernel.attend_dense(
        q, keys_t, values, jnp.asarray(visible), dtype=jnp.float32, interpret=True, splits=splits
    )
    qg = q.reshape(b, 1, k, h // k, d)
    want = attend_layer_major(qg, keys_t, values, jnp.asarray(visible)[:, None], jnp.float32)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want).reshape(b, h, d), atol=1e-6)
    assert not np.asarray(got)[3].any()


def _model(variant, dtype, seed):
    """A random ``variant`` with untied embeddings and a wider init than the default: its greedy
    tokens vary (tied embeddings at a 0.02 init repeat the prompt's last token)."""
    cfg = mm.get_variant(variant, dtype=dtype, tie_word_embeddings=False, initializer_range=0.1)
    cfg = cfg.replace(scan_layers=False)
    return mm.QwenModel(config=cfg, params=mm.init_params(cfg, jax.random.key(seed)))


def _with_kernel(lay):
    return dataclasses.replace(lay, decode_kernel=KERNEL)


LAY = layouts.Layouts(decode_per_layer=True, fuse_decode_projections=True)  # the GPU decode's


@pytest.mark.parametrize("variant", ["tiny-qwen2", "tiny-qwen3"])
@pytest.mark.parametrize("cache", ["layer", "stacked", "paged"])
def test_decode_steps_with_the_kernels_equal_the_reference_layer(variant, cache):
    """A left-padded, ragged prefill (reference path), then 3 decode steps: the logits with the
    kernels equal those without; the step's program holds kernel A (and B on a per-layer
    cache) once per layer."""
    model = unstack_layers(mm.from_pretrained(variant, dtype="float32", seed=3))
    rng = np.random.RandomState(2)
    tokens = jnp.asarray(rng.randint(1, 200, (3, 7)), jnp.int32)
    mask = jnp.asarray(np.arange(7)[None] >= np.asarray([[0], [3], [6]]))  # left padding
    cfg = model.config
    c = {
        "layer": lambda: layer_cache.to_layer_major(mm.init_cache(cfg, 3, 20)),
        "stacked": lambda: mm.init_cache(cfg, 3, 20),
        "paged": lambda: init_paged_cache(cfg, 3, 20, 18, 4, per_layer=True).replace(
            page_table=jnp.arange(15, dtype=jnp.int32).reshape(3, 5)
        ),
    }[cache]()
    call = jax.jit(lambda m, t, k, c: m(t, attention_mask=k, cache=c))
    ref, ker = (model.replace_config(layouts=lay) for lay in (layouts.CPU, _with_kernel(LAY)))
    _, c = call(ref, tokens, mask, c)
    step = jnp.asarray([[5], [7], [9]], jnp.int32)
    ones = jnp.ones_like(step, bool)
    jaxpr = str(jax.make_jaxpr(lambda c: ker(step, attention_mask=ones, cache=c))(c))
    assert jaxpr.count("name=mojax_qkv_rope") == cfg.num_layers
    assert jaxpr.count("name=mojax_decode_attention") == (cfg.num_layers if cache == "layer" else 0)
    c_ref = c_ker = c
    for i in range(3):
        l_ref, c_ref = call(ref, step + i, ones, c_ref)
        l_ker, c_ker = call(ker, step + i, ones, c_ker)
        np.testing.assert_allclose(np.asarray(l_ker), np.asarray(l_ref), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "variant, lay", [("tiny-qwen2", layouts.CPU), ("tiny-qwen3", LAY)]
)  # bias / q/k norm; the CPU decode's layouts / the GPU decode's (fused q/k/v)
def test_greedy_decode_of_64_tokens_is_the_same_with_the_kernels(variant, lay):
    model = _model(variant, "float32", 4)
    rng = np.random.RandomState(3)
    prompts = rng.randint(1, 200, (3, 9)).astype(np.int32)
    kw = dict(key=jax.random.key(0), max_new_tokens=64, temperature=0.0,
              prompt_lengths=np.asarray([9, 2, 5]))  # fmt: skip
    ref = ms.generate(model.replace_config(layouts=lay), prompts, **kw)
    ker = ms.generate(model.replace_config(layouts=_with_kernel(lay)), prompts, **kw)
    assert np.asarray(ref.lengths).tolist() == [64] * 3
    np.testing.assert_array_equal(np.asarray(ker.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(ker.logprobs), np.asarray(ref.logprobs), atol=1e-5)
    assert len(set(np.asarray(ref.tokens).ravel().tolist())) > 10  # not one repeated token


@pytest.mark.parametrize("kv_cache", ["dense", "paged"])
def test_continuous_sampler_with_the_kernels_gives_the_static_samplers_tokens(kv_cache):
    """The continuous sampler (2 slots for 3 rows: slots at different write positions, a row
    entering a freed slot; dense slots or pages of 4) with the kernels: the static sampler's
    greedy tokens without them."""
    from mojax.sampling.continuous.engine import ContinuousSampler

    model = _model("tiny-qwen3", "float32", 5)
    prompts = np.random.RandomState(4).randint(1, 200, (3, 9)).astype(np.int32)
    kw = dict(key=jax.random.key(0), max_new_tokens=np.asarray([20, 12, 24]), temperature=0.0,
              prompt_lengths=np.asarray([9, 2, 5]), max_response_len=24, max_total_len=48)  # fmt: skip
    ref = ms.generate(model.replace_config(layouts=layouts.CPU), prompts, **kw)
    ker = model.replace_config(layouts=_with_kernel(layouts.CPU))
    sampler = ContinuousSampler.of(ker, slots=2, kv_cache=kv_cache, page_size=4, num_pages=24)
    got = sampler.generate(prompts, **kw)
    np.testing.assert_array_equal(np.asarray(got.lengths), np.asarray(ref.lengths))
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(ref.logprobs), atol=1e-5)


@jax.jit
def _step(m, tok, cache):
    logits, cache = m(tok, attention_mask=tok > 0, cache=cache)
    return logits[:, -1].astype(jnp.float32), cache


def _greedy(model, prompt, n, forced=None):
    """``n`` greedy tokens after ``prompt`` (left-padded with 0) by one-token calls only, or the
    logits of each position with ``forced`` tokens fed instead (teacher forcing)."""
    cache = layer_cache.to_layer_major(mm.init_cache(model.config, prompt.shape[0], 80))
    for tok in prompt.T:
        logits, cache = _step(model, jnp.asarray(tok[:, None]), cache)
    tokens, all_logits = [], []
    for i in range(n):
        tok = np.asarray(logits).argmax(-1) if forced is None else forced[:, i]
        tokens.append(tok)
        all_logits.append(np.asarray(logits))
        logits, cache = _step(model, jnp.asarray(tok[:, None], jnp.int32), cache)
    return np.stack(tokens, 1), np.stack(all_logits, 1)


@pytest.mark.parametrize("variant", ["tiny-qwen2", "tiny-qwen3"])
def test_bf16_decode_steps_are_as_close_to_fp32_as_the_reference(variant):
    """64 greedy tokens of a bf16 model (the reference's), teacher-forced through the kernels and
    through the same params in fp32: the kernels' bf16 logits are as near the fp32 ones as the
    reference's bf16 logits are (measured mean 0.0064 both, max 0.046 / 0.051 and 0.044 /
    0.042), and their argmax is the reference's wherever its top-2 margin exceeds the
    reference's own bf16 error (measured: 99% of all steps agree, the rest at margins < 0.005)."""
    model = _model(variant, "bfloat16", 4)
    prompt = np.asarray([[5, 9, 3, 7, 2, 6], [0, 0, 4, 1, 8, 2], [0, 0, 0, 0, 0, 3]], np.int32)
    ref = model.replace_config(layouts=layouts.CPU)
    tokens, want = _greedy(ref, prompt, 64)
    _, got = _greedy(ref.replace_config(layouts=_with_kernel(layouts.CPU)), prompt, 64, tokens)
    f32 = ref.replace(
        config=ref.config.replace(dtype="float32", param_dtype="float32"),
        params=jax.tree.map(lambda a: a.astype(jnp.float32), ref.params),
    )
    _, exact = _greedy(f32, prompt, 64, tokens)
    err_ref, err_ker = np.abs(want - exact), np.abs(got - exact)
    assert err_ker.mean() <= 1.1 * err_ref.mean(), (err_ker.mean(), err_ref.mean())
    assert err_ker.max() <= 1.25 * err_ref.max(), (err_ker.max(), err_ref.max())
    top2 = np.sort(want, axis=-1)[..., -2:]
    clear = top2[..., 1] - top2[..., 0] > err_ref.max()
    assert clear.mean() > 0.5, clear.mean()
    np.testing.assert_array_equal(got.argmax(-1)[clear], tokens[clear])
    assert len(set(tokens.ravel().tolist())) > 10  # not one repeated token


def test_decode_kernel_layout_is_checked_and_off_by_default():
    for lay in (layouts.PORTABLE, layouts.CPU, layouts.GPU, layouts.TPU):
        assert lay.decode_kernel == "none"
    with pytest.raises(ValueError, match="decode_kernel='triton'"):
        layouts.Layouts(decode_kernel="triton")
    cfg = mm.get_variant("tiny-qwen3")
    assert not decode_kernel.applies("none", 1, cfg)
    assert not decode_kernel.applies("pallas_gpu", 2, cfg)
    assert decode_kernel.applies("pallas_gpu", 1, cfg)  # D = 32: halves of 16
    assert not decode_kernel.applies("pallas_gpu", 1, cfg.replace(head_dim=16))
    assert decode_kernel.applies(KERNEL, 1, cfg.replace(head_dim=16))
