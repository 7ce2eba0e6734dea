"""best@k, pass@k, reward-space diversity and collinearity against closed forms and loops."""

import itertools
from math import comb

import numpy as np
import pytest
from scipy import stats

from mojax.metrics import (
    best_at_k,
    collinearity,
    expected_best_at_k,
    flatten_sets,
    max_at_k,
    pass_at_k,
    reward_diversity,
)


def test_best_at_k_counts_answers_in_draw_order():
    # 2 chains of S = 3 answers, M = 2; w* = uniform mean
    sets = np.array([[[[0.0, 0.0], [1.0, 0.0], [0.2, 0.2]], [[1.0, 1.0], [0.0, 0.0], [0.5, 0.5]]]])
    valid = np.array([[[True, True, True], [True, True, True]]])
    answers, v = flatten_sets(sets, valid)
    assert answers.shape == (1, 6, 2) and v.shape == (1, 6)
    want = [0.0, 0.5, 0.5, 1.0, 1.0, 1.0]  # k counts answers, not chains
    for k in range(1, 7):
        np.testing.assert_allclose(best_at_k(answers, k, valid=v), [want[k - 1]])
    np.testing.assert_allclose(best_at_k(answers, 2, weights=[1.0, 0.0]), [1.0])
    v[0, 1] = False  # an invalid answer is skipped
    np.testing.assert_allclose(best_at_k(answers, 2, valid=v), [0.0])
    v[0, :2] = False  # no valid answer among the first k -> `empty`
    np.testing.assert_allclose(best_at_k(answers, 2, valid=v, empty=-1.0), [-1.0])
    with pytest.raises(ValueError, match="k must be"):
        best_at_k(answers, 7)


def test_best_at_k_random_vs_loop():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(5, 10, 3))
    v = rng.random((5, 10)) < 0.7
    w = np.array([0.2, 0.3, 0.5])
    for k in (1, 4, 10):
        got = best_at_k(r, k, weights=w, valid=v)
        for p in range(5):
            scores = [r[p, i] @ w for i in range(k) if v[p, i]]
            assert got[p] == pytest.approx(max(scores) if scores else 0.0)


def test_pass_at_k_closed_form():
    for n in range(1, 12):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                want = 1.0 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)
    # vectorised, and a large n without overflow
    np.testing.assert_allclose(pass_at_k([10, 10], [0, 10], 3), [0.0, 1.0])
    assert pass_at_k(1000, 1, 10) == pytest.approx(10 / 1000)
    with pytest.raises(ValueError, match="c must"):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError, match="k must"):
        pass_at_k(5, 1, 6)


def test_reward_diversity_vs_loop():
    rng = np.random.default_rng(1)
    r = rng.integers(0, 3, size=(4, 6, 3)).astype(float)
    v = rng.random((4, 6)) < 0.7
    got = reward_diversity(r, v)
    got_pad = reward_diversity(r, v, include_padding=True)
    for p in range(4):
        rows = [r[p, i] for i in range(6) if v[p, i]]
        pairs = list(itertools.combinations(rows, 2))
        want = np.mean([np.abs(a - b).sum() for a, b in pairs]) if pairs else 0.0
        assert got[p] == pytest.approx(want)
        padded = [r[p, i] if v[p, i] else np.zeros(3) for i in range(6)]  # authors' zero padding
        want_pad = np.mean([np.abs(a - b).sum() for a, b in itertools.combinations(padded, 2)])
        assert got_pad[p] == pytest.approx(want_pad)
    # a collapsed pool has diversity 0
    assert reward_diversity(np.ones((1, 5, 2)))[0] == 0.0
    with pytest.raises(ValueError, match="non-finite"):
        reward_diversity(np.full((1, 2, 2), np.nan), np.ones((1, 2), bool))


def test_collinearity():
    rng = np.random.default_rng(2)
    x = rng.normal(size=200)
    # perfectly collinear and anti-collinear objectives
    assert collinearity(np.stack([x, 2 * x + 1], -1)) == pytest.approx(1.0)
    assert collinearity(np.stack([x, -x], -1)) == pytest.approx(-1.0)
    # zero-variance objectives are dropped before averaging
    r = np.stack([x, 0.5 * x + rng.normal(size=200), np.full(200, 3.0), rng.normal(size=200)], -1)
    pairs = [(0, 1), (0, 3), (1, 3)]
    want = np.mean([stats.pearsonr(r[:, a], r[:, b])[0] for a, b in pairs])
    assert collinearity(r) == pytest.approx(want, rel=1e-9)
    # leading axes are flattened; invalid rows are ignored
    v = rng.random(200) < 0.5
    r3 = r.reshape(10, 20, 4)
    want_v = np.mean([stats.pearsonr(r[v][:, a], r[v][:, b])[0] for a, b in pairs])
    assert collinearity(r3, v.reshape(10, 20)) == pytest.approx(want_v, rel=1e-9)
    # fewer than 2 varying objectives: undefined
    assert np.isnan(collinearity(np.stack([x, np.ones(200)], -1)))


def _exact_expected_max_m2(lines):
    """E_{u ~ U(0, 1)} max_s (u a_s + (1 - u) b_s) (Dir(1, 1) = uniform on the segment), exactly:
    the upper envelope of the lines is linear between their crossings, so the trapezoid rule on
    the crossings is exact."""
    knots = {0.0, 1.0}
    for (a1, b1), (a2, b2) in itertools.combinations(lines, 2):
        den = (a1 - b1) - (a2 - b2)
        if den != 0:
            u = (b2 - b1) / den
            if 0 < u < 1:
                knots.add(u)
    xs = np.array(sorted(knots))
    ys = np.array([max(u * a + (1 - u) * b for a, b in lines) for u in xs])
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2))


def test_expected_best_at_k_vs_loop_and_closed_form():
    rng = np.random.default_rng(1)
    r = rng.random((3, 6, 2))
    v = rng.random((3, 6)) < 0.8
    v[2, :3] = False
    w = rng.dirichlet([1.0, 1.0], size=50)
    for k in (1, 3, 6):
        got = expected_best_at_k(r, k, valid=v, weight_samples=w)
        for p in range(3):
            idx = [i for i in range(k) if v[p, i]]
            want = np.mean([max(r[p, i] @ wk for i in idx) for wk in w]) if idx else 0.0
            assert got[p] == pytest.approx(want, rel=1e-12)
    # Monte-Carlo default vs the exact expectation (M = 2, Dir(1) is uniform): within 5 standard
    # errors of the estimator, computed from the same draws
    draws = np.random.default_rng(0).dirichlet([1.0, 1.0], size=100_000)
    for p in range(2):
        lines = [tuple(r[p, i]) for i in range(4) if v[p, i]]
        est = expected_best_at_k(r[p : p + 1], 4, valid=v[p : p + 1], num_weights=100_000)[0]
        per_w = np.max(np.stack([draws @ np.array(line) for line in lines]), axis=0)
        se = per_w.std() / np.sqrt(len(per_w))
        assert abs(est - _exact_expected_max_m2(lines)) < 5 * se + 1e-12
        assert est == pytest.approx(per_w.mean(), rel=1e-12)  # same seed -> same draws
    # one objective: Dir over one coordinate is w = 1, so E_w[best@k] = best@k with w* = (1,)
    r1 = rng.random((4, 5, 1))
    np.testing.assert_allclose(expected_best_at_k(r1, 3, num_weights=7), best_at_k(r1, 3))
    # one answer: E_w[w . r] = mean(r) for symmetric Dir, e.g. exactly with w and its mirror
    wm = np.array([[0.3, 0.7], [0.7, 0.3]])
    np.testing.assert_allclose(expected_best_at_k(r[:, :1], 1, weight_samples=wm), r[:, 0].mean(-1))
    with pytest.raises(ValueError, match="weight_samples"):
        expected_best_at_k(r, 2, weight_samples=np.ones((3, 3)))
    with pytest.raises(ValueError, match="k must be"):
        expected_best_at_k(r, 0)


def test_max_at_k_metric_is_mean_subset_max():
    rng = np.random.default_rng(2)
    s = rng.choice([0.0, 0.3, 0.3, 0.8, 1.0], size=(3, 7))  # ties included
    for k in (1, 2, 4, 7):
        got = max_at_k(s, k)
        for p in range(3):
            subsets = list(itertools.combinations(s[p], k))
            assert got[p] == pytest.approx(np.mean([max(c) for c in subsets]), rel=1e-12)
    assert max_at_k([0.0, 1.0, 2.0, 4.0], 2) == pytest.approx(17 / 6)  # App. C.1 worked pairs
    with pytest.raises(ValueError, match="k must be"):
        max_at_k(s, 8)


@pytest.mark.parametrize("n, k", [(1, 1), (4, 1), (4, 2), (5, 3), (6, 6)])
def test_unbiased_best_at_k_is_the_mean_over_every_k_subset(n, k):
    """Brute force: every k-subset of the n answers, its best ``w* . r`` among valid answers (the
    empty value when none is valid), averaged; ties and negative scores included."""
    import itertools

    from mojax.metrics import best_at_k_unbiased

    rng = np.random.default_rng(n * 10 + k)
    rewards = np.round(rng.uniform(-1, 1, (7, n, 2)), 1)  # rounding makes ties
    valid = rng.random((7, n)) > 0.3
    w = np.array([0.7, 0.3])
    got = best_at_k_unbiased(rewards, k, weights=w, valid=valid, empty=-5.0)
    for p in range(7):
        scores = []
        for subset in itertools.combinations(range(n), k):
            vals = [rewards[p, i] @ w for i in subset if valid[p, i]]
            scores.append(max(vals) if vals else -5.0)
        assert got[p] == pytest.approx(np.mean(scores), abs=1e-12)
    first_k = best_at_k(rewards, k, weights=w, valid=valid, empty=-5.0)
    if k == n:  # one subset: the whole pool, the first-k estimator's value
        np.testing.assert_allclose(got, first_k)
