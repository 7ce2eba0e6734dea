"""Sequence packing: the packed batch's layout, and its loss and gradients equal the unpacked ones
for all four aggregations (``mojax.learner.losses.AGGREGATIONS``), with the default and a constant
sequence count, in the gradient function and through the jitted train step (params after one
update), and for the SFT step."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mojax import learner, models
from mojax import sharding as sharding_lib
from mojax.learner import packing
from mojax.learner import ppo as ppo_lib
from mojax.learner.losses import AGGREGATIONS

CFG = models.get_variant("tiny-qwen3", vocab_size=64)
B, T = 8, 24


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(6, T + 1, B)
    lens[3] = 0  # an empty row (a masked-out episode) packs to nothing
    plen = rng.integers(2, 5, B)
    am = (np.arange(T)[None] < lens[:, None]).astype(np.int32)
    lm = ((np.arange(T)[None] >= plen[:, None]) & (am > 0)).astype(np.float32)
    lm[5] = 0.0  # a row without loss tokens still packs (it only changes no weight)
    return learner.PPOBatch(
        tokens=rng.integers(0, 64, (B, T)).astype(np.int32) * am,
        attention_mask=am,
        loss_mask=lm,
        old_logprobs=((rng.normal(size=(B, T)) * 0.1 - 2.0) * lm).astype(np.float32),
        advantages=rng.normal(size=B).astype(np.float32),
    )


@pytest.fixture(scope="module")
def params():
    return models.init_params(CFG, jax.random.key(0))


def test_pack_batch_layout():
    batch = _batch()
    pk = packing.pack_batch(batch, row_multiple=4)
    assert pk.tokens.shape[0] % 4 == 0 and pk.tokens.shape[0] < B
    lens = batch.attention_mask.sum(1)
    assert pk.attention_mask.sum() == lens.sum()
    assert packing.padding_fraction(pk.attention_mask) < packing.padding_fraction(
        batch.attention_mask
    )
    for r in range(pk.tokens.shape[0]):
        seg, pos = pk.segment_ids[r], pk.positions[r]
        for s in set(seg[seg > 0].tolist()):
            cols = np.flatnonzero(seg == s)
            assert np.array_equal(cols, np.arange(cols[0], cols[0] + len(cols)))  # contiguous
            assert np.array_equal(pos[cols], np.arange(len(cols)))  # positions restart
            # the segment is one original row, tokens and per-token advantage included
            i = next(i for i in range(B) if lens[i] == len(cols)
                     and np.array_equal(batch.tokens[i, : len(cols)], pk.tokens[r, cols]))  # fmt: skip
            assert np.all(pk.advantages[r, cols] == batch.advantages[i])


@pytest.mark.parametrize("agg", AGGREGATIONS)
@pytest.mark.parametrize("num_seqs", [None, 11])
def test_packed_loss_and_grads_equal_unpacked(params, agg, num_seqs):
    batch = _batch()
    pk = packing.pack_batch(batch)
    c = learner.PPOConfig(agg=agg, num_seqs=num_seqs, microbatch_tokens=None)
    as_jnp = lambda d: jax.tree.map(jnp.asarray, d)
    g0, m0 = ppo_lib.ppo_grads(CFG, c, params, as_jnp(batch))
    g1, m1 = ppo_lib.ppo_grads(CFG, c, params, as_jnp(pk))
    np.testing.assert_allclose(m1["loss"], m0["loss"], rtol=1e-5)
    for k in ("pg_loss", "entropy", "clip_frac_high", "ratio_mean", "tokens"):
        np.testing.assert_allclose(m1[k], m0[k], rtol=1e-5, atol=1e-7)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-8)


def _kept_gradient() -> optax.GradientTransformation:
    """An optimizer stage whose state is the gradient it was last given (passed on unchanged)."""
    return optax.GradientTransformation(
        lambda params: jax.tree.map(jnp.zeros_like, params), lambda g, state, params=None: (g, g)
    )


def test_train_step_and_sft_step_on_packed_rows(params):
    """One jitted train step on the packed and the unpacked rows applies the same gradient, read
    from the optimizer's state (``_kept_gradient``, then SGD) with the gradient test's tolerances.
    Weights after an AdamW step would compare something else: its first step divides each
    gradient element by ``|g| + eps``, so an element near 0 turns fp32 summation-order rounding
    into a large change (measured: a q_proj gradient of -4.49e-10 packed vs -4.37e-10 unpacked,
    1.2e-11 apart, moved the weight by 1.1e-6 at lr 1e-3 on one CPU and not on another); and a
    weight difference ``new - old`` is only as exact as the weight's fp32 rounding."""
    mesh = sharding_lib.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    tx = optax.chain(_kept_gradient(), optax.sgd(1e-3))
    batch = _batch(1)
    pk = packing.pack_batch(batch)
    c = learner.PPOConfig(agg="seq-mean-token-mean", shuffle=False, microbatch_tokens=None)
    step = learner.make_train_step(CFG, tx, c, mesh)
    out = []
    for b in (batch, pk):
        state = learner.create_train_state(CFG, tx, mesh=mesh, params=params)
        new, m = step(state, b)
        assert not jax.tree.all(jax.tree.map(lambda x, y: bool((x == y).all()), new.params, params))
        out.append((jax.tree.map(np.asarray, new.opt_state[0]), float(m["loss"])))
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-5)
    assert any(np.abs(g).max() > 0 for g in jax.tree.leaves(out[0][0]))
    for a, b in zip(jax.tree.leaves(out[0][0]), jax.tree.leaves(out[1][0])):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-8)
    sft = learner.make_sft_step(CFG, tx, mesh)
    losses = []
    for b in (batch, pk):
        state = learner.create_train_state(CFG, tx, mesh=mesh, params=params)
        rows = learner.SFTBatch(b.tokens, b.loss_mask, b.attention_mask, b.segment_ids, b.positions)
        losses.append(float(sft(state, rows)[1]["loss"]))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)


def test_pack_batch_keeps_the_batch_class_and_its_scalars():
    """An SFT batch packs to an SFT batch laid out like the PPO batch of the same rows; a scalar
    field (AWPO's ``clip_eps``) is kept; a packed batch is refused, naming its class."""
    batch = dataclasses.replace(_batch(), clip_eps=np.float32(0.15))
    pk = packing.pack_batch(batch)
    sft = packing.pack_batch(learner.SFTBatch(batch.tokens, batch.loss_mask, batch.attention_mask))
    assert type(pk) is learner.PPOBatch and type(sft) is learner.SFTBatch
    assert pk.clip_eps == np.float32(0.15) and pk.advantages.shape == pk.tokens.shape
    for k in ("tokens", "loss_mask", "attention_mask", "segment_ids", "positions"):
        np.testing.assert_array_equal(getattr(sft, k), getattr(pk, k))
    with pytest.raises(ValueError, match="SFTBatch is packed already"):
        packing.pack_batch(sft)
