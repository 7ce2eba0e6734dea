"""The mismatch measurement and the corrections (``mojax.learner.correction``), the recompute of
π_old (``mojax.learner.recompute``) and the update's importance weights, against numpy references
written from the formulas and a random-weight transformers model.

The peer golden values (verl, Tunix) are in ``tests/integration/conformance/test_conf_rollout_correction.py``.
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
from mojax.config import ConfigError  # noqa: E402
from mojax.learner import correction as corr  # noqa: E402


def _random(seed, b=6, t=9, scale=0.7):
    rng = np.random.RandomState(seed)
    behave = -rng.rand(b, t) * 3
    old = behave + scale * rng.randn(b, t)
    mask = (rng.rand(b, t) < 0.7).astype(np.float32)
    mask[0] = 0.0  # a row without loss tokens
    return old.astype(np.float32), behave.astype(np.float32), mask


def _np_metrics(old, behave, mask, low, high):
    d = np.clip(old.astype(np.float64) - behave, -20, 20)[mask > 0]
    rho = np.exp(d)
    return {
        "kl_k3": np.mean(rho - d - 1),
        "kl_k1": np.mean(-d),
        "ratio_mean": rho.mean(),
        "ratio_p99": np.percentile(rho, 99),
        "ratio_min": rho.min(),
        "ratio_max": rho.max(),
        "frac_outside": np.mean((rho < low) | (rho > high)),
        "logprob_abs_diff": np.mean(np.abs(d)),
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mismatch_metrics_match_numpy(seed):
    old, behave, mask = _random(seed)
    got = jax.jit(lambda *a: corr.mismatch_metrics(*a, low=0.7, high=1.4))(old, behave, mask)
    want = _np_metrics(old, behave, mask, 0.7, 1.4)
    for k, v in want.items():
        assert float(got[k]) == pytest.approx(v, rel=2e-5, abs=1e-6), k


@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_masked_quantile_is_numpys_linear_percentile(q):
    rng = np.random.RandomState(3)
    x, m = rng.randn(7, 11).astype(np.float32), rng.rand(7, 11) < 0.4
    got = float(corr.masked_quantile(jnp.asarray(x), jnp.asarray(m), q))
    assert got == pytest.approx(np.percentile(x[m], 100 * q), rel=1e-5, abs=1e-6)
    assert float(corr.masked_quantile(jnp.asarray(x), jnp.zeros_like(m), q)) == 0.0


def _np_correct(old, behave, mask, cfg):
    """Weights and the kept mask from the formulas, per row and token (float64 loops)."""
    d = np.clip(old.astype(np.float64) - behave, -20, 20)
    w, keep = np.ones_like(d), np.ones_like(d, dtype=bool)
    for b in range(d.shape[0]):
        on = mask[b] > 0
        n = max(on.sum(), 1)
        g = np.exp(np.clip(d[b][on].sum() / n, -20, 20))
        s = np.exp(np.clip(d[b][on].sum(), -20, 20))
        for t in range(d.shape[1]):
            rho = np.exp(d[b, t])
            if cfg.is_level == "token":
                w[b, t] = min(rho, cfg.is_cap)
            elif cfg.is_level == "sequence":
                w[b, t] = min(s, cfg.is_cap)
            if cfg.reject == "token":
                keep[b, t] = cfg.low <= rho <= cfg.high
            elif cfg.reject == "geometric":
                keep[b, t] = cfg.low <= g <= cfg.high
    return w * mask, mask * keep


@pytest.mark.parametrize("is_level", corr.IS_LEVELS)
@pytest.mark.parametrize("reject", corr.REJECTS)
def test_every_correction_matches_the_formulas(is_level, reject):
    old, behave, mask = _random(4, scale=0.4)
    cfg = corr.CorrectionConfig(is_level=is_level, is_cap=1.5, reject=reject, low=0.8, high=1.25)
    w, m, metrics = jax.jit(lambda *a: corr.correct(*a, cfg))(old, behave, mask)
    want_w, want_m = _np_correct(old, behave, mask, cfg)
    np.testing.assert_array_equal(np.asarray(m), want_m)
    if is_level == "none":
        assert w is None and "is_weight_mean" not in metrics
    else:
        np.testing.assert_allclose(np.asarray(w), want_w, rtol=1e-5, atol=1e-7)
    dropped = (mask > 0) & (want_m == 0)
    assert float(metrics["masked_token_frac"]) == pytest.approx(dropped.sum() / mask.sum())


def test_correction_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"config.rollout_correction.is_level: 'tokn'"):
        corr.CorrectionConfig(is_level="tokn")
    with pytest.raises(ConfigError, match=r"config.rollout_correction.high: 0.5 must exceed"):
        corr.CorrectionConfig(low=0.5, high=0.5)
    with pytest.raises(ConfigError, match=r"config.rollout_correction.is_cap"):
        corr.CorrectionConfig(is_cap=0.0)


@pytest.fixture(scope="module")
def hf_and_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_corr")
    hf = build_hf(hf_config("qwen3", 4, 2, tie=False, head_dim=16), seed=5)
    hf.save_pretrained(path)
    return hf, mm.from_pretrained(path)


def _batch(seed, b=8, t=16, vocab=128):
    rng = np.random.RandomState(seed)
    ends = rng.randint(8, t + 1, (b,))
    pos = np.arange(t)[None]
    attention = (pos < ends[:, None]).astype(np.int32)
    loss_mask = ((pos >= 5) & (pos < ends[:, None])).astype(np.float32)
    return {
        "tokens": (rng.randint(0, vocab, (b, t)) * attention).astype(np.int32),
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "advantages": rng.randn(b).astype(np.float32),
    }


def _torch_logprobs(hf, tokens, mask):
    with torch.no_grad():
        logits = hf(
            input_ids=torch.tensor(tokens, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
        ).logits.double()
    logp = torch.log_softmax(logits, -1)
    idx = torch.tensor(tokens[:, 1:], dtype=torch.long)[..., None]
    lp = torch.gather(logp[:, :-1], -1, idx)[..., 0].numpy()
    return np.concatenate([np.zeros((tokens.shape[0], 1)), lp], 1)


def test_recompute_puts_the_learners_logprobs_and_measures_the_sampler(hf_and_model):
    """π_old = transformers' log-probs (fp64 reference); the sampler's log-probs (here the reference
    shifted by a known log-ratio on every third loss token) stay the behaviour policy: the mismatch
    metrics are those of the shift, and the token mask drops exactly the shifted tokens."""
    hf, model = hf_and_model
    mesh = shl.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    rules = shl.logical_axis_rules()
    batch = _batch(0)
    ref = _torch_logprobs(hf, batch["tokens"], batch["attention_mask"]) * batch["loss_mask"]
    shift = np.zeros_like(ref)
    shift[:, 5::3] = np.log(3.0)  # μ = π_old / 3 there: ratio 3
    behave = ((ref - shift) * batch["loss_mask"]).astype(np.float32)
    cfg = corr.CorrectionConfig(reject="token", low=0.5, high=2.0)
    fn = learner.make_recompute_fn(model.config, mesh, rules, cfg, chunk_size=5)
    out, metrics = fn(model.params, learner.PPOBatch(**batch, old_logprobs=behave))
    assert isinstance(out, learner.PPOBatch)
    on = batch["loss_mask"] > 0
    np.testing.assert_allclose(np.asarray(out.old_logprobs)[on], ref[on], atol=2e-5)
    assert float(np.abs(np.asarray(out.old_logprobs)[~on]).max()) == 0.0
    shifted = on & (shift > 0)
    assert float(metrics["mismatch/frac_outside"]) == pytest.approx(shifted.sum() / on.sum())
    assert float(metrics["mismatch/ratio_max"]) == pytest.approx(3.0, rel=1e-4)
    np.testing.assert_array_equal(np.asarray(out.loss_mask), on & ~shifted)
    want_k3 = np.mean(np.where(shifted, 3.0 - np.log(3.0) - 1, 0.0)[on])
    assert float(metrics["mismatch/kl_k3"]) == pytest.approx(want_k3, rel=1e-3, abs=1e-6)
    assert out.is_weights is None  # is_level="none": masking only


def test_update_reads_the_importance_weights(hf_and_model):
    """``is_weights`` = 1 is the plain update bitwise; = 0 makes the policy term vanish (no gradient:
    the AdamW update is 0 and the params stay); = 2 doubles the gradient of the PPO-clip term."""
    _, model = hf_and_model
    mesh = shl.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    rules = shl.logical_axis_rules()
    rows = _batch(1)
    old = np.where(rows["loss_mask"] > 0, -4.8, 0.0).astype(np.float32)
    batch = learner.PPOBatch(**rows, old_logprobs=old)
    cfg = learner.PPOConfig(shuffle=False)
    grad = learner.make_grad_fn(model.config, cfg, mesh, rules)
    params = jax.device_put(model.params, mm.param_shardings(model.config, mesh, rules))
    g0, m0 = grad(params, batch)
    ones = np.ones_like(batch.loss_mask)
    g1, m1 = grad(params, dataclasses.replace(batch, is_weights=ones))
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    g2, _ = grad(params, dataclasses.replace(batch, is_weights=2 * ones))
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g2)):
        np.testing.assert_allclose(np.asarray(b), 2 * np.asarray(a), rtol=1e-5, atol=1e-9)
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-2, weight_decay=0.0))
    step = learner.make_train_step(model.config, tx, cfg, mesh, rules)
    state = learner.create_train_state(model.config, tx, mesh=mesh, rules=rules, params=params)
    before = jax.tree.map(np.asarray, state.params)
    state, metrics = step(state, dataclasses.replace(batch, is_weights=0 * ones))
    assert float(metrics["update_norm"]) == 0.0
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(a, np.asarray(b))
