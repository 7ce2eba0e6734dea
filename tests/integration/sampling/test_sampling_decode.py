"""Decode-loop behaviour: stops, budgets, masking, resumption, buckets / recompiles, segments.

References: a plain greedy loop over the uncached full forward (``greedy_reference``, numpy
argmax per step, itself independent of the cache path), decoding the concatenated sequence from
scratch for resumption, and a teacher-forced full forward for log-probs (fp32, <= 1e-4).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
import mojax.sampling as ms
from mojax.sampling import buckets, decode

ATOL = 1e-4
WIDTH = 112  # the reference forward pads every sequence to this width (one compile)
# Shared static shapes (R response slots, S cache slots) and sampling settings, so that tests reuse
# compiled programs: XLA compiles dominate this file's runtime on CPU.
SHAPES = dict(max_response_len=80, max_total_len=96)
SAMPLED = dict(
    temperature=1.0, top_p=0.95, num_samples=2
)  # the reference forward pads every sequence to this width (one compile)


@pytest.fixture(scope="module")
def model():
    return mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)


def next_logits(model, seqs):
    """fp32 [N, V] logits after each sequence (right-padded to WIDTH, uncached forward)."""
    toks = np.zeros((len(seqs), WIDTH), np.int32)
    mask = np.zeros((len(seqs), WIDTH), np.int32)
    for i, s in enumerate(seqs):
        toks[i, : len(s)], mask[i, : len(s)] = s, 1
    logits = np.asarray(model(toks, attention_mask=mask))
    return logits[np.arange(len(seqs)), [len(s) - 1 for s in seqs]]


def greedy_reference(model, prompt, max_new, stops=()):
    seq, out = list(prompt), []
    for _ in range(max_new):
        t = int(np.argmax(next_logits(model, [seq])[0]))
        seq.append(t)
        out.append(t)
        if t in stops:
            return out, "stop"
    return out, "length"


def teacher_forced_logprobs(model, prompt, response):
    seq = np.concatenate([prompt, response]).astype(np.int32)
    toks = np.zeros((1, WIDTH), np.int32)
    toks[0, : len(seq)] = seq
    mask = (np.arange(WIDTH) < len(seq)).astype(np.int32)[None]
    logits = np.asarray(model(toks, attention_mask=mask))[0].astype(np.float64)
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    pos = np.arange(len(prompt) - 1, len(seq) - 1)
    return logp[pos, response]


def batch(seed, p=3, tp=10, lengths=(10, 4, 7)):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, 256, (p, tp)).astype(np.int32)
    lengths = np.asarray(lengths, np.int32)
    return tokens, lengths


def test_per_row_stop_sets_and_budgets_finish_rows_at_different_steps(model):
    tokens, lengths = batch(0)
    free = [greedy_reference(model, tokens[p, : lengths[p]], 12)[0] for p in range(3)]
    # per-prompt stop sets (-1 = unused): prompt 0 stops on its 3rd token, prompt 1 on its 6th,
    # prompt 2 has no stop id it produces and a budget of 8
    stops = np.array([[free[0][2], -1], [free[1][5], 300], [-1, -1]], np.int32)
    budgets = np.array([12, 12, 8], np.int32)
    out = ms.generate(
        model,
        tokens,
        prompt_lengths=lengths,
        key=jax.random.key(0),
        max_new_tokens=budgets,
        temperature=0.0,
        stop_token_ids=stops,
        pad_id=255,
        **SHAPES,
    )
    toks, n = np.asarray(out.tokens), np.asarray(out.lengths)
    assert toks.shape == (3, 80)
    for p in range(3):
        ref, reason = greedy_reference(
            model, tokens[p, : lengths[p]], int(budgets[p]), set(stops[p][stops[p] >= 0].tolist())
        )
        assert n[p] == len(ref) and out.finish_reason_names()[p] == reason
        np.testing.assert_array_equal(toks[p, : n[p]], ref)
        assert (toks[p, n[p] :] == 255).all()
        assert (
            np.asarray(out.loss_mask)[p, : n[p]].all()
            and not np.asarray(out.loss_mask)[p, n[p] :].any()
        )
    assert n.tolist()[:2] == [free[0].index(free[0][2]) + 1, free[1].index(free[1][5]) + 1]
    assert n[2] == 8 and np.asarray(out.finish_reason).tolist()[2] == ms.LENGTH
    np.testing.assert_array_equal(np.asarray(out.last_tokens)[:2], stops[:2, 0])


def test_full_cache_ends_rows_with_length(model):
    tokens, lengths = batch(1)
    out = ms.generate(
        model, tokens, prompt_lengths=lengths, key=jax.random.key(0), max_new_tokens=10,
        max_total_len=16 + 5, temperature=0.0,
    )  # fmt: skip
    np.testing.assert_array_equal(np.asarray(out.lengths), 5)
    assert out.finish_reason_names() == ["length"] * 3


def test_deterministic_for_a_key_and_samples_differ(model):
    tokens, lengths = batch(2)
    kw = dict(prompt_lengths=lengths, max_new_tokens=8, **SAMPLED, **SHAPES)
    a = ms.generate(model, tokens, key=jax.random.key(3), **kw)
    b = ms.generate(model, tokens, key=jax.random.key(3), **kw)
    c = ms.generate(model, tokens, key=jax.random.key(4), **kw)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_array_equal(np.asarray(a.logprobs), np.asarray(b.logprobs))
    assert (np.asarray(a.tokens) != np.asarray(c.tokens)).any()
    assert (np.asarray(a.tokens)[0] != np.asarray(a.tokens)[1]).any()  # the G samples of prompt 0


def test_segmented_decode_equals_full_cache_decode(model, monkeypatch):
    tokens, lengths = batch(3)
    kw = dict(prompt_lengths=lengths, key=jax.random.key(9), max_new_tokens=75, **SAMPLED, **SHAPES)
    assert ms.segment_caps(16, 96) == (64, 96)  # the run crosses a segment boundary
    a = ms.generate(model, tokens, **kw)
    b = ms.generate(model, tokens, segmented=False, **kw)
    fine = functools.partial(buckets.segment_caps, granularity=8)
    assert fine(16, 96, growth=1.1) == (64, 72, 80, 88, 96)
    monkeypatch.setattr(buckets, "segment_caps", fine)
    c = ms.generate(model, tokens, segment_growth=1.1, **kw)  # four segment boundaries
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(c.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(c.logprobs), np.asarray(b.logprobs), atol=1e-5)
    assert np.asarray(a.lengths).min() == 75


def test_resume_after_append_equals_decoding_from_scratch(model):
    tokens, lengths = batch(4)
    free = greedy_reference(model, tokens[0, : lengths[0]], 8)[0]
    k0 = next(i for i in range(2, 8) if free[i] not in free[:i])
    stop = free[k0]  # row 0 stops on a "tool call" stop id after k0 + 1 tokens
    kw = dict(temperature=0.0)
    out = ms.generate(
        model, tokens, prompt_lengths=lengths, key=jax.random.key(0), max_new_tokens=8,
        stop_token_ids=(stop,), pad_id=1000, **SHAPES, **kw,
    )  # fmt: skip
    first_tokens, first_n = np.asarray(out.tokens).copy(), np.asarray(out.lengths).copy()
    assert first_n[0] == k0 + 1 and out.finish_reason_names()[0] == "stop"
    rng = np.random.RandomState(0)
    obs = rng.randint(0, 256, (3, 6)).astype(np.int32)
    obs_len = np.array([5, 0, 3], np.int32)
    resume = np.array([True, False, True])  # row 1 stays finished; row 2 resumes after "length"
    out2 = ms.append_and_continue(
        model, out.state, obs, obs_len, resume, max_new_tokens=np.array([7, 7, 5]), **kw
    )
    toks, n = np.asarray(out2.tokens), np.asarray(out2.lengths)
    mask = np.asarray(out2.loss_mask)
    # row 1 untouched
    np.testing.assert_array_equal(toks[1], first_tokens[1])
    assert (toks[1, n[1] :] == 1000).all() and (toks[0, n[0] :] == 1000).all()  # pad_id >= V
    assert n[1] == first_n[1]
    for row in (0, 2):
        prefix = np.concatenate([first_tokens[row, : first_n[row]], obs[row, : obs_len[row]]])
        np.testing.assert_array_equal(toks[row, : len(prefix)], prefix)
        assert mask[row, : first_n[row]].all() and not mask[row, first_n[row] : len(prefix)].any()
        context = np.concatenate([tokens[row, : lengths[row]], prefix])
        padded = np.zeros((1, 64 - 8), np.int32)  # one prompt shape for both rows: one compile
        padded[0, : len(context)] = context
        scratch = ms.generate(
            model, padded, prompt_lengths=[len(context)],
            key=jax.random.key(0), max_new_tokens=[7, 7, 5][row], stop_token_ids=(stop,),
            max_response_len=8, max_total_len=64, **kw,
        )  # fmt: skip
        k = int(scratch.lengths[0])
        np.testing.assert_array_equal(
            toks[row, len(prefix) : n[row]], np.asarray(scratch.tokens)[0, :k]
        )
        assert n[row] == len(prefix) + k
        assert mask[row, len(prefix) : n[row]].all()
        np.testing.assert_allclose(
            np.asarray(out2.logprobs)[row, len(prefix) : n[row]],
            np.asarray(scratch.logprobs)[0, :k],
            atol=ATOL,
        )
        assert out2.finish_reason_names()[row] == scratch.finish_reason_names()[0]


def test_sampled_multi_turn_logprobs_equal_teacher_forced(model):
    tokens, lengths = batch(5)
    out = ms.generate(
        model, tokens, prompt_lengths=lengths, key=jax.random.key(1), max_new_tokens=6,
        **SAMPLED, **SHAPES,
    )  # fmt: skip
    rng = np.random.RandomState(1)
    for turn in range(2):
        obs = rng.randint(0, 256, (6, 4)).astype(np.int32)
        obs_len = rng.randint(1, 5, 6).astype(np.int32)
        resume = np.arange(6) % 3 != turn
        out = ms.append_and_continue(
            model, out.state, obs, obs_len, resume, max_new_tokens=5, temperature=1.0, top_k=50
        )
    toks, n = np.asarray(out.tokens), np.asarray(out.lengths)
    lp, mask = np.asarray(out.logprobs), np.asarray(out.loss_mask)
    for row in range(6):
        p = row // 2
        ref = teacher_forced_logprobs(model, tokens[p, : lengths[p]], toks[row, : n[row]])
        m = mask[row, : n[row]]
        assert m.sum() >= 6 and (~m).sum() >= 1
        assert np.abs(lp[row, : n[row]][m] - ref[m]).max() <= ATOL
        assert (lp[row, : n[row]][~m] == 0).all()
    # the design.md rollout batch (mojax.rl.step): prompt + response per row, masks aligned
    from mojax.rl.step import assemble_batch

    prompts = [list(tokens[p, : lengths[p]]) for p in range(3)]
    rb = assemble_batch(prompts, 2, toks, lp, mask, n, 10 + 80, advantages=np.zeros(6))
    for row in range(6):
        p, k = row // 2, lengths[row // 2]
        want = np.zeros(10 + 80, np.int32)
        want[:k], want[k : k + n[row]] = tokens[p, :k], toks[row, : n[row]]
        np.testing.assert_array_equal(rb.tokens[row], want)
        want_mask = np.zeros(90, bool)
        want_mask[k : k + n[row]] = mask[row, : n[row]]
        np.testing.assert_array_equal(rb.loss_mask[row] > 0, want_mask)
        np.testing.assert_array_equal(
            rb.old_logprobs[row][want_mask], lp[row, : n[row]][mask[row, : n[row]]]
        )
        assert int(rb.attention_mask[row].sum()) == k + n[row]


def count_backend_compiles():
    events = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, _d, **_kw: (
            events.append(name) if name.endswith("backend_compile_duration") else None
        )
    )
    return events


def test_no_recompilation_across_prompt_lengths_in_one_bucket(model):
    rng = np.random.RandomState(6)
    kw = dict(key=jax.random.key(0), max_new_tokens=6, **SAMPLED, **SHAPES)

    def call(width, lengths):
        toks = rng.randint(0, 256, (3, width)).astype(np.int32)
        return ms.generate(model, toks, prompt_lengths=np.asarray(lengths), **kw)

    out = call(5, [5, 2, 4])  # bucket 16
    before = decode._generate_jit._cache_size()
    events = count_backend_compiles()
    call(9, [9, 1, 6])
    out = call(16, [13, 16, 1])
    assert events == [] and decode._generate_jit._cache_size() == before
    call(17, [17, 3, 5])  # bucket 32: one new program
    assert decode._generate_jit._cache_size() == before + 1
    # appends of observations of different lengths inside one bucket (8) do not recompile either
    resume = np.array([True, False, True, True, False, True])
    cont = dict(max_new_tokens=5, temperature=1.0, top_k=50)
    out = ms.append_and_continue(model, out.state, np.ones((6, 3), np.int32), [3, 0, 1, 2, 0, 3],
                                 resume, **cont)  # fmt: skip
    n_before = decode._continue_jit._cache_size()
    del events[:]
    ms.append_and_continue(model, out.state, np.ones((6, 7), np.int32), [7, 0, 6, 5, 0, 1],
                           resume, **cont)  # fmt: skip
    assert events == [] and decode._continue_jit._cache_size() == n_before


def test_bf16_cache(model):
    tokens, lengths = batch(7)
    out = ms.generate(
        model, tokens, prompt_lengths=lengths, key=jax.random.key(2), max_new_tokens=6,
        cache_dtype=jnp.bfloat16, temperature=1.0,
    )  # fmt: skip
    assert out.state.cache.k.dtype == jnp.bfloat16 and out.state.cache.v.dtype == jnp.bfloat16
    toks, n, lp = np.asarray(out.tokens), np.asarray(out.lengths), np.asarray(out.logprobs)
    for p in range(3):
        ref = teacher_forced_logprobs(model, tokens[p, : lengths[p]], toks[p, : n[p]])
        # k/v rounded to bf16 (8-bit mantissa): logits move by ~1e-3 on this model
        assert np.abs(lp[p, : n[p]] - ref).max() <= 2e-2


def test_bad_inputs_raise_clear_errors(model):
    tokens, lengths = batch(8)
    kw = dict(key=jax.random.key(0), max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt_lengths"):
        ms.generate(model, tokens, prompt_lengths=[0, 3, 3], **kw)
    with pytest.raises(ValueError, match="prompt_tokens"):
        ms.generate(model, tokens + 300, **kw)
    with pytest.raises(ValueError, match="prompt_tokens"):
        ms.generate(model, tokens[0], **kw)
    with pytest.raises(ValueError, match="num_samples"):
        ms.generate(model, tokens, num_samples=0, **kw)
    with pytest.raises(ValueError, match="max_new_tokens"):
        ms.generate(model, tokens, key=jax.random.key(0), max_new_tokens=[1, 0, 2])
    with pytest.raises(ValueError, match="stop_token_ids"):
        ms.generate(model, tokens, stop_token_ids=np.ones((5, 2), np.int32), **kw)
    with pytest.raises(ValueError, match="top_p"):
        ms.generate(model, tokens, top_p=1.5, **kw)
    out = ms.generate(
        model,
        tokens,
        prompt_lengths=lengths,
        temperature=0.0,
        max_new_tokens=10,
        max_total_len=16 + 5,
        key=jax.random.key(0),
    )  # as in the full-cache test
    with pytest.raises(ValueError, match="obs_tokens"):
        ms.append_and_continue(
            model, out.state, np.ones((2, 3)), [1, 1], [True, True], max_new_tokens=2
        )
    with pytest.raises(ValueError, match="max_total_len"):
        ms.append_and_continue(
            model, out.state, np.ones((3, 3)), [3, 1, 1], [True] * 3, max_new_tokens=2
        )
    with pytest.raises(ValueError, match="max_response_len"):
        out = ms.generate(model, tokens, prompt_lengths=lengths, max_total_len=64, **kw)
        ms.append_and_continue(
            model, out.state, np.ones((3, 3)), [3, 1, 1], [True] * 3, max_new_tokens=2
        )
