"""The PPO train step and SFT step on one device: log-probs and cross-entropy against transformers,
exact gradient accumulation, one trace across steps, the NaN guard and batch validation.

Reference model: a random-weight transformers ``Qwen3ForCausalLM`` saved to safetensors and loaded
by ``mojax.models.from_pretrained``; its torch log-softmax is the independent reference for the
aligned token log-probs and the SFT loss.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from mojax_test_utils import build_hf, hf_config  # noqa: E402

import mojax.models as mm  # noqa: E402
from mojax import learner  # noqa: E402
from mojax import sharding as shl  # noqa: E402

B, T = 8, 16


@pytest.fixture(scope="module")
def hf_and_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_rl")
    hf = build_hf(hf_config("qwen3", 4, 2, tie=False, head_dim=16), seed=3)
    hf.save_pretrained(path)
    return hf, mm.from_pretrained(path)


@pytest.fixture(scope="module")
def mesh():
    return shl.make_mesh(1, 1, 1, devices=jax.devices()[:1])


def rollout_batch(seed, vocab=128, b=B, t=T):
    """A rollout-contract batch: prompt 5 tokens, responses of varied length, right padding."""
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, vocab, (b, t)).astype(np.int32)
    ends = rng.randint(7, t + 1, (b,))
    pos = np.arange(t)[None]
    attention = (pos < ends[:, None]).astype(np.int32)
    tokens = tokens * attention
    loss_mask = ((pos >= 5) & (pos < ends[:, None])).astype(np.float32)
    old = np.where(loss_mask > 0, -4.9 + 0.3 * rng.randn(b, t), 0.0).astype(np.float32)
    return learner.PPOBatch(
        tokens=tokens,
        attention_mask=attention,
        loss_mask=loss_mask,
        old_logprobs=old,
        advantages=rng.randn(b).astype(np.float32),
    )


def torch_logprobs(hf, tokens, mask):
    with torch.no_grad():
        logits = hf(
            input_ids=torch.tensor(tokens, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
        ).logits.double()
    logp = torch.log_softmax(logits, -1)
    lp = torch.gather(logp[:, :-1], -1, torch.tensor(tokens[:, 1:], dtype=torch.long)[..., None])[
        ..., 0
    ]
    ent = -(logp.exp() * logp).sum(-1)[:, :-1]
    pad = np.zeros((tokens.shape[0], 1))
    return np.concatenate([pad, lp.numpy()], 1), np.concatenate([pad, ent.numpy()], 1)


@pytest.mark.parametrize("chunk", [None, 5])
def test_token_logprobs_match_transformers(hf_and_model, chunk):
    hf, model = hf_and_model
    batch = rollout_batch(0)
    want_lp, want_ent = torch_logprobs(hf, batch.tokens, batch.attention_mask)
    fn = jax.jit(lambda p, t, m: learner.token_logprobs(model.config, p, t, m, chunk_size=chunk,
                                                   with_entropy=True))  # fmt: skip
    lp, ent = fn(model.params, batch.tokens, batch.attention_mask)
    valid = np.concatenate([np.zeros((B, 1)), batch.attention_mask[:, 1:]], 1) > 0
    assert np.abs(np.where(valid, np.asarray(lp) - want_lp, 0)).max() < 2e-5
    assert np.abs(np.where(valid, np.asarray(ent) - want_ent, 0)).max() < 2e-5
    assert np.all(np.asarray(lp)[:, 0] == 0.0)


def test_chunks_nobody_needs_are_skipped_and_used_values_unchanged(hf_and_model):
    """``need`` (the loss mask) skips every chunk of positions no row needs: the needed log-probs
    still match transformers, the skipped positions are 0, and the gradient of a loss on the needed
    positions equals the unskipped one (chunks of 3 over T = 16: the mask below leaves chunks 0,
    1 and 4 without a needed position)."""
    hf, model = hf_and_model
    batch = rollout_batch(4)
    need = np.zeros((B, T), bool)
    need[:, 7:9] = True
    need[2, 10] = True
    want_lp, _ = torch_logprobs(hf, batch.tokens, batch.attention_mask)

    def lps(p, skip):
        return learner.token_logprobs(model.config, p, jnp.asarray(batch.tokens), chunk_size=3,
                                 need=jnp.asarray(need) if skip else None)[0]  # fmt: skip

    full, skipped = np.asarray(lps(model.params, False)), np.asarray(lps(model.params, True))
    real = need & (batch.attention_mask > 0)  # torch's padded positions differ (masked there)
    assert real.sum() > 8 and np.abs(np.where(real, skipped - want_lp, 0)).max() < 2e-5
    np.testing.assert_array_equal(skipped[need], full[need])
    # positions 1..6 (hidden 0..5, chunks 0-1) and 13.. (hidden 12.., chunk 4..) were not projected
    assert np.all(skipped[:, :7] == 0) and np.all(skipped[:, 13:] == 0)
    assert np.all(full[:, 1:7] != 0)

    def loss(p, skip):
        return jnp.sum(jnp.where(need, lps(p, skip), 0.0) ** 2)

    g_full = jax.grad(loss)(model.params, False)
    g_skip = jax.grad(loss)(model.params, True)
    for a, b in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_skip)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-7)


def test_logprob_fn_offloaded_equals_on_device(hf_and_model, mesh):
    _, model = hf_and_model
    batch = rollout_batch(1)
    p_sh = mm.param_shardings(model.config, mesh, shl.logical_axis_rules())
    want = learner.make_logprob_fn(model.config, mesh)(model.params, batch.tokens)
    host_params, offloaded = shl.offload(model.params, p_sh)
    got = learner.make_logprob_fn(model.config, mesh, offloaded=offloaded)(
        host_params, batch.tokens
    )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    direct = learner.token_logprobs(model.config, model.params, jnp.asarray(batch.tokens))[0]
    np.testing.assert_allclose(np.asarray(got), np.asarray(direct), atol=1e-6)


def test_grad_accumulation_4_micro_equals_one_batch(hf_and_model, mesh):
    """Σ of 4 micro-batch gradients == the gradient of the whole batch.

    Tolerance (fp32): per leaf ``max|Δg| ≤ 1e-5 · max|g|`` (observed ≤ 2e-6; merely permuting the
    rows of the one big batch moves the gradient by ~3e-7 of its scale, through matmul blocking).
    A wrong aggregation weight would move it by O(1e-1).
    """
    hf, model = hf_and_model
    batch = rollout_batch(2)
    lp, _ = torch_logprobs(hf, batch.tokens, batch.attention_mask)
    ref = (lp + 0.05 * np.random.RandomState(0).randn(B, T)).astype(np.float32)
    batch = dataclasses.replace(batch, ref_logprobs=ref)
    kw = dict(agg="seq-mean-token-mean", kl_coef=0.05, entropy_coef=0.01, dual_clip=3.0)
    g1, m1 = learner.make_grad_fn(model.config, learner.PPOConfig(**kw), mesh)(model.params, batch)
    g4, m4 = learner.make_grad_fn(model.config, learner.PPOConfig(num_microbatches=4, **kw), mesh)(
        model.params, batch
    )
    keys = ("loss", "pg_loss", "kl", "entropy", "clip_frac_low", "ratio_mean", "ratio_min",
            "ratio_max", "tokens")  # fmt: skip
    for k in keys:
        np.testing.assert_allclose(float(m4[k]), float(m1[k]), rtol=1e-5, atol=1e-7, err_msg=k)
    flat1, flat4 = jax.tree.leaves(g1), jax.tree.leaves(g4)
    for a, b in zip(flat1, flat4):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
    assert float(jnp.sqrt(sum(jnp.sum(g**2) for g in flat1))) > 1e-3  # a real gradient


def test_train_step_traces_once_counts_updates_and_guards_nan(hf_and_model, mesh):
    _, model = hf_and_model
    opt = learner.OptimizerConfig(
        learning_rate=1e-3, schedule="cosine", warmup_steps=2, total_steps=20
    )
    tx = learner.make_optimizer(opt)
    cfg = learner.PPOConfig(clip_high=0.28, ppo_epochs=2, num_minibatches=2, num_microbatches=2)
    step = learner.make_train_step(
        model.config, tx, cfg, mesh, lr_schedule=learner.make_schedule(opt)
    )
    state = learner.create_train_state(model.config, tx, seed=0, mesh=mesh, params=model.params)
    rngs = [np.asarray(state.rng)]
    for i in range(3):
        batch = rollout_batch(10 + i)
        if i == 1:
            adv = batch.advantages.astype(np.float64)  # host dtype differs
            batch = dataclasses.replace(batch, advantages=adv)
        state, metrics = step(state, batch)
        rngs.append(np.asarray(state.rng))
        assert float(metrics["num_updates"]) == 4.0 and float(metrics["skipped_updates"]) == 0.0
        assert all(np.isfinite(float(v)) for v in metrics.values())
    assert step.trace_count == 1
    assert int(state.step) == 12
    assert len({r.tobytes() for r in rngs}) == 4
    np.testing.assert_allclose(
        float(metrics["learning_rate"]), float(learner.make_schedule(opt)(11))
    )

    # NaN guard: a non-finite advantage poisons the one mini-batch holding that row (per epoch)
    bad = rollout_batch(20)
    bad = dataclasses.replace(bad, advantages=np.where(np.arange(B) == 3, np.nan, bad.advantages))
    state, metrics = step(state, bad)
    assert float(metrics["skipped_updates"]) == 2.0 and int(state.step) == 14
    # ... and every mini-batch when all rows are bad: params / optimizer state stay bitwise equal
    before = jax.tree.map(np.asarray, state)
    bad = dataclasses.replace(bad, advantages=np.full(B, np.inf, np.float32))
    state, metrics = step(state, bad)
    assert float(metrics["skipped_updates"]) == 4.0
    assert not np.isfinite(float(metrics["grad_norm"]))
    jax.tree.map(
        np.testing.assert_array_equal, jax.tree.map(np.asarray, state.params), before.params
    )
    jax.tree.map(
        np.testing.assert_array_equal, jax.tree.map(np.asarray, state.opt_state), before.opt_state
    )
    assert int(state.step) == 14 and step.trace_count == 1


def test_batch_validation_names_the_field(hf_and_model, mesh):
    _, model = hf_and_model
    tx = learner.make_optimizer(learner.OptimizerConfig())
    step = learner.make_train_step(model.config, tx, learner.PPOConfig(kl_coef=0.1), mesh)
    batch = rollout_batch(0)
    with pytest.raises(ValueError, match="missing required field.*ref_logprobs"):
        step.check_batch(batch)
    batch = dataclasses.replace(batch, ref_logprobs=batch.old_logprobs)
    with pytest.raises(TypeError, match="takes a PPOBatch .*got dict"):
        step.check_batch(batch.arrays())
    with pytest.raises(TypeError, match="rewards"):
        learner.PPOBatch(**batch.arrays(), rewards=batch.advantages)
    with pytest.raises(ValueError, match=r"PPOBatch\.old_logprobs must have the shape of tokens"):
        step.check_batch(dataclasses.replace(batch, old_logprobs=batch.old_logprobs[:, :-1]))
    with pytest.raises(ValueError, match=r"PPOBatch\.advantages must be \[B\]=8"):
        step.check_batch(dataclasses.replace(batch, advantages=batch.advantages[:-1]))
    with pytest.raises(ValueError, match=r"PPOBatch\.clip_eps must be a scalar"):
        step.check_batch(dataclasses.replace(batch, clip_eps=np.ones(3)))
    sft = learner.make_sft_step(model.config, tx, mesh)
    with pytest.raises(TypeError, match="takes a SFTBatch .*got PPOBatch"):
        sft.check_batch(batch)
    step3 = learner.make_train_step(model.config, tx, learner.PPOConfig(num_minibatches=3), mesh)
    with pytest.raises(ValueError, match="multiple of 3"):
        step3.check_batch(batch)
    with pytest.raises(ValueError, match="agg"):
        learner.PPOConfig(agg="sum")
    with pytest.raises(ValueError, match="clip_hihg"):
        learner.PPOConfig.from_config({"clip_hihg": 0.3})
    with pytest.raises(ValueError, match="total_steps"):
        learner.OptimizerConfig(schedule="cosine", warmup_steps=10, total_steps=5)


def test_sft_step_loss_is_torch_cross_entropy(hf_and_model, mesh):
    hf, model = hf_and_model
    batch = rollout_batch(5)
    tokens, mask = batch.tokens, batch.loss_mask
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor(tokens, dtype=torch.long)).logits.double()
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]),
        torch.tensor(tokens[:, 1:], dtype=torch.long).reshape(-1),
        reduction="none",
    ).reshape(B, T - 1)
    want = float((ce * torch.tensor(mask[:, 1:])).sum() / mask.sum())
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=3e-3))
    state = learner.create_train_state(model.config, tx, mesh=mesh, params=model.params)
    sft = learner.make_sft_step(model.config, tx, mesh, num_microbatches=2)
    losses = []
    for _ in range(3):
        state, m = sft(state, learner.SFTBatch(tokens=tokens, loss_mask=mask))
        losses.append(float(m["loss"]))
    np.testing.assert_allclose(losses[0], want, rtol=2e-6)
    assert losses[2] < losses[0] and int(state.step) == 3 and sft.trace_count == 1


@pytest.mark.parametrize(
    "packed,mode,remat",
    [(False, "rows", True), (True, "rows", True), (True, "batch", True), (True, "batch", False)],
)
def test_compact_logprobs_leave_the_ppo_gradient_unchanged(hf_and_model, mesh, packed, mode, remat):
    """``ppo.logprob_compact`` (loss positions gathered per row, projected in chunks of 3) gives
    the loss, metrics and gradient of the plain whole-sequence projection, on right-padded rows
    and on packed rows (several sequences per row), with the chunks' logits recomputed in the
    backward or kept from the forward (``ppo.logprob_remat``). Tolerance as in the accumulation
    test: the projections differ only by matmul blocking (observed ~1e-7 of the scale)."""
    from mojax.learner import packing

    _, model = hf_and_model
    batch = rollout_batch(4)
    if packed:
        batch = packing.pack_batch(batch, width=2 * T)
    kw = dict(agg="seq-mean-token-mean", entropy_coef=0.01, shuffle=False)
    plain = learner.PPOConfig(**kw)
    compact = learner.PPOConfig(logprob_chunk=3, logprob_compact=mode, logprob_remat=remat, **kw)
    g1, m1 = learner.make_grad_fn(model.config, plain, mesh)(model.params, batch)
    g2, m2 = learner.make_grad_fn(model.config, compact, mesh)(model.params, batch)
    for k in ("loss", "pg_loss", "entropy", "ratio_mean", "tokens"):
        np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-7, err_msg=k)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_compact_needs_a_chunk():
    with pytest.raises(ValueError, match="ppo.logprob_compact"):
        learner.PPOConfig(logprob_compact="rows")
    with pytest.raises(ValueError, match="ppo.logprob_compact"):
        learner.PPOConfig(logprob_compact="all", logprob_chunk=8)
