"""``ppo_clip_loss`` against a plain numpy loop written from methods.md ("PPO-clip update").

The loop computes, per token, ``ρ = exp(logπ − logπ_old)``, ``o = min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A)``,
the dual clip ``o = max(o, cA)`` for ``A < 0``, the KL estimators, and aggregates with explicit
per-sequence loops. Cases put ratios inside and outside both bounds (and beyond c) for both signs of
the advantage; the gradient is checked against the analytic one of the same formulas.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax.learner import losses
from mojax.learner.losses import ppo_clip_loss

AGGS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
# log-ratios: far below 1-ε (ρ=0.22), just below, inside, 1, inside, above 1+ε_high, above c=3 (ρ=4.5)
LOG_RATIOS = np.array([-1.5, -0.4, -0.1, 0.0, 0.12, 0.4, 1.5])


def np_k(lp, ref, kl_type):
    q = ref - lp
    if kl_type == "k1":
        return -q
    if kl_type == "k2":
        return 0.5 * q * q
    q = min(max(q, -20.0), 20.0)
    return min(max(math.exp(q) - q - 1.0, -10.0), 10.0)


def np_token_losses(
    lp, old, adv, clip_low, clip_high, dual_clip, ref, kl_coef, kl_type, ent, ent_coef
):
    b_, t_ = lp.shape
    out = np.zeros((b_, t_))
    for b in range(b_):
        for t in range(t_):
            a = adv[b] if adv.ndim == 1 else adv[b, t]
            rho = math.exp(lp[b, t] - old[b, t])
            clipped = min(max(rho, 1.0 - clip_low), 1.0 + clip_high)
            o = min(rho * a, clipped * a)
            if dual_clip is not None and a < 0:
                o = max(o, dual_clip * a)
            loss = -o
            if ref is not None and kl_coef:
                loss += kl_coef * np_k(lp[b, t], ref[b, t], kl_type)
            if ent is not None and ent_coef:
                loss -= ent_coef * ent[b, t]
            out[b, t] = loss
    return out


def np_aggregate(tok, mask, agg, max_len=None):
    b_, t_ = tok.shape
    if agg == "token-mean":
        num = sum(tok[b, t] * mask[b, t] for b in range(b_) for t in range(t_))
        den = sum(mask[b, t] for b in range(b_) for t in range(t_))
        return num / max(den, 1)
    seq_vals = []
    for b in range(b_):
        n_b = sum(mask[b])
        if n_b == 0:
            continue  # sequences without loss tokens are not counted
        s = sum(tok[b, t] * mask[b, t] for t in range(t_))
        if agg == "seq-mean-token-mean":
            s /= n_b
        elif agg == "seq-mean-token-sum-norm":
            s /= t_ if max_len is None else max_len
        seq_vals.append(s)
    return sum(seq_vals) / max(len(seq_vals), 1)


def make_case(seed, b=6, t=14, per_token_adv=False):
    rng = np.random.RandomState(seed)
    old = rng.uniform(-4.0, -0.5, (b, t))
    lr = LOG_RATIOS[rng.randint(0, len(LOG_RATIOS), (b, t))]
    lp = old + lr
    adv = rng.randn(b, t) if per_token_adv else rng.randn(b)
    mask = (rng.rand(b, t) < 0.7).astype(np.float64)
    mask[0] = 0.0  # one sequence without loss tokens
    mask[1, :] = 1.0
    ref = lp + rng.uniform(-2.0, 2.0, (b, t))
    ref[2, 3] = lp[2, 3] + 15.0  # k3 beyond its clamp
    ent = rng.uniform(0.0, 3.0, (b, t))
    return lp, old, adv, mask, ref, ent


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("dual_clip", [None, 3.0])
@pytest.mark.parametrize("per_token_adv", [False, True])
def test_loss_matches_numpy_loop(agg, dual_clip, per_token_adv):
    lp, old, adv, mask, _, _ = make_case(0, per_token_adv=per_token_adv)
    want = np_aggregate(
        np_token_losses(lp, old, adv, 0.2, 0.28, dual_clip, None, 0, "k3", None, 0), mask, agg
    )
    got, metrics = ppo_clip_loss(
        jnp.asarray(lp, jnp.float32),
        jnp.asarray(old, jnp.float32),
        jnp.asarray(adv, jnp.float32),
        jnp.asarray(mask),
        clip_low=0.2,
        clip_high=0.28,
        dual_clip=dual_clip,
        agg=agg,
    )
    np.testing.assert_allclose(float(got), want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(float(metrics["pg_loss"]), want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("kl_type", ["k1", "k2", "k3"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum-norm"])
def test_kl_and_entropy_terms_match_numpy(kl_type, agg):
    lp, old, adv, mask, ref, ent = make_case(1)
    want = np_aggregate(
        np_token_losses(lp, old, adv, 0.2, 0.2, None, ref, 0.05, kl_type, ent, 0.01),
        mask,
        agg,
        max_len=32,
    )
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    got, m = ppo_clip_loss(
        f32(lp), f32(old), f32(adv), f32(mask), clip_low=0.2, clip_high=0.2, agg=agg,
        ref_logprobs=f32(ref), kl_coef=0.05, kl_type=kl_type, entropy=f32(ent),
        entropy_coef=0.01, max_len=32,
    )  # fmt: skip
    np.testing.assert_allclose(float(got), want, rtol=2e-6, atol=1e-6)
    kl_tok = np.array([[np_k(lp[b, t], ref[b, t], kl_type) for t in range(14)] for b in range(6)])
    np.testing.assert_allclose(float(m["kl"]), np_aggregate(kl_tok, mask, agg, 32), rtol=2e-6)
    if kl_type == "k3":
        assert kl_tok.max() == 10.0  # the clamp was exercised


def test_both_advantage_signs_by_hand():
    """The four clip branches, hand-computed (a public JAX framework inverts the A < 0 one)."""
    eps = 0.2
    lr = np.log([[0.5, 1.5, 0.5, 1.5, 4.0]])
    adv = np.array([[-1.0, -1.0, 1.0, 1.0, -1.0]])
    want_tok = np.array([0.8, 1.5, -0.5, -1.2, 4.0])  # −min(ρA, clip(ρ)A)
    mask = np.ones((1, 5), np.float32)
    tok = losses.ppo_token_terms(jnp.asarray(lr, jnp.float32), jnp.zeros((1, 5)), jnp.asarray(adv))
    np.testing.assert_allclose(np.asarray(tok["pg_loss"])[0], want_tok, rtol=1e-6)
    dual = losses.ppo_token_terms(
        jnp.asarray(lr, jnp.float32), jnp.zeros((1, 5)), jnp.asarray(adv), dual_clip=3.0
    )
    np.testing.assert_allclose(
        np.asarray(dual["pg_loss"])[0], [0.8, 1.5, -0.5, -1.2, 3.0], rtol=1e-6
    )
    np.testing.assert_array_equal(np.asarray(tok["clipped_low"])[0], [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(np.asarray(tok["clipped_high"])[0], [0, 0, 0, 1, 0])
    np.testing.assert_array_equal(np.asarray(dual["dual_clipped"])[0], [0, 0, 0, 0, 1])
    # gradient w.r.t. logπ: −Aρ on unclipped tokens, 0 on clipped ones
    g = jax.grad(
        lambda x: ppo_clip_loss(x, jnp.zeros((1, 5)), jnp.asarray(adv[0]).reshape(1, 5), mask,
                                clip_low=eps, clip_high=eps, dual_clip=3.0, agg="seq-mean-token-sum")[0]
    )(jnp.asarray(lr, jnp.float32))  # fmt: skip
    np.testing.assert_allclose(np.asarray(g)[0], [0.0, 1.5, -0.5, 0.0, 0.0], rtol=1e-6)


@pytest.mark.parametrize("agg", AGGS)
def test_gradient_equals_analytic(agg):
    """d loss / d logπ_bt = w_bt (−A ρ [unclipped] + β (1 − e^q) [k3, unclamped] − β_H ∂H)."""
    lp, old, adv, mask, ref, _ = make_case(2)
    ref = lp + np.clip(ref - lp, -2, 2)  # keep k3 inside its clamp (smooth there)
    kl_coef = 0.1
    f32 = lambda x: jnp.asarray(x, jnp.float32)

    def loss(x):
        return ppo_clip_loss(
            x, f32(old), f32(adv), f32(mask), clip_low=0.2, clip_high=0.28, dual_clip=3.0,
            agg=agg, ref_logprobs=f32(ref), kl_coef=kl_coef,
        )[0]  # fmt: skip

    got = np.asarray(jax.grad(loss)(f32(lp)))
    w = np.asarray(losses.aggregation_weights(f32(mask), agg))
    rho = np.exp(lp - old)
    a = adv[:, None] * np.ones_like(lp)
    unclipped = np.where(a > 0, rho <= 1.28, (rho >= 0.8) & (rho <= 3.0))
    q = ref - lp
    want = w * (np.where(unclipped, -a * rho, 0.0) + kl_coef * (1.0 - np.exp(q)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_clip_eps_overrides_both_bounds_and_micro_split_is_exact():
    lp, old, adv, mask, _, _ = make_case(3, b=8)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    a, _ = ppo_clip_loss(f32(lp), f32(old), f32(adv), f32(mask), clip_low=0.1, clip_high=0.5,
                         clip_eps=jnp.float32(0.15))  # fmt: skip
    b, _ = ppo_clip_loss(f32(lp), f32(old), f32(adv), f32(mask), clip_low=0.15, clip_high=0.15)
    assert float(a) == float(b)
    want = np_aggregate(np_token_losses(lp, old, adv, 0.15, 0.15, None, None, 0, "k3", None, 0), mask,
                        "seq-mean-token-mean")  # fmt: skip
    for agg in AGGS:
        w = losses.aggregation_weights(f32(mask), agg)
        whole, _ = ppo_clip_loss(f32(lp), f32(old), f32(adv), f32(mask), agg=agg, clip_eps=0.15)
        parts = sum(
            float(ppo_clip_loss(f32(lp[i::4]), f32(old[i::4]), f32(adv[i::4]), f32(mask[i::4]),
                                clip_eps=0.15, token_weights=w[i::4])[0])
            for i in range(4)
        )  # fmt: skip
        np.testing.assert_allclose(parts, float(whole), rtol=1e-6)
        if agg == "seq-mean-token-mean":
            np.testing.assert_allclose(float(whole), want, rtol=2e-6)


def test_metrics_match_numpy():
    lp, old, adv, mask, _, _ = make_case(4)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    _, m = ppo_clip_loss(f32(lp), f32(old), f32(adv), f32(mask), clip_low=0.2, clip_high=0.28,
                         dual_clip=3.0)  # fmt: skip
    rho = np.exp(lp - old)
    a = adv[:, None] * np.ones_like(lp)
    sel = mask > 0
    np.testing.assert_allclose(
        float(m["clip_frac_high"]), ((a > 0) & (rho > 1.28))[sel].mean(), rtol=1e-6
    )
    np.testing.assert_allclose(
        float(m["clip_frac_low"]), ((a < 0) & (rho < 0.8))[sel].mean(), rtol=1e-6
    )
    np.testing.assert_allclose(
        float(m["dual_clip_frac"]), ((a < 0) & (rho > 3.0))[sel].mean(), rtol=1e-6
    )
    np.testing.assert_allclose(float(m["ratio_mean"]), rho[sel].mean(), rtol=1e-5)
    np.testing.assert_allclose(float(m["ratio_max"]), rho[sel].max(), rtol=1e-5)
    np.testing.assert_allclose(float(m["ratio_min"]), rho[sel].min(), rtol=1e-5)
    d = lp - old
    np.testing.assert_allclose(float(m["approx_kl"]), (np.exp(-d) + d - 1)[sel].mean(), rtol=1e-5)


def test_empty_mask_gives_zero_not_nan():
    z = jnp.zeros((2, 5))
    for agg in AGGS:
        loss, _ = ppo_clip_loss(z, z, jnp.ones(2), z, agg=agg)
        assert float(loss) == 0.0


def test_bad_arguments_are_named():
    z = jnp.zeros((2, 5))
    with pytest.raises(ValueError, match="agg"):
        ppo_clip_loss(z, z, jnp.ones(2), z, agg="token-sum")
    with pytest.raises(ValueError, match="ref_logprobs"):
        ppo_clip_loss(z, z, jnp.ones(2), z, kl_coef=0.1)
    with pytest.raises(ValueError, match="kl_type"):
        ppo_clip_loss(z, z, jnp.ones(2), z, ref_logprobs=z, kl_coef=0.1, kl_type="k4")
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip_loss(z, z, jnp.ones(3), z)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(z, z, jnp.ones(2), z, dual_clip=0.5)
