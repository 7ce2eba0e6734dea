"""AWPO's sequence-level importance ratio (arXiv:2512.19126, Eq. 30 and Algorithm 1) against a
numpy loop: r_b = prod_t pi/pi_old over the response, L_b = min(r_b A_b, clip(r_b, 1-eps, 1+eps)
A_b), J = (1/(GK)) sum_b L_b, loss = -J."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax.learner.losses import aggregation_weights, ppo_clip_loss


def np_awpo_eq30(lp, old, adv, mask, eps, dual_clip=None):
    seq = []
    for b in range(lp.shape[0]):
        if mask[b].sum() == 0:
            continue  # a padding row is no response
        log_r = sum((lp[b, t] - old[b, t]) for t in range(lp.shape[1]) if mask[b, t])
        r = math.exp(log_r)
        a = adv[b]
        o = min(r * a, min(max(r, 1 - eps), 1 + eps) * a)
        if dual_clip is not None and a < 0:
            o = max(o, dual_clip * a)
        seq.append(o)
    return -sum(seq) / len(seq)


def make_case(seed, b=8, t=9):
    rng = np.random.RandomState(seed)
    old = rng.uniform(-3.0, -0.5, (b, t))
    lp = old + rng.choice([-0.3, -0.05, 0.0, 0.02, 0.06, 0.3], size=(b, t))
    adv = rng.randn(b)
    mask = (rng.rand(b, t) < 0.6).astype(np.float64)
    mask[0] = 0.0  # padding row
    mask[1] = 0.0
    mask[1, 4] = 1.0  # a one-token response: sequence ratio == token ratio
    return lp, old, adv, mask


f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_sequence_ratio_matches_eq30_loop(seed, dual_clip):
    lp, old, adv, mask = make_case(seed)
    got, m = ppo_clip_loss(f32(lp), f32(old), f32(adv), f32(mask), clip_eps=0.15,
                           dual_clip=dual_clip, agg="seq-mean-token-mean",
                           ratio_level="sequence")  # fmt: skip
    want = np_awpo_eq30(lp, old, adv, mask, 0.15, dual_clip)
    np.testing.assert_allclose(float(got), want, rtol=2e-5, atol=1e-6)
    # the token-level default is a different objective on the same batch
    tok, _ = ppo_clip_loss(f32(lp), f32(old), f32(adv), f32(mask), clip_eps=0.15,
                           dual_clip=dual_clip, agg="seq-mean-token-mean")  # fmt: skip
    assert abs(float(tok) - want) > 1e-4
    assert np.isfinite(float(m["ratio_mean"]))


def test_sequence_ratio_gradient_and_micro_batches():
    lp, old, adv, mask = make_case(7)

    def loss(x, sl=slice(None), weights=None):
        return ppo_clip_loss(x, f32(old[sl]), f32(adv[sl]), f32(mask[sl]), clip_eps=0.2,
                             agg="seq-mean-token-mean", ratio_level="sequence",
                             token_weights=weights)[0]  # fmt: skip

    g = np.asarray(jax.grad(loss)(f32(lp)))
    # analytic: d(-o_b)/d lp_bt = -(1/N) m_bt r_b A_b when the unclipped branch is active
    n = int((mask.sum(1) > 0).sum())
    want = np.zeros_like(lp)
    for b in range(lp.shape[0]):
        if mask[b].sum() == 0:
            continue
        r = math.exp(float(((lp[b] - old[b]) * mask[b]).sum()))
        a = adv[b]
        clipped = (a > 0 and r > 1.2) or (a < 0 and r < 0.8)
        if not clipped:
            want[b] = -mask[b] * r * a / n
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-6)
    # weights computed once on the whole batch: micro-batches add up to the whole loss exactly
    w = aggregation_weights(f32(mask), "seq-mean-token-mean")
    whole = float(loss(f32(lp)))
    parts = sum(float(loss(f32(lp[i::2]), slice(i, None, 2), w[i::2])) for i in range(2))
    np.testing.assert_allclose(parts, whole, rtol=1e-5)


def test_sequence_ratio_needs_mask_and_valid_level():
    z = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="ratio_level"):
        ppo_clip_loss(z, z, jnp.ones(2), z, ratio_level="group")
    from mojax.learner.losses import ppo_token_terms

    with pytest.raises(ValueError, match="loss_mask"):
        ppo_token_terms(z, z, jnp.ones(2), ratio_level="sequence")
    # a log-ratio sum far beyond the clamp stays finite
    big = jnp.full((1, 3), 30.0)
    loss, _ = ppo_clip_loss(big, jnp.zeros((1, 3)), -jnp.ones(1), jnp.ones((1, 3)),
                            ratio_level="sequence")  # fmt: skip
    assert np.isfinite(float(loss))
