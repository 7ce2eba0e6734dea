"""``draw="inverse_cdf"``: the two-level inverse CDF against a float64 numpy reference.

Reference (written from the definition in ``mojax.sampling.processors``): for a uniform ``u``, the
token is ``min {i : cumsum(p)[i] > u * sum(p)}`` with ``p = exp(z - max z)`` in float64 over the
whole vocabulary (one level, no blocks). The fp32 two-level draw may differ from it only where
``u * sum(p)`` lies within fp32 rounding of a cumulative boundary; everywhere else the tokens must
be equal. Plus: removed (``-inf``) entries are never drawn, whatever ``u`` (0, boundaries, the
largest fp32 below 1), and ``sample_step`` frequencies pass the same chi-square test as the
Gumbel draw (tests/integration/sampling/test_sampling_processors.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mojax_test_utils import reference_probs
from test_sampling_processors import ALPHA, chi_square_pvalue

import mojax.sampling as ms
from mojax.sampling.processors import INVERSE_CDF_BLOCK, inverse_cdf_draw

V = 1000  # 4 blocks of 256, the last one partial (232 entries + padding)


def masked_logits(rng, b, v=V):
    """fp32 [b, v] logits with -inf at block edges, a whole masked block, and scattered holes."""
    z = (rng.randn(b, v) * 3.0).astype(np.float32)
    blk = INVERSE_CDF_BLOCK
    z[:, 0] = -np.inf  # the first entry
    z[:, blk - 1 : blk + 1] = -np.inf  # both sides of a block boundary
    z[:, 2 * blk : 3 * blk] = -np.inf  # a whole block
    z[:, -1] = -np.inf  # the last entry
    z[rng.rand(b, v) < 0.2] = -np.inf  # scattered holes
    return z


def reference_tokens(z, u):
    """float64, one level: the first index whose cumulative mass exceeds u * total."""
    z = z.astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    cum = np.cumsum(p, -1)
    tok = np.array([np.searchsorted(c, ui * c[-1], side="right") for c, ui in zip(cum, u)])
    gap = np.abs(cum - (u * cum[:, -1])[:, None]).min(-1) / cum[:, -1]  # distance to a boundary
    return tok, gap


def test_inverse_cdf_matches_float64_reference_except_at_rounding_boundaries():
    rng = np.random.RandomState(0)
    z = masked_logits(rng, 4096)
    u = rng.rand(4096).astype(np.float32)
    got = np.asarray(jax.jit(inverse_cdf_draw)(jnp.asarray(z), jnp.asarray(u)))
    want, gap = reference_tokens(z, u.astype(np.float64))
    near = gap < 1e-6  # fp32 sums (of <= 256 terms per level) are exact to a few 1e-7 relative
    assert near.mean() < 0.01  # (0.1% here: the equality below covers nearly every draw)
    np.testing.assert_array_equal(got[~near], want[~near])
    assert np.isfinite(z[np.arange(4096), got]).all()


def test_inverse_cdf_never_draws_a_removed_token():
    rng = np.random.RandomState(1)
    z = masked_logits(rng, 8)
    p = np.exp(z.astype(np.float64) - z.max(-1, keepdims=True))
    cum = np.cumsum(p, -1)
    below_one = np.nextafter(np.float32(1), np.float32(0))
    us = [0.0, below_one, 0.5]
    us += list((cum[0, 200:700:37] / cum[0, -1]).astype(np.float32))  # exact block/entry edges
    for ui in us:
        u = np.full(8, ui, np.float32)
        tok = np.asarray(inverse_cdf_draw(jnp.asarray(z), jnp.asarray(u)))
        assert np.isfinite(z[np.arange(8), tok]).all(), ui
        assert (tok < V).all()


def test_inverse_cdf_single_token_and_small_vocab():
    z = np.full((3, 7), -np.inf, np.float32)
    z[0, 0], z[1, 6], z[2, 3] = 0.0, 5.0, -2.0  # one kept token per row (top-k = 1)
    for ui in (0.0, 0.5, np.nextafter(np.float32(1), np.float32(0))):
        tok = inverse_cdf_draw(jnp.asarray(z), jnp.full((3,), ui, jnp.float32))
        np.testing.assert_array_equal(np.asarray(tok), [0, 6, 3])


@pytest.mark.parametrize(
    "kw", [dict(), dict(temperature=0.7, top_k=40), dict(top_p=0.8, min_p=0.02)], ids=str
)
def test_sample_step_inverse_cdf_frequencies_match_reference(kw):
    rng = np.random.RandomState(2)
    logits = (rng.randn(3, 600) * 2.5).astype(np.float32)  # 3 blocks, the last partial
    draws = 20000
    tiled = jnp.asarray(np.repeat(logits, draws, axis=0))
    params = ms.SamplingParams(**kw, draw="inverse_cdf")
    tok, lp = jax.jit(ms.sample_step, static_argnums=2)(tiled, jax.random.key(3), params)
    tok, lp = np.asarray(tok).reshape(3, draws), np.asarray(lp).reshape(3, draws)
    for i in range(3):
        probs = reference_probs(logits[i], **kw)
        counts = np.bincount(tok[i], minlength=600)
        assert chi_square_pvalue(counts, probs) > ALPHA, (kw, i)
        raw = logits[i].astype(np.float64)
        np.testing.assert_allclose(lp[i], (raw - np.logaddexp.reduce(raw))[tok[i]], atol=1e-5)


def test_draw_is_validated_and_gumbel_stays_the_default_stream():
    with pytest.raises(ValueError, match="draw"):
        ms.SamplingParams(draw="multinomial")
    logits = jnp.asarray(np.random.RandomState(4).randn(16, 300), jnp.float32)
    key = jax.random.key(5)
    default = ms.sample_step(logits, key, ms.SamplingParams())[0]
    gumbel = jax.random.categorical(key, logits, axis=-1)
    np.testing.assert_array_equal(np.asarray(default), np.asarray(gumbel))


def test_generate_inverse_cdf_first_tokens_follow_the_model_distribution():
    """End to end through ``generate``: G first tokens of one prompt (shared prefill) drawn with
    ``draw="inverse_cdf"`` follow the processed distribution of the model's own logits."""
    import mojax.models as mm

    model = mm.from_pretrained("tiny-qwen2", dtype="float32", seed=2)
    prompt = np.asarray([[5, 17, 99, 3, 250, 41]], np.int32)
    kw = dict(top_k=30, temperature=0.8)
    out = ms.generate(
        model, prompt, key=jax.random.key(7), max_new_tokens=1, num_samples=4096,
        draw="inverse_cdf", **kw,
    )  # fmt: skip
    first = np.asarray(out.tokens)[:, 0]
    probs = reference_probs(np.asarray(model(prompt))[0, -1], **kw)
    counts = np.bincount(first, minlength=model.config.vocab_size)
    assert chi_square_pvalue(counts, probs) > ALPHA
    assert len(np.unique(first)) > 3
