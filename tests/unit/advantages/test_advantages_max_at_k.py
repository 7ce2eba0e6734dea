"""Max@k training advantages (Bagirov et al., arXiv:2510.23393) against a numpy loop over all
k-subsets (the definition, Eq. 7 with f = max), not the sorted closed form."""

import itertools
from math import comb

import numpy as np
import pytest

from mojax.advantages import ESTIMATORS, grpo, max_at_k

TOL = dict(rtol=2e-5, atol=2e-5)


def ref_max_at_k(r, v, k, w=None, normalize="zscore", eps=1e-6):
    """r~_i = (1 / C(n, k)) sum over k-subsets I of the valid samples with i in I of max_{j in I}
    s_j; then the group z-score ("BoN mean"), centring or nothing."""
    p_, g_, m_ = r.shape
    w = np.full(m_, 1.0 / m_) if w is None else np.asarray(w, np.float64)
    out = np.zeros((p_, g_))
    for p in range(p_):
        idx = list(np.flatnonzero(v[p]))
        n = len(idx)
        if n < max(k, 2):
            continue
        s = {i: float(r[p, i].astype(np.float64) @ w) for i in idx}
        tilde = dict.fromkeys(idx, 0.0)
        for subset in itertools.combinations(idx, k):
            best = max(s[j] for j in subset)
            for i in subset:
                tilde[i] += best / comb(n, k)
        t = np.array([tilde[i] for i in idx])
        if normalize == "zscore":
            t = (t - t.mean()) / (t.std() + eps)
        elif normalize == "center":
            t = t - t.mean()
        out[p, idx] = t
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("normalize", ["zscore", "center", "none"])
def test_max_at_k_matches_subset_loop(k, normalize):
    rng = np.random.default_rng(k)
    r = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=(5, 8, 2)).astype(np.float32)  # with ties
    v = rng.random((5, 8)) < 0.85
    v[0] = True
    v[1, 2:] = False  # 2 valid samples: < k for k >= 3 -> zeros
    out = max_at_k(r, v, k=k, normalize=normalize)
    np.testing.assert_allclose(out.advantages, ref_max_at_k(r, v, k, normalize=normalize), **TOL)
    assert np.all(out.advantages[~v] == 0.0)


def test_max_at_k_worked_example_and_properties():
    # n = 4 sorted rewards 0, 1, 2, 4 and k = 2: the 6 pairs have maxima 1, 2, 4, 2, 4, 4.
    # r~ = (pairs containing i, summed maxima) / 6 = (7/6, 7/6, 8/6, 12/6).
    r = np.array([[[2.0], [0.0], [4.0], [1.0]]], np.float32)
    raw = max_at_k(r, k=2, normalize="none").advantages[0]
    np.testing.assert_allclose(raw, np.array([8, 7, 12, 7]) / 6, rtol=1e-6)
    # sum_i r~_i = k * max@k (each subset credits its max to its k members); max@2 = 17/6
    out = max_at_k(r, k=2, normalize="none")
    np.testing.assert_allclose(out.metrics["max_at_k/estimate/mean"], 17 / 6, rtol=1e-6)
    # k = 1: r~ = s / n, so the z-score is GRPO's on w* . r with the offset eps scaled by n
    rng = np.random.default_rng(0)
    r3 = rng.choice([0.0, 0.5, 1.0, 2.0], size=(4, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(
        max_at_k(r3, k=1, eps=1e-6 / 6).advantages, grpo(r3).advantages, rtol=1e-5, atol=1e-6
    )
    # k = G: one subset, whose max (4) every member shares -> no spread, zero z-scores
    np.testing.assert_allclose(max_at_k(r, k=4, normalize="none").advantages[0], 4.0, rtol=1e-6)
    np.testing.assert_array_equal(max_at_k(r, k=4).advantages, 0.0)
    assert ESTIMATORS["max_at_k"] is max_at_k


def test_max_at_k_bad_input():
    r = np.zeros((2, 4, 2), np.float32)
    with pytest.raises(ValueError, match="k must be in"):
        max_at_k(r, k=5)
    with pytest.raises(ValueError, match="normalize"):
        max_at_k(r, normalize="rank")
    with pytest.raises(ValueError, match="weights"):
        max_at_k(r, weights=[1.0, 0.0, 0.0])
