"""AWPO (arXiv:2512.19126) across steps: the carried running peak (Eq. 25's R_max) and judge
failures that invalidate only the reasoning objective. References are numpy loops written from
Eqs. 20-29 (Algorithm 1, App. C)."""

import numpy as np
import pytest

from mojax.advantages import awpo

TOL = dict(rtol=2e-5, atol=2e-5)


def np_awpo_step(r, v, peak, *, r_max, reason_ok=None, eps_mix=0.5, tau=(0.2, 0.8),
                 alpha=(1.0, 1.5), clip=(0.1, 0.2), eps_std=1e-6, eps=1e-6):  # fmt: skip
    """One step of Algorithm 1 with R_max = max(peak, this batch's group means) (running peak).

    Returns advantages [P, G], the gate weights w_g [P] (0 for groups with < 2 valid samples),
    the clip radius and the new peak. ``reason_ok`` [P, G]: samples whose judge score exists;
    R_mix statistics use those only, and the others keep the outcome view alone."""
    p_, g_, _ = r.shape
    reason_ok = np.ones((p_, g_), bool) if reason_ok is None else reason_ok
    means = [r[p, v[p], 0].astype(np.float64).mean() for p in range(p_) if v[p].sum() >= 2]
    peak = max([peak] + means)
    adv, w = np.zeros((p_, g_)), np.zeros(p_)
    counted = []
    for p in range(p_):
        idx = np.flatnonzero(v[p])
        if len(idx) < 2:
            continue
        r_out = r[p, idx, 0].astype(np.float64)
        mu_o, sd_o = r_out.mean(), r_out.std()  # Eqs. 21-22, population std
        a_out = (r_out - mu_o) / (sd_o + eps)  # Eq. 26
        jdx = np.flatnonzero(v[p] & reason_ok[p])
        a_mix = np.zeros(len(idx))
        wg = 0.0
        if len(jdx) >= 2:
            r_mix = r[p, jdx, 0].astype(np.float64) + r[p, jdx, 1]  # Eq. 20
            mu_m, sd_m = r_mix.mean(), r_mix.std()  # Eq. 23
            rg = sd_m / (sd_o + sd_m + eps_std)  # Eq. 24
            wg = float(mu_o < peak) * float(rg < eps_mix) * rg  # Eq. 25
            for n, j in enumerate(idx):
                if j in jdx:
                    a_mix[n] = (r[p, j, 0] + r[p, j, 1] - mu_m) / (sd_m + eps)
        d = alpha[1] if tau[0] < mu_o / r_max < tau[1] else alpha[0]  # Eq. 27
        has_mix = np.isin(idx, jdx)
        w_row = np.where(has_mix, wg, 0.0)
        adv[p, idx] = d * ((1 - w_row) * a_out + w_row * a_mix)  # Eq. 28
        w[p] = wg
        counted.append(wg)
    w_bar = np.mean(counted) if counted else 0.0
    return adv, w, clip[0] + (1 - w_bar) * (clip[1] - clip[0]), peak  # Eq. 29


def _group(r_out, r_reason):
    return np.stack([np.asarray(r_out, np.float32), np.asarray(r_reason, np.float32)], -1)


# Three steps of two groups (G = 4). The judge score is anti-correlated with R_out in every group
# (sigma_mix < sigma_out, r_g ~ 0.39 < eps_mix = 0.5), so only the saturation gate
# 1[mean R_out < R_max] decides. Step 0 has a group with mean 1.8; later steps peak at 1.2 and 1.4.
BATCHES = [
    np.stack([_group([2, 1.6, 2, 1.6], [0, .4, .1, .3]), _group([1.2, .4, 1.2, .4], [0, .4, .1, .3])]),
    np.stack([_group([1.6, .8, 1.6, .8], [0, .4, .1, .3]), _group([1, .6, 1, .6], [0, .2, .05, .15])]),
    np.stack([_group([1.8, 1, 1.8, 1], [0, .4, .1, .3]), _group([.4, 0, .4, 0], [0, .2, .05, .15])]),
]  # fmt: skip


def test_running_peak_carried_state_vs_per_batch_peak():
    """Issue 13 (5): with the peak carried across steps, step 1's best group (mean 1.2) and
    step 2's (mean 1.4) stay below the peak 1.8 of step 0 and mix the judge signal; with a fresh
    per-batch peak each is its batch's peak and its gate closes."""
    v = np.ones((2, 4), bool)
    state, ref_peak = None, -np.inf
    carried_w, fresh_w = [], []
    for _t, r in enumerate(BATCHES):
        out = awpo(r, v, r_max=2.0, r_max_mode="running_peak", state=state)
        adv, w, clip, ref_peak = np_awpo_step(r, v, ref_peak, r_max=2.0)
        np.testing.assert_allclose(out.advantages, adv, **TOL)
        np.testing.assert_allclose(out.clip_eps, clip, rtol=1e-5)
        np.testing.assert_allclose(out.state["peak"], ref_peak, rtol=1e-6)
        np.testing.assert_allclose(out.metrics["awpo/gate_frac"], np.mean(w > 0), rtol=1e-6)
        carried_w.append(w)
        state = out.state  # the pure function hands back the state to carry
        fresh = awpo(r, v, r_max=2.0, r_max_mode="running_peak", state=None)
        adv_f, w_f, clip_f, _ = np_awpo_step(r, v, -np.inf, r_max=2.0)
        np.testing.assert_allclose(fresh.advantages, adv_f, **TOL)
        np.testing.assert_allclose(fresh.clip_eps, clip_f, rtol=1e-5)
        fresh_w.append(w_f)
    carried_w, fresh_w = np.array(carried_w), np.array(fresh_w)
    assert (carried_w[0] > 0).tolist() == [False, True]  # step 0: identical either way
    np.testing.assert_array_equal(carried_w[0], fresh_w[0])
    for t in (1, 2):  # later steps: the carried peak keeps the best group's gate open
        assert (carried_w[t] > 0).tolist() == [True, True], t
        assert (fresh_w[t] > 0).tolist() == [False, True], t
    assert np.asarray(state["peak"]) == np.float32(1.8)


def test_running_peak_state_is_plain_and_restartable():
    """A checkpointed state (a float, e.g. after JSON) resumes exactly; theoretical mode keeps None."""
    v = np.ones((2, 4), bool)
    first = awpo(BATCHES[0], v, r_max=2.0, r_max_mode="running_peak")
    resumed = awpo(BATCHES[1], v, r_max=2.0, r_max_mode="running_peak",
                   state={"peak": float(first.state["peak"])})  # fmt: skip
    direct = awpo(BATCHES[1], v, r_max=2.0, r_max_mode="running_peak", state=first.state)
    np.testing.assert_array_equal(resumed.advantages, direct.advantages)
    assert awpo(BATCHES[1], v, r_max=2.0).state is None
    with pytest.raises(ValueError, match="state"):
        awpo(BATCHES[1], v, r_max=2.0, r_max_mode="running_peak", state={"max": 1.0})


def test_judge_failure_invalidates_only_the_reasoning_objective():
    """A sample whose judge failed keeps its outcome advantage; R_mix statistics (Eqs. 23-24,
    26) use the samples with a judge score only."""
    r = np.stack([
        _group([1.6, .8, 1.6, .8, 1.2], [0, .4, .1, .3, .9]),
        _group([1.6, .8, 1.6, .8, 1.2], [0, .4, .1, .3, .9]),
        _group([2, 0, 2, 0, 1], [.5, .5, .5, .5, .5]),
    ])  # fmt: skip
    v = np.ones((3, 5), bool)
    ok = np.ones((3, 5), bool)
    ok[0, 4] = False  # one failure: the group still mixes over the 4 others
    ok[2, 1:] = False  # one score left: no R_mix statistics, outcome view only
    out = awpo(r, v, r_max=2.0, reason_valid=ok)
    adv, w, clip, _ = np_awpo_step(r, v, np.inf, r_max=2.0, reason_ok=ok)
    np.testing.assert_allclose(out.advantages, adv, **TOL)
    np.testing.assert_allclose(out.clip_eps, clip, rtol=1e-5)
    assert w[0] > 0 and w[2] == 0.0
    assert out.advantages[0, 4] != 0.0  # the failed sample still learns from R_out
    # all scores present -> identical to the call without reason_valid
    np.testing.assert_array_equal(
        awpo(r, v, r_max=2.0, reason_valid=np.ones((3, 5), bool)).advantages,
        awpo(r, v, r_max=2.0).advantages,
    )
    # a NaN judge score is fine where reason_valid is False (the sample stays valid)
    r_nan = r.copy()
    r_nan[0, 4, 1] = np.nan
    np.testing.assert_allclose(awpo(r_nan, v, r_max=2.0, reason_valid=ok).advantages, adv, **TOL)
    with pytest.raises(ValueError, match="reason_valid"):
        awpo(r, v, r_max=2.0, reason_valid=np.ones((3, 4), bool))
