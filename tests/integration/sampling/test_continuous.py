"""Continuous batching (``mojax.sampling.continuous.engine``), per-row random streams, ``min_new_tokens``
and ``force_stop_at``.

References: the static in-graph sampler (``mojax.sampling.generate`` / ``append_and_continue``) on
the same key, and a greedy loop over the uncached full forward with the stop ids masked in numpy
(``min_new_tokens`` as transformers' ``MinNewTokensLengthLogitsProcessor`` defines it). Tokens,
lengths, finish reasons and loss masks must be equal; log-probs agree to 1e-5 (XLA CPU's matmuls
round differently for different row counts: a 1-row product takes another kernel than a 2-row one,
and a resumed row is prefilled from its whole context instead of appended chunk by chunk).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mojax_test_utils import continuous_prompts as prompts
from mojax_test_utils import continuous_scene
from mojax_test_utils import same_sampling_output as assert_same

import mojax.models as mm
import mojax.sampling as ms
from mojax.sampling.continuous.engine import ContinuousSampler

SHAPES = dict(max_response_len=64, max_total_len=128, num_samples=2)
STOPS = (5, 17, 33)


@pytest.fixture(scope="module")
def model():
    return mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)


@pytest.mark.parametrize("num_slots", [3, 8])  # 1 slot: the paged test
def test_continuous_equals_static_over_turns(model, num_slots):
    """Fewer (or as many) slots than rows, per-row budgets, stop ids, a forced stop, two appended
    turns at temperature 1: the same tokens as the static sampler."""
    toks, kw, turns, refs = continuous_scene(model, STOPS, SHAPES)
    sampler = ContinuousSampler.of(model, slots=num_slots)
    got = sampler.generate(toks, **kw)
    assert_same(got, refs[0])
    assert len(set(np.asarray(refs[0].lengths).tolist())) > 3  # rows of many lengths
    for (obs, obs_len, resume, more), ref in zip(turns, refs[1:]):
        got = sampler.append_and_continue(got.state, obs, obs_len, resume, **more)
        assert_same(got, ref)


def test_refill_ends_fewer_segments_with_the_same_tokens(model, monkeypatch):
    """``refill``: a segment ends once 3 slots have freed (not at the first): fewer segments, the
    static sampler's tokens (appended turns: ``test_continuous_equals_static_over_turns``, which
    runs the same loop)."""
    from mojax.sampling.continuous import slots as slots_lib

    toks, kw, _, refs = continuous_scene(model, STOPS, SHAPES)
    counts, segment = [], slots_lib.segment

    def counting(*args, **kwargs):
        counts[-1] += 1
        return segment(*args, **kwargs)

    monkeypatch.setattr(slots_lib, "segment", counting)
    for refill in (1, 3):
        counts.append(0)
        sampler = ContinuousSampler.of(model, slots=3, refill=refill)
        assert_same(sampler.generate(toks, **kw), refs[0])
    assert counts[1] < counts[0], counts
    with pytest.raises(ValueError, match="1 <= refill <= slots"):
        ContinuousSampler(model.config, slots=2, refill=3)


def test_a_rows_tokens_do_not_depend_on_the_batch(model):
    """Per-row random streams: the rows of a sub-batch (same row ids) draw the same tokens."""
    toks, lens = prompts()
    kw = dict(key=jax.random.key(5), temperature=1.0, max_new_tokens=30, **SHAPES)
    full = ms.generate(model, toks, prompt_lengths=lens, **kw)
    part = ms.generate(model, toks[:2], prompt_lengths=lens[:2], **kw)
    np.testing.assert_array_equal(np.asarray(part.tokens), np.asarray(full.tokens)[:4])
    np.testing.assert_allclose(
        np.asarray(part.logprobs), np.asarray(full.logprobs)[:4], atol=1e-5, rtol=0
    )
    other = ms.generate(model, toks, prompt_lengths=lens, **{**kw, "key": jax.random.key(6)})
    assert (np.asarray(other.tokens) != np.asarray(full.tokens)).any()


def full_logits(model, seq, width=64):
    """The uncached forward's next-token logits after ``seq``, run right-padded to ``width``
    (causal: the padding comes after the position read) so every call has one shape."""
    x = np.zeros((1, width), np.int32)
    x[0, : len(seq)] = seq
    return np.asarray(model(jnp.asarray(x)))[0, len(seq) - 1].astype(np.float64)


def test_min_new_tokens_equals_a_masked_greedy_loop(model):
    """Greedy with ``min_new_tokens``: the stop ids are masked until the row has that many new
    tokens (reference: numpy argmax over the uncached forward, stop logits set to -inf)."""
    toks, lens = prompts(2)
    first = [int(np.argmax(full_logits(model, toks[p, : lens[p]]))) for p in range(4)]
    stops = sorted(set(first))  # every row would stop on its first token
    min_new = np.asarray([0, 3, 6, 9])
    out = ms.generate(
        model,
        toks,
        key=jax.random.key(0),
        temperature=0.0,
        prompt_lengths=lens,
        num_samples=1,
        max_new_tokens=12,
        stop_token_ids=stops,
        min_new_tokens=min_new,
        max_response_len=64,
        max_total_len=128,
    )
    for p in range(4):
        seq, want = list(toks[p, : lens[p]]), []
        for n in range(12):
            z = full_logits(model, seq)
            if n < min_new[p]:
                z[stops] = -np.inf
            t = int(np.argmax(z))
            seq.append(t)
            want.append(t)
            if t in stops:
                break
        n = int(np.asarray(out.lengths)[p])
        assert np.asarray(out.tokens)[p, :n].tolist() == want, p
        assert n >= min(min_new[p] + 1, 12)


def test_force_stop_at_ends_rows_at_the_drawn_length(model):
    toks, lens = prompts(3)
    at = np.asarray([1, 7, 20, 33, 2, 9, 15, 40])
    out = ms.generate(
        model,
        toks,
        key=jax.random.key(1),
        temperature=1.0,
        prompt_lengths=lens,
        max_new_tokens=40,
        stop_token_ids=[[9, 4], [11, -1], [9, 4], [12, 13]],
        min_new_tokens=at - 1,
        force_stop_at=at,
        **SHAPES,
    )
    lengths, tokens = np.asarray(out.lengths), np.asarray(out.tokens)
    np.testing.assert_array_equal(lengths, at)
    np.testing.assert_array_equal(np.asarray(out.finish_reason), np.full(8, ms.STOP))
    first_stop = np.repeat([9, 11, 9, 12], 2)
    np.testing.assert_array_equal(tokens[np.arange(8), at - 1], first_stop)
    row_stops = np.repeat([[9, 4], [11, -1], [9, 4], [12, 13]], 2, axis=0)
    for b in range(8):  # none of the row's stop ids before the forced one
        assert not np.isin(tokens[b, : at[b] - 1], row_stops[b]).any()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(min_new_tokens=-1), "must be >= 0"),
        (dict(force_stop_at=11), "force_stop_at needs"),  # past max_new_tokens
        (dict(force_stop_at=3, min_new_tokens=3), "force_stop_at needs"),
        (dict(force_stop_at=3, stop_token_ids=()), "force_stop_at needs"),
        (dict(min_new_tokens=[1, 2, 3]), "min_new_tokens must be"),
    ],
)
def test_bad_stop_controls_raise(model, kw, match):
    toks, lens = prompts()
    args = dict(key=jax.random.key(0), max_new_tokens=10, stop_token_ids=STOPS, prompt_lengths=lens)
    with pytest.raises(ValueError, match=match):
        ms.generate(model, toks, **{**args, **kw})
    with pytest.raises(ValueError, match=match):
        ContinuousSampler.of(model, slots=2).generate(toks, **{**args, **kw})


def test_continuous_sampler_refuses_bad_sizes_and_unknown_arguments(model):
    """(A mesh's refusals: ``test_continuous_mesh.py``.)"""
    with pytest.raises(ValueError, match="slots must be >= 1"):
        ContinuousSampler(model.config, slots=0)
    toks, _ = prompts()
    with pytest.raises(TypeError, match="unexpected arguments"):
        ContinuousSampler.of(model, slots=2).generate(
            toks, key=jax.random.key(0), max_new_tokens=4, bogus=1
        )


@pytest.mark.parametrize("chunk", [1, 3])
def test_prompts_are_prefilled_in_chunks_as_their_rows_enter(model, monkeypatch, chunk):
    """``prefill_prompts``: each chunk of prompts is prefilled once, when its first row enters a
    slot; at most two chunks are held at once (a placement that spans a boundary); the tokens are
    the static sampler's."""
    from mojax.sampling.continuous.rows import PromptPrefill

    toks, lens = prompts()  # 4 prompts x 2 samples
    kw = dict(key=jax.random.key(4), temperature=1.0, prompt_lengths=lens, max_new_tokens=12)
    kw.update(SHAPES)
    ref = ms.generate(model, toks, **kw)
    calls, get = [], PromptPrefill.get

    def recording(self, m, c):
        fresh = c not in self.live
        out = get(self, m, c)
        calls.append((c, fresh, len(self.live)))
        return out

    monkeypatch.setattr(PromptPrefill, "get", recording)
    got = ContinuousSampler.of(model, slots=2, prefill_prompts=chunk).generate(toks, **kw)
    assert_same(got, ref)
    fresh = [c for c, new, _ in calls if new]
    assert fresh == list(range(-(-4 // chunk)))  # every chunk prefilled once, in order
    assert max(n for _, _, n in calls) <= 2


def test_the_compute_dtype_copy_samples_the_same_tokens():
    """``compute_copy`` (the weights a per-process engine holds: fp32 master weights cast to the
    bf16 compute dtype) gives the same tokens and log-probs as the fp32 weights: every use casts
    a weight to the compute dtype."""
    cfg = mm.get_variant("tiny-qwen3", dtype="bfloat16", param_dtype="float32")
    params = mm.init_params(cfg, jax.random.key(2))
    sampler = ContinuousSampler(cfg, slots=4)
    copy = sampler.compute_copy(params)
    leaves = jax.tree.leaves(copy)
    assert all(x.dtype == jnp.bfloat16 for x in leaves)
    assert sum(x.nbytes for x in leaves) * 2 == sum(x.nbytes for x in jax.tree.leaves(params))
    toks, lens = prompts()
    kw = dict(key=jax.random.key(8), temperature=1.0, prompt_lengths=lens, max_new_tokens=16)
    kw.update(SHAPES)
    sampler.update_weights(params)
    ref = sampler.generate(toks, **kw)
    sampler.update_weights(copy)
    got = sampler.generate(toks, **kw)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(ref.tokens))
    np.testing.assert_array_equal(np.asarray(got.logprobs), np.asarray(ref.logprobs))


def test_the_dense_cache_is_held_at_the_segment_cap(model, monkeypatch):
    """Each segment decodes a cache as wide as its ``cap`` (no copy in or out; the rows' tokens:
    ``test_continuous_equals_static_over_turns``), and ``slots.resize`` keeps the first slots or
    pads invalid ones, against numpy."""
    from mojax.sampling.continuous import slots as slots_lib

    toks, lens = prompts()
    kw = dict(SHAPES, key=jax.random.key(3), temperature=1.0, prompt_lengths=lens)
    kw.update(max_new_tokens=60, min_new_tokens=50, stop_token_ids=STOPS)  # outgrow the first cap
    widths, segment = [], slots_lib.segment

    def recording(m, s, *args, **kwargs):
        widths.append((s.cache.max_len, kwargs["cap"], kwargs["max_len"]))
        return segment(m, s, *args, **kwargs)

    monkeypatch.setattr(slots_lib, "segment", recording)
    assert_same(
        ContinuousSampler.of(model, slots=3).generate(toks, **kw), ms.generate(model, toks, **kw)
    )
    c = SHAPES["max_total_len"]
    assert widths and all(w == cap and full == c for w, cap, full in widths), widths
    caps = [cap for _, cap, _ in widths]
    assert any(a > b for a, b in zip(caps, caps[1:])) and any(a < b for a, b in zip(caps, caps[1:]))

    s = slots_lib.empty_slots(model, 3, 8, c, 2)
    rng = np.random.default_rng(0)
    fill = lambda a: jnp.asarray(rng.standard_normal(a.shape), a.dtype) if a.ndim > 2 else a
    s = s.replace(cache=jax.tree.map(fill, s.cache))
    s = s.replace(cache=s.cache.replace(slot_mask=jnp.asarray(rng.random((3, c)) < 0.5)))
    axes = {"k": 3, "v": 2} if isinstance(s.cache.k, tuple) else {"k": 2, "v": 2}
    for width in (48, c + 32):
        got = slots_lib.resize(s, width).cache
        for name, axis in (*axes.items(), ("slot_mask", 1)):
            for want, have in zip(jax.tree.leaves(getattr(s.cache, name)),
                                  jax.tree.leaves(getattr(got, name))):  # fmt: skip
                want = np.asarray(want)
                pad = [(0, 0)] * want.ndim
                pad[axis] = (0, max(width - c, 0))
                want = np.pad(want, pad).take(np.arange(width), axis=axis)
                np.testing.assert_array_equal(np.asarray(have), want)
        np.testing.assert_array_equal(np.asarray(got.end), np.asarray(s.cache.end))
