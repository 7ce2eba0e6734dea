"""best@k, pass@k, reward-space diversity and collinearity against closed forms and loops."""

import itertools
from math import comb

import numpy as np
import pytest
from scipy import stats

from mojax.metrics import best_at_k, collinearity, flatten_sets, pass_at_k, reward_diversity


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
