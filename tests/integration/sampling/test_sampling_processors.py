"""Sampling distributions: empirical token frequencies == the truncated, renormalised distribution.

Reference: ``reference_probs``, a float64 numpy implementation written from the definitions in
``mojax.sampling.processors`` (temperature, top-k with ties kept, nucleus top-p = smallest sorted
prefix with mass >= p, min-p relative to the max probability). Statistical test: Pearson chi-square
goodness of fit at significance level alpha = 1e-3 (bins with expected count < 5 merged), fixed
seeds, plus exactly zero draws of removed tokens. With fixed keys the tests are deterministic; the
alpha states how unlikely a correct sampler is to fail at a fresh seed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mojax_test_utils import reference_probs
from scipy import stats

import mojax.models as mm
import mojax.sampling as ms

ALPHA = 1e-3


def chi_square_pvalue(counts, probs):
    """Pearson chi-square p-value of ``counts`` against ``probs`` (support only, small bins
    merged)."""
    n = counts.sum()
    support = probs > 0
    assert counts[~support].sum() == 0, "drew a token the processors removed"
    exp, obs = probs[support] * n, counts[support]
    order = np.argsort(exp)
    exp, obs = exp[order], obs[order]
    small = np.cumsum(exp) < 5.0  # merge the smallest bins until they reach 5 expected draws
    if small.any():
        k = int(small.sum()) + 1
        exp = np.concatenate([[exp[:k].sum()], exp[k:]])
        obs = np.concatenate([[obs[:k].sum()], obs[k:]])
    if exp.size < 2:
        return 1.0
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


CASES = {
    "temperature-0.7": dict(temperature=0.7),
    "temperature-1.5": dict(temperature=1.5),
    "top-k-5": dict(top_k=5),
    "top-p-0.8": dict(top_p=0.8),
    "top-k-8-top-p-0.9-t0.8": dict(temperature=0.8, top_k=8, top_p=0.9),
    "min-p-0.1": dict(min_p=0.1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sample_step_frequencies_match_reference(case):
    kw = CASES[case]
    rng = np.random.RandomState(0)
    logits = rng.randn(4, 24).astype(np.float32) * 2.0  # 4 different distributions
    draws = 20000
    tiled = jnp.asarray(np.repeat(logits, draws, axis=0))
    params = ms.SamplingParams(**kw)
    tok, lp = jax.jit(ms.sample_step, static_argnums=2)(tiled, jax.random.key(1), params)
    tok = np.asarray(tok).reshape(4, draws)
    lp = np.asarray(lp).reshape(4, draws)
    for i in range(4):
        probs = reference_probs(logits[i], **kw)
        assert probs.max() < 1.0  # a non-degenerate case
        counts = np.bincount(tok[i], minlength=24)
        assert chi_square_pvalue(counts, probs) > ALPHA, (case, i)
        # policy log-probs: the raw distribution at temperature 1, whatever was sampled
        raw = logits[i].astype(np.float64)
        raw = raw - np.logaddexp.reduce(raw)
        np.testing.assert_allclose(lp[i], raw[tok[i]], atol=1e-5)


def test_processed_logits_support_and_sampling_logprobs():
    rng = np.random.RandomState(3)
    logits = rng.randn(6, 50).astype(np.float32) * 3.0
    kw = dict(temperature=0.9, top_k=12, top_p=0.7, min_p=0.05)
    z = np.asarray(ms.process_logits(jnp.asarray(logits), ms.SamplingParams(**kw)))
    for i in range(6):
        probs = reference_probs(logits[i], **kw)
        np.testing.assert_array_equal(np.isfinite(z[i]), probs > 0)
        got = np.exp(z[i] - z[i][np.isfinite(z[i])].max())
        np.testing.assert_allclose(got / got.sum(), probs, atol=1e-6)
    tok, lp = ms.sample_step(
        jnp.asarray(logits), jax.random.key(0), ms.SamplingParams(**kw, logprobs="sampling")
    )
    want = [np.log(reference_probs(logits[i], **kw)[t]) for i, t in enumerate(np.asarray(tok))]
    np.testing.assert_allclose(np.asarray(lp), want, atol=1e-5)


def test_top_k_ties_are_kept_and_greedy_is_argmax():
    logits = jnp.asarray([[1.0, 3.0, 3.0, 0.5, 3.0]])
    z = ms.process_logits(logits, ms.SamplingParams(top_k=2))
    np.testing.assert_array_equal(np.isfinite(np.asarray(z))[0], [0, 1, 1, 0, 1])
    tok, lp = ms.sample_step(logits, jax.random.key(0), ms.SamplingParams(temperature=0.0))
    assert int(tok[0]) == 1  # first maximum, as numpy / torch argmax
    np.testing.assert_allclose(float(lp[0]), float(jax.nn.log_softmax(logits)[0, 1]), atol=1e-6)


def test_bad_params_raise_naming_the_argument():
    for kw, name in [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_k=-2), "top_k"),
        (dict(min_p=1.0), "min_p"),
        (dict(logprobs="raw"), "logprobs"),
    ]:
        with pytest.raises(ValueError, match=name):
            ms.SamplingParams(**kw)


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(top_k=20, temperature=0.7), dict(top_p=0.8, min_p=0.05)])
def test_generate_first_token_frequencies_match_model_distribution(kw):
    """End to end: G draws of the first new token of one prompt (shared prefill broadcast to G
    rows) follow the processed distribution of the model's own next-token logits."""
    model = mm.from_pretrained("tiny-qwen2", dtype="float32", seed=2)
    prompt = np.asarray([[5, 17, 99, 3, 250, 41]], np.int32)
    g = 4096
    out = ms.generate(model, prompt, key=jax.random.key(7), max_new_tokens=1, num_samples=g, **kw)
    first = np.asarray(out.tokens)[:, 0]
    logits = np.asarray(model(prompt))[0, -1]
    probs = reference_probs(logits, **kw)
    counts = np.bincount(first, minlength=model.config.vocab_size)
    assert chi_square_pvalue(counts, probs) > ALPHA
    assert len(np.unique(first)) > 3  # the G samples are not copies of each other


def test_stop_bias_equals_a_loop_over_rows_and_stop_ids():
    """``stop_bias`` against a loop written from its definition: stop ids removed while
    ``num_new < min_new``; only the first stop id left at the ``stop_at``-th new token; unused ids
    (-1) and repeated ids included."""
    from mojax.sampling.processors import stop_bias

    v = 11
    stop_ids = np.array([[3, 7], [5, -1], [2, 2], [-1, -1], [9, 0], [4, 6]], np.int32)
    num_new = np.array([0, 4, 1, 2, 3, 0], np.int32)
    min_new = np.array([2, 2, 5, 9, 0, 0], np.int32)
    stop_at = np.array([0, 5, 0, 3, 4, 0], np.int32)
    want = np.zeros((6, v), np.float32)
    for b in range(6):
        ids = [int(i) for i in stop_ids[b] if i >= 0]
        if stop_at[b] > 0 and num_new[b] + 1 >= stop_at[b] and stop_ids[b, 0] >= 0:
            want[b] = -np.inf
            want[b, stop_ids[b, 0]] = 0.0
        elif num_new[b] < min_new[b]:
            want[b, ids] = -np.inf
    got = stop_bias(*map(jnp.asarray, (stop_ids, num_new, min_new, stop_at)), v)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize(
    "min_new, stop_at, want",
    [(0, 0, False), (2, 0, True), (0, 3, True), (np.zeros(4, np.int32), 0, True)],
)
def test_stop_controls_are_compiled_in_only_when_an_argument_asks(min_new, stop_at, want):
    # decided by the argument's kind, so processes that read other rows compile the same program
    assert ms.processors.uses_stop_controls(min_new, stop_at) is want
