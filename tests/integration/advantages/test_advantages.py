"""GRPO-family, GDPO, MO-GRPO, SAW and AWPO against independent numpy loops written from the
seed equations, plus edge cases, bad input and trace counts for every estimator."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mojax.advantages import (
    ESTIMATORS,
    AdvantageOutput,
    awpo,
    dr_grpo,
    gdpo,
    grpo,
    mo_grpo,
    random_w,
    saw_gdpo,
    saw_grpo,
)

EPS = 1e-6
TOL = dict(rtol=2e-5, atol=2e-5)
GRID = [-1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0]  # dyadic values: exact float32 sums


# ---------------------------------------------------------------- numpy references (loops)


def np_groupnorm(x, v, eps=EPS, ddof=0, scale=True):
    """z-score of one group's valid entries; zeros elsewhere and for < 2 valid samples."""
    out = np.zeros(len(x))
    idx = np.flatnonzero(v)
    if len(idx) < 2:
        return out
    vals = np.asarray(x, np.float64)[idx]
    dev = vals - vals.mean()
    out[idx] = dev / (vals.std(ddof=ddof) + eps) if scale else dev
    return out


def ref_grpo(r, v, w, ddof=0, scale_by_std=True, scale=None):
    """002 Eq. 1 + Eq. 3 (GRPO) / Dr.GRPO; ``w`` is [M] or [P, M]."""
    p_, g_, _ = r.shape
    w = np.broadcast_to(np.asarray(w, np.float64), (p_, r.shape[-1]))
    scale = np.ones((p_, g_)) if scale is None else np.broadcast_to(scale, (p_, g_))
    out = np.zeros((p_, g_))
    for p in range(p_):
        s = np.array([np.dot(r[p, g], w[p]) * scale[p, g] for g in range(g_)])
        out[p] = np_groupnorm(s, v[p], ddof=ddof, scale=scale_by_std)
    return out


def ref_gdpo(r, v, w, batch_norm=True, token_counts=None, eps=EPS, return_std=False):
    """002 Eqs. 5-7: per-objective group z-scores, weighted sum, batch normalisation."""
    p_, g_, m_ = r.shape
    a = np.zeros((p_, g_))
    keep = np.zeros((p_, g_), bool)
    for p in range(p_):
        if v[p].sum() < 2:
            continue
        for k in range(m_):
            a[p] += w[k] * np_groupnorm(r[p, :, k], v[p], eps)
        keep[p] = v[p]
    if batch_norm and keep.any():
        wt = np.ones((p_, g_)) if token_counts is None else np.asarray(token_counts, np.float64)
        vals, ww = a[keep], wt[keep]
        mu = (ww * vals).sum() / ww.sum()
        sd = np.sqrt((ww * (vals - mu) ** 2).sum() / ww.sum())
        a[keep] = (vals - mu) / (sd + eps)
        return (a, sd) if return_std else a
    return (a, np.inf) if return_std else a


def well_conditioned(sd):
    """Eq. 7 divides by ``std + eps``. When the batch std of ``A_sum`` is itself at the 1e-6 scale
    (z-scores that cancel to ~1e-6, e.g. two objectives with opposite ranks), the float32 result
    is dominated by rounding of that cancellation, so the float64 loop is compared only when
    ``std >> eps`` (the advantages are still checked finite and bounded)."""
    return sd > 1e-3


def ref_saw_weights(r, v, reward_min, priorities, fallback, advantage_mode, delta=1e-8):
    """002 Algorithm 1 over all valid samples of the batch."""
    m_ = r.shape[-1]
    rows = r[v]
    cv = np.zeros(m_)
    for k in range(m_):
        lo = rows[:, k].min() if reward_min is None or reward_min[k] is None else reward_min[k]
        rt = rows[:, k] - lo + delta
        cv[k] = (rt - rt[0]).std() / (rt.mean() + delta)  # std is shift-free; exact 0 if constant
    total = cv.sum()
    if total < delta and fallback:
        omega = np.ones(m_)
    else:
        omega = cv / total if total > 0 else np.zeros(m_)
        if advantage_mode:
            omega = omega * m_
    prio = np.ones(m_) if priorities is None else np.asarray(priorities)
    return omega * prio, cv


def ref_awpo(r, v, r_max, eps_mix=0.5, tau_low=0.2, tau_high=0.8, alpha_base=1.0, alpha_prio=1.5,
             clip_min=0.1, clip_max=0.2, eps_std=1e-6, eps=EPS, peak=None):  # fmt: skip
    """001 Algorithm 1 (App. C), one group at a time; ``peak`` = running-peak mode."""
    p_, g_, _ = r.shape
    ok = [v[p].sum() >= 2 for p in range(p_)]
    means = [r[p, v[p], 0].astype(np.float64).mean() for p in range(p_) if ok[p]]
    sat = r_max
    if peak is not None:
        sat = max([peak] + means)
    out = np.zeros((p_, g_))
    ws = []
    for p in range(p_):
        if not ok[p]:
            continue
        idx = np.flatnonzero(v[p])
        r_out = r[p, idx, 0].astype(np.float64)
        r_mix = r_out + r[p, idx, 1]
        so, sm = r_out.std(), r_mix.std()
        rg = sm / (so + sm + eps_std)
        wg = float(r_out.mean() < sat) * float(rg < eps_mix) * rg
        d = alpha_prio if tau_low < r_out.mean() / r_max < tau_high else alpha_base
        a_out = (r_out - r_out.mean()) / (so + eps)
        a_mix = (r_mix - r_mix.mean()) / (sm + eps)
        out[p, idx] = d * ((1 - wg) * a_out + wg * a_mix)
        ws.append(wg)
    w_bar = np.mean(ws) if ws else 0.0
    return out, clip_min + (1 - w_bar) * (clip_max - clip_min), sat


# ---------------------------------------------------------------- strategies


def batches(p=4, g=8, m=3, elements=None):
    elements = st.sampled_from(GRID) if elements is None else elements
    return st.tuples(
        hnp.arrays(np.float32, (p, g, m), elements=elements),
        hnp.arrays(np.bool_, (p, g)),
    )


def random_batch(seed, p=5, g=8, m=3, frac_valid=0.8):
    rng = np.random.default_rng(seed)
    r = rng.choice(GRID, size=(p, g, m)).astype(np.float32)
    v = rng.random((p, g)) < frac_valid
    return r, v


# ---------------------------------------------------------------- GRPO / Dr.GRPO


@settings(max_examples=40, deadline=None)
@given(batches(), st.sampled_from([0, 1]))
def test_grpo_matches_numpy(batch, ddof):
    r, v = batch
    # dyadic weights: w . r is exact in float32, so equal scalars stay exactly equal (with
    # weights like 0.3 + 0.2 vs 0.5 float32 rounding creates ~1e-8 "spread" that std + eps
    # turns into O(0.05) advantages in any float32 GRPO, while float64 sees exact ties)
    w = np.array([0.5, 0.25, 0.25])
    out = grpo(r, v, weights=w, std_ddof=ddof)
    assert isinstance(out, AdvantageOutput) and out.advantages.dtype == jnp.float32
    np.testing.assert_allclose(out.advantages, ref_grpo(r, v, w, ddof=ddof), **TOL)
    np.testing.assert_allclose(
        dr_grpo(r, v).advantages, ref_grpo(r, v, np.full(3, 1 / 3), scale_by_std=False), **TOL
    )


def test_grpo_per_group_weights_and_scale():
    r, v = random_batch(0)
    w = np.random.default_rng(1).dirichlet(np.ones(3), size=5)
    scale = np.random.default_rng(2).uniform(0.5, 2.0, size=(5, 8))
    np.testing.assert_allclose(grpo(r, v, weights=w).advantages, ref_grpo(r, v, w), **TOL)
    np.testing.assert_allclose(
        dr_grpo(r, v, reward_scale=scale).advantages,
        ref_grpo(r, v, np.full(3, 1 / 3), scale_by_std=False, scale=scale),
        **TOL,
    )


def test_global_r_pareto_cancels_under_grpo_not_dr_grpo():
    """ParetoPO Stage 1 global mode: r_pareto scales every reward of the step by one number.
    GRPO's std normalisation divides it out (up to eps); Dr.GRPO keeps it (methods.md)."""
    r, v = random_batch(3)
    w = np.array([0.6, 0.3, 0.1])
    for r_pareto in (0.5 + 1.5 * np.tanh(0.3), 1.9, 0.6):
        np.testing.assert_allclose(
            grpo(r, v, weights=w, reward_scale=r_pareto).advantages,
            grpo(r, v, weights=w).advantages,
            atol=1e-5,
        )
        base = np.asarray(dr_grpo(r, v, weights=w).advantages)
        scaled = np.asarray(dr_grpo(r, v, weights=w, reward_scale=r_pareto).advantages)
        np.testing.assert_allclose(scaled, r_pareto * base, rtol=1e-5, atol=1e-6)
        assert np.abs(scaled - base).max() > 0.05


# ---------------------------------------------------------------- GDPO / MO-GRPO


@settings(max_examples=40, deadline=None)
@given(batches())
def test_gdpo_and_mo_grpo_match_numpy(batch):
    r, v = batch
    w = np.array([1.0, 0.5, 2.0])
    for weights in (w, None):
        got = np.asarray(gdpo(r, v, weights=weights).advantages)
        want, sd = ref_gdpo(r, v, np.ones(3) if weights is None else w, return_std=True)
        assert np.all(np.isfinite(got)) and np.abs(got).max() <= np.sqrt(v.sum()) + 1e-3
        if well_conditioned(sd):
            np.testing.assert_allclose(got, want, **TOL)
    np.testing.assert_allclose(
        mo_grpo(r, v, weights=w).advantages, ref_gdpo(r, v, w, batch_norm=False), **TOL
    )


def test_gdpo_token_batch_norm():
    r, v = random_batch(4)
    tc = np.random.default_rng(5).integers(1, 200, size=(5, 8))
    got = gdpo(r, v, batch_norm="token", token_counts=tc).advantages
    np.testing.assert_allclose(got, ref_gdpo(r, v, np.ones(3), token_counts=tc), **TOL)
    assert np.abs(np.asarray(got) - np.asarray(gdpo(r, v).advantages)).max() > 1e-3
    with pytest.raises(ValueError, match="token_counts"):
        gdpo(r, v, batch_norm="token")
    with pytest.raises(ValueError, match="batch_norm"):
        gdpo(r, v, batch_norm="tokens")


# ---------------------------------------------------------------- SAW


@settings(max_examples=30, deadline=None)
@given(batches(), st.booleans())
def test_saw_matches_numpy(batch, fallback):
    r, v = batch
    for mins in (None, (-1.0, None, -1.0)):
        w_r, cv = (
            ref_saw_weights(r, v, mins, None, fallback, False)
            if v.any()
            else (np.ones(3), np.zeros(3))
        )
        out = saw_grpo(r, v, reward_min=mins, fallback=fallback)
        if v.any():
            np.testing.assert_allclose(
                [out.metrics[f"saw/cv/{k}"] for k in range(3)], cv, rtol=1e-5, atol=1e-6
            )
            np.testing.assert_allclose(
                [out.metrics[f"saw/weight/{k}"] for k in range(3)], w_r, rtol=1e-5, atol=1e-6
            )
            np.testing.assert_allclose(out.advantages, ref_grpo(r, v, w_r), **TOL)
        w_a, _ = (
            ref_saw_weights(r, v, mins, (1.0, 2.0, 0.5), fallback, True)
            if v.any()
            else (np.ones(3), 0)
        )
        out = saw_gdpo(r, v, reward_min=mins, fallback=fallback, priorities=(1.0, 2.0, 0.5))
        want, sd = ref_gdpo(r, v, w_a, return_std=True)
        if v.any() and well_conditioned(sd):
            np.testing.assert_allclose(out.advantages, want, **TOL)
        assert np.all(np.isfinite(out.advantages))


def test_saw_scale_invariance_fallback_and_times_m():
    rng = np.random.default_rng(7)
    r = rng.uniform(0.0, 1.0, size=(6, 8, 3)).astype(np.float32)
    v = rng.random((6, 8)) < 0.9
    scales = np.array([10.0, 0.1, 3.0], np.float32)
    a = saw_grpo(r, v, objective_names=("task", "tool", "fmt")).metrics
    b = saw_grpo(r * scales, v, objective_names=("task", "tool", "fmt")).metrics
    for name in ("task", "tool", "fmt"):  # CV(alpha r) = CV(r) with the batch-min offset
        np.testing.assert_allclose(a[f"saw/cv/{name}"], b[f"saw/cv/{name}"], rtol=1e-4)
        np.testing.assert_allclose(a[f"saw/weight/{name}"], b[f"saw/weight/{name}"], rtol=1e-4)
    w_reward = np.array([a[f"saw/weight/{n}"] for n in ("task", "tool", "fmt")])
    m_adv = saw_gdpo(r, v).metrics
    w_adv = np.array([m_adv[f"saw/weight/{k}"] for k in range(3)])
    np.testing.assert_allclose(w_reward.sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(w_adv, 3 * w_reward, rtol=1e-5)  # advantage mode x M
    # every objective constant over the batch -> S = 0 < delta -> equal weights (paper)
    const = np.broadcast_to(np.array([1.0, 0.5, 2.0], np.float32), (4, 8, 3))
    out = saw_gdpo(const)
    assert out.metrics["saw/fallback"] == 1.0
    np.testing.assert_array_equal(
        [out.metrics[f"saw/weight/{k}"] for k in range(3)], [1.0, 1.0, 1.0]
    )
    np.testing.assert_array_equal(out.advantages, 0.0)
    off = saw_grpo(const, fallback=False)  # authors' code: no fallback (0/0 -> weights 0, not NaN)
    np.testing.assert_array_equal(
        [off.metrics[f"saw/weight/{k}"] for k in range(3)], [0.0, 0.0, 0.0]
    )
    np.testing.assert_array_equal(off.advantages, 0.0)
    with pytest.raises(ValueError, match="reward_min"):
        saw_grpo(r, v, reward_min=(0.5, 0.0, 0.0))
    with pytest.raises(ValueError, match="priorities"):
        saw_grpo(r, v, priorities=(1.0, 2.0))


# ---------------------------------------------------------------- AWPO


@settings(max_examples=40, deadline=None)
@given(
    batches(m=2, elements=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0])),
    st.sampled_from([0.3, 0.5, 0.9]),
)
def test_awpo_matches_numpy(batch, eps_mix):
    r, v = batch
    r[..., 1] = np.clip(r[..., 1], 0.0, 1.0)
    out = awpo(r, v, r_max=2.0, eps_mix=eps_mix)
    want, clip, _ = ref_awpo(r, v, 2.0, eps_mix=eps_mix)
    np.testing.assert_allclose(out.advantages, want, **TOL)
    np.testing.assert_allclose(out.clip_eps, clip, rtol=1e-6)
    assert out.state is None
    # running peak: the state carries the highest group mean seen so far
    out = awpo(r, v, r_max=2.0, eps_mix=eps_mix, r_max_mode="running_peak", state={"peak": 0.6})
    want, clip, peak = ref_awpo(r, v, 2.0, eps_mix=eps_mix, peak=0.6)
    np.testing.assert_allclose(out.advantages, want, **TOL)
    np.testing.assert_allclose(out.clip_eps, clip, rtol=1e-6)
    np.testing.assert_allclose(out.state["peak"], peak, rtol=1e-6)


def test_awpo_gate_and_clip_radius():
    # sigma_out = 0 and sigma_mix > 0 -> r_g ~ 1 -> the gate closes for eps_mix < 1
    r = np.zeros((1, 4, 2), np.float32)
    r[0, :, 0] = 1.0
    r[0, :, 1] = [0.0, 0.5, 1.0, 0.25]
    out = awpo(r, r_max=2.0)
    assert out.metrics["awpo/gate_frac"] == 0.0
    np.testing.assert_allclose(out.clip_eps, 0.2)  # no reliance on R_mix -> widest radius
    # a group where the judge adds dispersion below eps_mix opens the gate and tightens the radius
    r2 = np.array([[[0.0, 0.2], [1.0, 0.9], [0.0, 0.1], [1.0, 0.8]]], np.float32)
    out2 = awpo(r2, r_max=2.0, eps_mix=0.7)
    s_out, s_mix = r2[0, :, 0].std(), r2[0].sum(-1).std()
    r_g = s_mix / (s_out + s_mix + 1e-6)  # ~0.63: gate open at eps_mix = 0.7, shut at 0.5
    assert out2.metrics["awpo/gate_frac"] == 1.0
    np.testing.assert_allclose(out2.clip_eps, 0.1 + (1 - r_g) * 0.1, rtol=1e-5)
    assert awpo(r2, r_max=2.0).metrics["awpo/gate_frac"] == 0.0
    # saturated group (mean R_out == R_max) closes the gate
    r3 = np.array([[[2.0, 0.2], [2.0, 0.9]]], np.float32)
    assert awpo(r3, r_max=2.0).metrics["awpo/gate_frac"] == 0.0
    with pytest.raises(ValueError, match="M = 2"):
        awpo(np.zeros((1, 4, 3)), r_max=1.0)
    with pytest.raises(ValueError, match="r_max"):
        awpo(r, r_max=0.0)
    with pytest.raises(ValueError, match="r_max_mode"):
        awpo(r, r_max=1.0, r_max_mode="peak")


# ---------------------------------------------------------------- random_w


def test_random_w_matches_grpo_with_the_drawn_weights():
    vpo_mod = importlib.import_module("mojax.advantages.vpo")
    r, v = random_batch(8, p=4, g=6)
    key = jax.random.key(3)
    out = random_w(r, v, key=key)
    w = np.asarray(vpo_mod.dirichlet_weights(key, 4, 1, 3))[:, 0]
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(out.advantages, ref_grpo(r, v, w), **TOL)
    np.testing.assert_array_equal(random_w(r, v, key=key).advantages, out.advantages)  # same key
    other = random_w(r, v, key=jax.random.key(4)).advantages
    assert np.abs(np.asarray(other) - np.asarray(out.advantages)).max() > 1e-4
    with pytest.raises(ValueError, match="key"):
        random_w(r, v, key=None)


# ---------------------------------------------------------------- every estimator: edge cases


def _call(name, r, v, **kw):
    f = ESTIMATORS[name]
    if name in ("vpo", "multi_rlvr"):
        v = np.ones(r.shape[:2], bool) if v is None else v
        sr = np.repeat(r[:, :, None, :], 2, axis=2)
        sv = np.repeat(v[:, :, None], 2, axis=2)
        extra = {"key": jax.random.key(0)} if name == "vpo" else {}
        return f(sr, sv, valid=v, **extra, **kw)
    if name == "awpo":
        return f(r[..., :2], v, r_max=4.0, **kw)
    if name == "random_w":
        return f(r, v, key=jax.random.key(0), **kw)
    if name == "pareto_rank":
        return f(r, v, weights=(0.5, 0.3, 0.2), **kw)
    return f(r, v, **kw)


NAMES = sorted(ESTIMATORS)


@pytest.mark.parametrize("name", NAMES)
def test_edge_cases(name):
    rng = np.random.default_rng(0)
    p, g, m = 4, 6, 3
    # all-equal rewards: zero advantage (Pareto-rank with normalize="none": A = 1 for everyone)
    r = np.full((p, g, m), 0.7, np.float32)
    adv = np.asarray(_call(name, r, None).advantages)
    np.testing.assert_array_equal(adv, 1.0 if name == "pareto_rank" else 0.0)
    # one valid sample per group, all invalid, invalid rows with NaN / inf
    r = rng.choice(GRID, size=(p, g, m)).astype(np.float32)
    one = np.zeros((p, g), bool)
    one[:, 2] = True
    np.testing.assert_array_equal(_call(name, r, one).advantages, 0.0)
    np.testing.assert_array_equal(_call(name, r, np.zeros((p, g), bool)).advantages, 0.0)
    v = rng.random((p, g)) < 0.7
    bad = r.copy()
    bad[~v] = np.nan
    bad[0, 0] = np.inf if not v[0, 0] else bad[0, 0]
    out = _call(name, bad, v)
    adv = np.asarray(out.advantages)
    assert adv.dtype == np.float32 and adv.shape == (p, g)
    assert np.all(np.isfinite(adv))
    assert np.all(adv[~v] == 0.0)
    for key, val in out.metrics.items():
        assert np.isfinite(np.asarray(val)), key
    # inside jit, non-finite rewards in rows marked valid are treated as invalid
    all_valid = np.ones((p, g), bool)
    if name in ("vpo", "multi_rlvr"):
        # for sets a non-finite answer becomes an invalid answer (zero vector); the rollout stays
        f = ESTIMATORS[name]
        kw = {"key": jax.random.key(0)} if name == "vpo" else {}
        sr = np.repeat(r[:, :, None, :], 2, axis=2)
        sv = np.repeat(v[:, :, None], 2, axis=2)
        sbad = np.where(sv[..., None], sr, np.nan).astype(np.float32)
        traces = []

        def fn(rr, vv):
            traces.append(1)
            return f(rr, vv, valid=all_valid, **kw).advantages

        jitted = jax.jit(fn)
        want = f(sr, sv, valid=all_valid, **kw).advantages
        np.testing.assert_allclose(jitted(sbad, np.ones_like(sv)), want, rtol=1e-6, atol=1e-6)
        jitted(sr * 0.5, sv)  # new values, same shapes: no new trace
        assert len(traces) == 1
        return
    traces = []

    def fn(rr, vv):
        traces.append(1)
        return _call(name, rr, vv).advantages

    jitted = jax.jit(fn)
    want = _call(name, r, v).advantages
    np.testing.assert_allclose(jitted(bad, all_valid), want, rtol=1e-6, atol=1e-6)
    jitted(r * 0.5, v)  # new values, same shapes: no new trace
    assert len(traces) == 1


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_names_the_argument(name):
    r = np.zeros((2, 4, 3), np.float32)
    arg = "set_valid" if name in ("vpo", "multi_rlvr") else "valid"
    with pytest.raises(ValueError, match=arg):
        _call(name, r, np.ones((2, 5), bool)) if arg == "valid" else ESTIMATORS[name](
            np.zeros((2, 4, 2, 3)),
            np.ones((2, 4, 3), bool),
            **({"key": jax.random.key(0)} if name == "vpo" else {}),
        )
    rname = "set_rewards" if name in ("vpo", "multi_rlvr") else "rewards"
    nan = np.zeros((2, 4, 3), np.float32)
    nan[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=f"{rname} has non-finite"):
        _call(name, nan, None)
    if name not in ("vpo", "multi_rlvr", "awpo"):
        with pytest.raises(ValueError, match="M = 0"):
            ESTIMATORS[name](
                np.zeros((2, 4, 0)),
                None,
                **({"key": jax.random.key(0)} if name == "random_w" else {}),
            )
        with pytest.raises(ValueError, match="rewards must have shape"):
            ESTIMATORS[name](
                np.zeros((2, 4)), None, **({"key": jax.random.key(0)} if name == "random_w" else {})
            )


_JITS = {
    "grpo": ("grpo", "_scalar_jit"),
    "dr_grpo": ("grpo", "_scalar_jit"),
    "gdpo": ("gdpo", "_jit"),
    "mo_grpo": ("gdpo", "_jit"),
    "saw_grpo": ("saw", "_jit"),
    "saw_gdpo": ("saw", "_jit"),
    "awpo": ("awpo", "_jit"),
    "pareto_rank": ("pareto_rank", "_jit"),
    "vpo": ("vpo", "_jit"),
    "random_w": ("baselines", "_random_w_jit"),
    "multi_rlvr": ("baselines", "_multi_jit"),
    "max_at_k": ("max_at_k", "_jit"),
}


@pytest.mark.parametrize("name", NAMES)
def test_traces_once(name):
    """Same shapes, new values: the estimator's jitted core compiles once (under an outer jit the
    whole estimator traces once: see test_edge_cases)."""
    mod, attr = _JITS[name]
    jitted = getattr(importlib.import_module(f"mojax.advantages.{mod}"), attr)
    p, g = 4, 6  # the edge-case shape: often compiled already, at most one new entry
    before = jitted._cache_size()
    _call(name, *random_batch(0, p=p, g=g))
    after_first = jitted._cache_size()
    assert after_first <= before + 1
    for seed in range(1, 4):
        _call(name, *random_batch(seed, p=p, g=g))
    assert jitted._cache_size() == after_first
