"""Pareto-rank (ParetoPO Stage 2), VPO and Multi-RLVR against numpy loops, plus their properties."""

import importlib
from fractions import Fraction

import jax
import moocore
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mojax.advantages import multi_rlvr, pareto_rank, vpo

vpo_mod = importlib.import_module("mojax.advantages.vpo")
TOL = dict(rtol=2e-5, atol=2e-5)


def np_groupnorm(x, v, eps=1e-6, min_std=None):
    out = np.zeros(len(x))
    idx = np.flatnonzero(v)
    if len(idx) < 2:
        return out
    vals = np.asarray(x, np.float64)[idx]
    sd = (vals - vals[0]).std()
    if min_std is not None and sd < min_std:
        return out
    out[idx] = (vals - vals.mean()) / (sd + eps)
    return out


# ---------------------------------------------------------------- Pareto rank (000 Eqs. 7-9)


def ref_pareto_rank(r, v, w, beta, normalize="none", eps=1e-6):
    p_, g_, _ = r.shape
    out = np.zeros((p_, g_))
    n_fronts = np.zeros(p_, int)
    for p in range(p_):
        idx = np.flatnonzero(v[p])
        if len(idx) < 2:
            continue
        rho = moocore.pareto_rank(-r[p, idx].astype(np.float64)) + 1  # moocore minimises
        n_rank = rho.max()
        n_fronts[p] = n_rank
        # exact rational arithmetic: ties such as 0.6 * 2 == 0.4 * 3 stay ties
        wf = [Fraction(str(x)) for x in w]
        rw = [sum(Fraction(float(x)) * wk for x, wk in zip(r[p, i], wf)) for i in idx]
        a = np.zeros(len(idx))
        for i in range(len(idx)):
            members = [rw[j] for j in range(len(idx)) if rho[j] == rho[i]]
            lo, hi = min(members), max(members)
            r_hat = Fraction(1, 2) if hi == lo else (rw[i] - lo) / (hi - lo)
            a[i] = float((n_rank - rho[i] + 1) + Fraction(str(beta)) * (r_hat - Fraction(1, 2)))
        if normalize == "center":
            a = a - a.mean()
        elif normalize == "zscore":
            a = (a - a.mean()) / (a.std() + eps)
        out[p, idx] = a
    return out, n_fronts


def int_batches(p=4, g=8, m=2, hi=3):
    return st.tuples(
        hnp.arrays(np.float32, (p, g, m), elements=st.integers(0, hi).map(float)),
        hnp.arrays(np.bool_, (p, g), elements=st.booleans()),
    )


@settings(max_examples=40, deadline=None)
@given(
    int_batches(), st.sampled_from([0.1, 0.5, 1.0]), st.sampled_from(["none", "center", "zscore"])
)
def test_pareto_rank_matches_numpy(batch, beta, normalize):
    r, v = batch
    w = (0.6, 0.4)
    out = pareto_rank(r, v, weights=w, beta=beta, normalize=normalize)
    want, n_fronts = ref_pareto_rank(r, v, w, beta, normalize)
    np.testing.assert_allclose(out.advantages, want, **TOL)
    ok = v.sum(-1) >= 2
    if ok.any():
        np.testing.assert_allclose(out.metrics["pareto/num_fronts"], n_fronts[ok].mean(), rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(int_batches(g=8, m=3, hi=2), st.sampled_from([0.25, 0.5, 0.9, 1.0]))
def test_pareto_rank_order_property(batch, beta):
    """A better rank always gets a larger A (strictly for beta < 1; at beta = 1 the extremes of
    neighbouring ranks can meet: A_base + 1 - 1/2 = A_base + 1/2), and |A| <= N_rank + beta/2."""
    r, v = batch
    adv = np.asarray(pareto_rank(r, v, weights=(0.5, 0.3, 0.2), beta=beta).advantages)
    for p in range(r.shape[0]):
        idx = np.flatnonzero(v[p])
        if len(idx) < 2:
            continue
        rho = moocore.pareto_rank(-r[p, idx].astype(np.float64))
        a = adv[p, idx]
        assert np.all(np.abs(a) <= rho.max() + 1 + beta / 2 + 1e-6)
        for i in range(len(idx)):
            for j in range(len(idx)):
                if rho[i] < rho[j]:
                    assert a[i] > a[j] if beta < 1 else a[i] >= a[j]


def test_pareto_rank_examples():
    # (1,1) dominates everything -> rank 1; (1,0) and (0,1) -> rank 2; (0,0) -> rank 3.
    r = np.array([[[1, 1], [1, 0], [0, 1], [0, 0]]], np.float32)
    out = pareto_rank(r, weights=(0.6, 0.4), beta=0.5)
    # rank 2 has r_w 0.6 and 0.4 -> r_hat 1 and 0 -> A = 2 +- 0.25
    np.testing.assert_allclose(out.advantages, [[3.0, 2.25, 1.75, 1.0]])
    assert float(out.metrics["pareto/num_fronts"]) == 3.0
    center = pareto_rank(r, weights=(0.6, 0.4), beta=0.5, normalize="center").advantages
    np.testing.assert_allclose(center, [[1.0, 0.25, -0.25, -1.0]])
    # 0.6 * 2 == 0.4 * 3: an exact tie inside a rank gives r_hat = 0.5, not float32 rounding noise
    tie = np.array([[[0, 3], [2, 0], [0, 0]]], np.float32)
    np.testing.assert_allclose(pareto_rank(tie, beta=0.5).advantages, [[2.0, 2.0, 1.0]])
    with pytest.raises(ValueError, match="weights"):
        pareto_rank(np.zeros((1, 4, 3)))  # default weights are 2-D
    with pytest.raises(ValueError, match="normalize"):
        pareto_rank(r, normalize="minmax")


# ---------------------------------------------------------------- VPO (003 Eq. 1, Sec. 3.2)


def ref_vpo(sr, sv, weights, valid=None, eps=1e-6, min_std=1e-6):
    p_, g_, s_, _ = sr.shape
    valid = np.ones((p_, g_), bool) if valid is None else valid
    reward = np.zeros((p_, g_))
    for p in range(p_):
        for g in range(g_):
            total = 0.0
            for w in np.asarray(weights[p], np.float64):
                best = -np.inf
                for s in range(s_):
                    vec = sr[p, g, s].astype(np.float64) if sv[p, g, s] else np.zeros(sr.shape[-1])
                    best = max(best, float(w @ vec))
                total += best
            reward[p, g] = total / len(weights[p])
    out = np.stack([np_groupnorm(reward[p], valid[p], eps, min_std) for p in range(p_)])
    return out, reward


def random_sets(seed, p=3, g=6, s=3, m=4):
    rng = np.random.default_rng(seed)
    sr = rng.choice([0.0, 0.25, 0.5, 1.0], size=(p, g, s, m)).astype(np.float32)
    sv = rng.random((p, g, s)) < 0.8
    return sr, sv


@pytest.mark.parametrize("seed", range(4))
def test_vpo_matches_numpy(seed):
    sr, sv = random_sets(seed)
    key = jax.random.key(seed)
    out = vpo(sr, sv, key=key, num_weights=16)
    w = np.asarray(vpo_mod.dirichlet_weights(key, 3, 16, 4))
    want, reward = ref_vpo(sr, sv, w)
    np.testing.assert_allclose(out.advantages, want, **TOL)
    np.testing.assert_allclose(out.metrics["vpo/set_reward/mean"], reward.mean(), rtol=1e-5)


def test_vpo_properties():
    sr, sv = random_sets(11)
    sv[:] = True
    key = jax.random.key(5)
    one = sr[:, :, :1]
    # a set of S identical answers scores the same as that single answer
    same = np.repeat(one, 3, axis=2)
    np.testing.assert_array_equal(
        vpo(same, None, key=key).advantages, vpo(one, None, key=key).advantages
    )
    # permuting the answers within each set changes nothing
    rng = np.random.default_rng(0)
    perm = np.stack([[rng.permutation(3) for _ in range(6)] for _ in range(3)])
    shuffled = np.take_along_axis(sr, perm[..., None], axis=2)
    np.testing.assert_allclose(
        vpo(shuffled, None, key=key).advantages, vpo(sr, None, key=key).advantages, atol=1e-6
    )
    # same key -> same weights and advantages; a new key -> new weights
    w1 = vpo_mod.dirichlet_weights(key, 3, 100, 4)
    np.testing.assert_array_equal(w1, vpo_mod.dirichlet_weights(key, 3, 100, 4))
    assert (
        np.abs(
            np.asarray(w1) - np.asarray(vpo_mod.dirichlet_weights(jax.random.key(6), 3, 100, 4))
        ).max()
        > 0.01
    )
    np.testing.assert_array_equal(
        vpo(sr, None, key=key).advantages, vpo(sr, None, key=key).advantages
    )
    # a set that adds a specialist answer scores at least as high (max over the set)
    r_base = vpo(sr[:, :, :1], None, key=key).metrics["vpo/set_reward/mean"]
    r_more = vpo(sr, None, key=key).metrics["vpo/set_reward/mean"]
    assert r_more >= r_base
    # flat group (all sets identical) -> 0 for the whole group (authors' code)
    flat = np.broadcast_to(sr[:, :1], sr.shape).copy()
    np.testing.assert_array_equal(vpo(flat, None, key=key).advantages, 0.0)


def test_dirichlet_weights_distribution():
    key = jax.random.key(0)
    for alpha in (1.0, 0.5):
        w = np.asarray(vpo_mod.dirichlet_weights(key, 64, 1000, 4, alpha)).reshape(-1, 4)
        assert np.all(w >= 0) and np.allclose(w.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(w.mean(0), 0.25, atol=0.01)
        var = 0.25 * 0.75 / (4 * alpha + 1)  # Var of a Dir(alpha 1_4) coordinate
        np.testing.assert_allclose(w.var(0), var, rtol=0.05)


def test_vpo_bad_input():
    sr, sv = random_sets(0)
    with pytest.raises(ValueError, match="key"):
        vpo(sr, sv, key=None)
    with pytest.raises(ValueError, match="set_rewards must have shape"):
        vpo(sr[..., 0], None, key=jax.random.key(0))
    with pytest.raises(ValueError, match="num_weights"):
        vpo(sr, sv, key=jax.random.key(0), num_weights=0)
    with pytest.raises(ValueError, match="valid"):
        vpo(sr, sv, key=jax.random.key(0), valid=np.ones((3, 5), bool))


# ---------------------------------------------------------------- Multi-RLVR


def ref_multi_rlvr(sr, sv, w, dedup=True, ids=None):
    p_, g_, s_, _ = sr.shape
    reward = np.zeros((p_, g_))
    for p in range(p_):
        for g in range(g_):
            seen, total = [], 0.0
            for s in range(s_):  # VPO footnote 1: (1/S) sum over the S slots
                if not sv[p, g, s]:
                    continue  # a missing answer scores 0 and stays in the denominator
                ident = ids[p, g, s] if ids is not None else tuple(sr[p, g, s])
                if dedup and ident in seen:
                    continue  # a repeat scores 0 and stays in the denominator
                seen.append(ident)
                total += float(sr[p, g, s].astype(np.float64) @ w)
            reward[p, g] = total / s_
    return np.stack([np_groupnorm(reward[p], np.ones(g_, bool)) for p in range(p_)])


@pytest.mark.parametrize("seed", range(3))
def test_multi_rlvr_matches_numpy(seed):
    sr, sv = random_sets(seed, s=4)
    sr[:, :, 1] = sr[:, :, 0]  # force duplicates
    w = np.full(4, 0.25)
    for dedup in (True, False):
        np.testing.assert_allclose(
            multi_rlvr(sr, sv, dedup=dedup).advantages, ref_multi_rlvr(sr, sv, w, dedup), **TOL
        )
    ids = np.random.default_rng(seed).integers(0, 3, size=sr.shape[:3])
    np.testing.assert_allclose(
        multi_rlvr(sr, sv, answer_ids=ids).advantages, ref_multi_rlvr(sr, sv, w, True, ids), **TOL
    )
    with pytest.raises(ValueError, match="answer_ids"):
        multi_rlvr(sr, sv, answer_ids=ids[..., :2])


def test_multi_rlvr_duplicates_score_like_empty_slots():
    """Issue 13 (1): three copies of an answer score like that answer plus two empty slots.

    Rollouts (S = 3, uniform w*): three copies of the best answer (w*.r = 1), the best answer plus
    two empty slots, three distinct answers (1, 0.5, 0.25). Set rewards (1/S) sum over slots:
    1/3, 1/3 and 7/12 (the old code gave 1.0, 0.333, 0.583: deduplication rewarded duplicates).
    """
    best, mid, low = np.ones(4), np.full(4, 0.5), np.full(4, 0.25)
    sr = np.zeros((1, 3, 3, 4), np.float32)
    sr[0, 0] = [best, best, best]
    sr[0, 1, 0] = best
    sr[0, 2] = [best, mid, low]
    sv = np.ones((1, 3, 3), bool)
    sv[0, 1, 1:] = False
    set_reward = np.array([1 / 3, 1 / 3, 7 / 12])
    want = (set_reward - set_reward.mean()) / (set_reward.std() + 1e-6)
    out = multi_rlvr(sr, sv)
    np.testing.assert_allclose(out.advantages[0], want, **TOL)
    assert out.advantages[0, 0] == out.advantages[0, 1]
    np.testing.assert_allclose(out.metrics["multi_rlvr/set_reward/mean"], 5 / 12, rtol=1e-6)
    # without dedup the copies count: 1.0 for the three copies
    nodedup = np.array([1.0, 1 / 3, 7 / 12])
    want = (nodedup - nodedup.mean()) / (nodedup.std() + 1e-6)
    np.testing.assert_allclose(multi_rlvr(sr, sv, dedup=False).advantages[0], want, **TOL)
    # identity by answer_ids: slot 2 repeats slot 0 -> scores 0
    ids = np.array([[[0, 1, 0], [0, 1, 2], [0, 1, 2]]])
    sr2 = sr.copy()
    sr2[0, 0, 1] = mid
    r2 = np.array([1.5 / 3, 1 / 3, 7 / 12])
    want = (r2 - r2.mean()) / (r2.std() + 1e-6)
    np.testing.assert_allclose(multi_rlvr(sr2, sv, answer_ids=ids).advantages[0], want, **TOL)


def test_rollouts_without_a_valid_answer_stay_in_the_group_and_the_loss():
    """Issue 13 (2), estimator side: a rollout whose S answers are all missing is a valid rollout
    with set reward 0 (VPO authors' code, methods.md). It takes part in the group statistics and
    gets a (negative) advantage that must reach the loss; only ``valid=False`` (no rollout at
    all, e.g. padding) removes it."""
    sr = np.zeros((1, 4, 2, 2), np.float32)
    sr[0, :3] = [[1.0, 1.0], [0.5, 0.5]]
    sv = np.ones((1, 4, 2), bool)
    sv[0, 3] = False  # rollout 3: no parseable answer
    for name, out in (
        ("vpo", vpo(sr, sv, key=jax.random.key(0), num_weights=8)),
        ("multi_rlvr", multi_rlvr(sr, sv)),
    ):
        adv = np.asarray(out.advantages)[0]
        assert adv[3] < 0 and np.all(adv[:3] > 0), name
        np.testing.assert_allclose(adv.sum(), 0.0, atol=1e-5)
    # the set rewards are 0.75 (mean of 1 and 0.5, uniform w*) and 0 -> z-scores by hand
    r = np.array([0.75, 0.75, 0.75, 0.0])
    want = (r - r.mean()) / (r.std() + 1e-6)
    np.testing.assert_allclose(multi_rlvr(sr, sv).advantages[0], want, **TOL)
    masked = multi_rlvr(sr, sv, valid=np.array([[True, True, True, False]]))
    np.testing.assert_array_equal(masked.advantages, 0.0)  # the 3 others are identical
