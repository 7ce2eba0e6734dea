"""The sampler against transformers and against a teacher-forced full forward.

* Greedy ``generate`` == transformers ``generate(do_sample=False)`` token for token, on tiny random
  Qwen2 and Qwen3 checkpoints written by transformers and loaded by ``mojax.models.from_pretrained``,
  with prompts of mixed lengths in one batch (HF runs each prompt alone, unpadded), with and without
  a stop token (HF ``eos_token_id``).
* The sampler's fp32 log-probs == ``log_softmax`` of a full uncached forward over prompt + response
  (teacher forcing), max |diff| <= 1e-4, for "policy" (raw logits) and "sampling" (processed
  distribution, checked with the numpy reference of test_sampling_processors).
"""

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mojax_test_utils import (  # noqa: E402
    build_hf,
    hf_config,
    reference_probs,  # noqa: E402
)

import mojax.models as mm  # noqa: E402
import mojax.sampling as ms  # noqa: E402

LOGPROB_ATOL = 1e-4
N_NEW = 12


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def pair(request, tmp_path_factory):
    """(transformers model, the same weights in mojax) with GQA and random norms/biases."""
    path = tmp_path_factory.mktemp(request.param)
    head_dim = 32 if request.param == "qwen3" else None
    hf = build_hf(hf_config(request.param, 4, 2, tie=False, head_dim=head_dim), seed=3)
    hf.save_pretrained(path)
    return hf, mm.from_pretrained(path, dtype="float32")


def prompts(seed=0, p=4, tp=11, vocab=128):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, vocab, (p, tp)).astype(np.int32)
    lengths = np.array([11, 3, 7, 1][:p], np.int32)
    tokens[np.arange(tp)[None] >= lengths[:, None]] = 0  # right padding
    return tokens, lengths


def hf_greedy(hf, prompt, n_new, eos=None):
    with torch.no_grad():
        out = hf.generate(
            torch.tensor(prompt[None], dtype=torch.long),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            max_new_tokens=n_new,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].numpy()


def test_greedy_equals_transformers_generate(pair):
    hf, model = pair
    tokens, lengths = prompts()
    out = ms.generate(
        model,
        tokens,
        prompt_lengths=lengths,
        key=jax.random.key(0),
        max_new_tokens=N_NEW,
        temperature=0.0,
        num_samples=2,
    )
    got = np.asarray(out.tokens)
    assert got.shape == (8, N_NEW)
    np.testing.assert_array_equal(np.asarray(out.lengths), N_NEW)
    assert out.finish_reason_names() == ["length"] * 8
    for p in range(len(tokens)):
        want = hf_greedy(hf, tokens[p, : lengths[p]], N_NEW)
        for g in range(2):
            np.testing.assert_array_equal(got[2 * p + g], want, f"prompt {p} sample {g}")


def test_greedy_stop_token_equals_transformers_eos(pair):
    hf, model = pair
    tokens, lengths = prompts(seed=1)
    # a stop id that prompt 0 hits at its 4th new token; other rows may or may not hit it
    stop = int(hf_greedy(hf, tokens[0, : lengths[0]], N_NEW)[3])
    out = ms.generate(
        model,
        tokens,
        prompt_lengths=lengths,
        key=jax.random.key(0),
        max_new_tokens=N_NEW,
        temperature=0.0,
        stop_token_ids=(stop,),
        pad_id=-7,
        num_samples=2,
    )
    got, n = np.asarray(out.tokens), np.asarray(out.lengths)
    reasons = out.finish_reason_names()
    for row in range(2 * len(tokens)):
        p = row // 2
        want = hf_greedy(hf, tokens[p, : lengths[p]], N_NEW, eos=stop)
        hits = np.flatnonzero(want == stop)
        k = hits[0] + 1 if hits.size else N_NEW
        assert n[row] == k
        np.testing.assert_array_equal(got[row, :k], want[:k])
        assert (got[row, k:] == -7).all()  # masked after the stop
        assert reasons[row] == ("stop" if hits.size else "length")
    assert n[0] <= 4 and reasons[0] == "stop"


def teacher_forced_logits(model, prompt, response, width=32):
    """fp32 [T_resp, V]: the logits each response token was drawn from, by one uncached forward
    over prompt + response (right-padded to ``width`` so every row reuses one compiled program)."""
    seq = np.concatenate([prompt, response]).astype(np.int32)
    toks = np.zeros((1, width), np.int32)
    toks[0, : len(seq)] = seq
    mask = (np.arange(width) < len(seq)).astype(np.int32)[None]
    logits = np.asarray(model(toks, attention_mask=mask))[0]
    return logits[len(prompt) - 1 : len(seq) - 1]


@pytest.mark.parametrize("mode", ["policy", "sampling"])
def test_logprobs_equal_teacher_forced(pair, mode):
    _, model = pair
    tokens, lengths = prompts(seed=2)
    kw = dict(temperature=0.8, top_k=40, top_p=0.9, min_p=0.02)
    out = ms.generate(
        model,
        tokens,
        prompt_lengths=lengths,
        key=jax.random.key(5),
        max_new_tokens=N_NEW,
        num_samples=3,
        logprobs=mode,
        **kw,
    )
    got, lp, n = np.asarray(out.tokens), np.asarray(out.logprobs), np.asarray(out.lengths)
    assert lp.dtype == np.float32
    worst = 0.0
    for row in range(got.shape[0]):
        p = row // 3
        resp = got[row, : n[row]]
        logits = teacher_forced_logits(model, tokens[p, : lengths[p]], resp).astype(np.float64)
        if mode == "policy":
            ref = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
            want = ref[np.arange(n[row]), resp]
        else:
            probs = np.stack([reference_probs(z, **kw) for z in logits])
            want = np.log(probs[np.arange(n[row]), resp])
        worst = max(worst, float(np.abs(lp[row, : n[row]] - want).max()))
        assert (lp[row, n[row] :] == 0).all()
    assert worst <= LOGPROB_ATOL
