"""A vocabulary padded for sharding (``QwenConfig.real_vocab_size``): the padding rows are never
sampled and take no probability mass, in the sampler and in the learner alike.

The padding rows of the head are made large, so that without the mask they would win most draws
(the control); with it, no sampled id reaches them, and every log-prob equals a numpy log-softmax
over the real ids of the unmasked model's logits (an independent reference).
"""

import jax
import numpy as np
import pytest

from mojax import models
from mojax import sampling as ms
from mojax.learner.logprobs import token_logprobs
from mojax.spec.model_config import padded_vocab_size

REAL, V = 150, 256


def _models():
    cfg = models.get_variant("tiny-qwen3", vocab_size=V)
    params = models.init_params(cfg, jax.random.key(0))
    head = np.asarray(params["lm_head"]).copy()
    head[REAL:] *= 40.0  # large padding rows: unmasked, they would take most of the mass
    params = {**params, "lm_head": head}
    plain = models.QwenModel(config=cfg, params=params)
    padded = models.QwenModel(config=cfg.replace(real_vocab_size=REAL), params=params)
    return plain, padded


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_padded_vocab_size_is_the_next_multiple_of_128():
    assert [padded_vocab_size(n) for n in (1, 128, 129, 159, 256, 257)] == [
        128, 128, 256, 256, 256, 384,
    ]  # fmt: skip


@pytest.mark.parametrize("draw", ["gumbel", "inverse_cdf"])
def test_padding_ids_are_never_sampled(draw):
    plain, padded = _models()
    prompts = np.tile(np.arange(3, 11, dtype=np.int32), (4, 1))
    kw = dict(max_new_tokens=24, temperature=1.0, num_samples=8, draw=draw)
    control = ms.generate(plain, prompts, key=jax.random.PRNGKey(1), **kw)
    assert (np.asarray(control.tokens) >= REAL).mean() > 0.5  # the rows would be sampled
    out = ms.generate(padded, prompts, key=jax.random.PRNGKey(1), **kw)
    toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
    sampled = np.concatenate([t[:n] for t, n in zip(toks, lens)])
    assert sampled.size == 32 * 24 and sampled.max() < REAL
    # the sampler's log-probs: log-softmax over the real ids of the unmasked logits
    seq = np.concatenate([np.repeat(prompts, 8, axis=0), toks], axis=1)
    ref = _log_softmax(np.asarray(plain(seq))[..., :REAL].astype(np.float64))
    t0 = prompts.shape[1]
    want = np.take_along_axis(ref[:, t0 - 1 : -1], toks[..., None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(out.logprobs), want, atol=2e-4)


def test_learner_log_probs_and_entropy_ignore_the_padding_rows():
    plain, padded = _models()
    tokens = np.random.default_rng(0).integers(0, REAL, (3, 12)).astype(np.int32)
    lp, ent = token_logprobs(padded.config, padded.params, tokens, with_entropy=True)
    logits = np.asarray(plain(tokens)).astype(np.float64)
    ref = _log_softmax(logits[..., :REAL])
    want = np.zeros(tokens.shape)
    want[:, 1:] = np.take_along_axis(ref[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(lp), want, atol=2e-5)
    want_ent = -(np.exp(ref) * ref).sum(-1)
    np.testing.assert_allclose(np.asarray(ent)[:, 1:], want_ent[:, :-1], atol=2e-4)
    masked = np.asarray(padded(tokens))
    assert np.all(masked[..., REAL:] == models.qwen.PADDING_LOGIT)
    np.testing.assert_array_equal(masked[..., :REAL], np.asarray(plain(tokens))[..., :REAL])


def test_without_padding_rows_keeps_the_distribution():
    _, padded = _models()
    trimmed = models.without_padding_rows(padded)
    assert trimmed.config.vocab_size == REAL and trimmed.config.real_vocab_size is None
    tokens = np.arange(3, 15, dtype=np.int32)[None]
    # the head matmul of another width sums in another order on the CPU: float32 round-off
    np.testing.assert_allclose(
        np.asarray(trimmed(tokens)), np.asarray(padded(tokens))[..., :REAL], rtol=0, atol=1e-6
    )
