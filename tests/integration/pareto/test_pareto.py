"""Non-dominated sorting vs moocore and a brute-force loop; archive; tool-efficiency tracker."""

import json

import jax
import jax.numpy as jnp
import moocore
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mojax.pareto import (
    NOptimalTracker,
    archive_add,
    dominance_matrix,
    nondominated_filter,
    nondominated_rank,
    tool_efficiency_reward,
)
from mojax.pareto import nondominated as nd_mod


def brute_rank(points, valid):
    """Front peeling written from the definition (maximisation), one group."""
    g = len(points)
    ranks = np.full(g, -1)
    remaining = [i for i in range(g) if valid[i]]
    front = 0
    while remaining:
        current = []
        for j in remaining:
            dominated = False
            for i in remaining:
                if all(points[i] >= points[j]) and any(points[i] > points[j]):
                    dominated = True
                    break
            if not dominated:
                current.append(j)
        for j in current:
            ranks[j] = front
        remaining = [i for i in remaining if i not in current]
        front += 1
    return ranks


def moocore_rank(points, valid):
    """moocore.pareto_rank (minimises) on the negated valid rows; -1 elsewhere."""
    out = np.full(len(points), -1)
    idx = np.flatnonzero(valid)
    if idx.size:
        out[idx] = moocore.pareto_rank(-np.asarray(points[idx], dtype=np.float64))
    return out


@pytest.mark.parametrize(
    "g,m,hi", [(1, 1, 4), (1, 3, 4), (2, 2, 1), (8, 2, 4), (16, 3, 4), (16, 5, 2), (64, 2, 4),
               (256, 2, 9), (256, 4, 3), (40, 7, 1)]
)  # fmt: skip
def test_matches_moocore_bulk(g, m, hi):
    """Thousands of groups of integer objectives (many ties) with random masks."""
    rng = np.random.default_rng(g * 100 + m)
    n = max(20, 4000 // g)
    pts = rng.integers(0, hi + 1, size=(n, g, m))
    valid = rng.random((n, g)) < 0.85
    valid[0] = True  # one fully valid group
    valid[1] = False  # one fully invalid group
    got = np.asarray(nondominated_rank(pts, valid))
    assert got.dtype == np.int32 and got.shape == (n, g)
    for b in range(n):
        np.testing.assert_array_equal(got[b], moocore_rank(pts[b], valid[b]), err_msg=f"group {b}")
    if g <= 16:
        for b in range(min(n, 300)):
            np.testing.assert_array_equal(got[b], brute_rank(pts[b], valid[b]))


def test_float_objectives_and_no_mask():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(500, 16, 3)).astype(np.float32)
    got = np.asarray(nondominated_rank(pts))
    for b in range(500):
        np.testing.assert_array_equal(got[b], moocore.pareto_rank(pts[b], maximise=True))


_PAD_B, _PAD_G, _PAD_M = 8, 12, 4


@st.composite
def _groups(draw):
    """One to eight groups, each with its own G, M, value range (ties) and mask."""
    out = []
    for _ in range(draw(st.integers(1, _PAD_B))):
        g = draw(st.integers(1, _PAD_G))
        m = draw(st.integers(1, _PAD_M))
        hi = draw(st.sampled_from([0, 1, 2, 4]))
        pts = draw(hnp.arrays(np.int32, (g, m), elements=st.integers(0, hi)))
        valid = draw(st.one_of(st.just(np.ones(g, bool)), hnp.arrays(np.bool_, (g,))))
        out.append((pts, valid))
    return out


@settings(max_examples=400, deadline=None)
@given(_groups())
def test_hypothesis_vs_brute_and_moocore(groups):
    """~1800 random groups per run, padded to one batch shape so it compiles once: extra rows are
    invalid (they must neither dominate nor be dominated) and extra objectives are constant (a
    constant objective changes no dominance relation)."""
    padded = np.full((_PAD_B, _PAD_G, _PAD_M), 7, dtype=np.int32)
    pvalid = np.zeros((_PAD_B, _PAD_G), bool)
    for b, (pts, valid) in enumerate(groups):
        g, m = pts.shape
        padded[b, :g, :m] = pts
        pvalid[b, :g] = valid
    got = np.asarray(nondominated_rank(padded, pvalid))
    for b, (pts, valid) in enumerate(groups):
        g = pts.shape[0]
        assert np.all(got[b, g:] == -1)
        np.testing.assert_array_equal(got[b, :g], brute_rank(pts, valid))
        np.testing.assert_array_equal(got[b, :g], moocore_rank(pts, valid))


def test_edge_cases():
    # all equal -> one front; duplicates share a front
    assert np.all(np.asarray(nondominated_rank(np.ones((5, 3)))) == 0)
    dup = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0], [2.0, 1.0]])
    np.testing.assert_array_equal(nondominated_rank(dup), [0, 0, 1, 0])
    # G = 1
    np.testing.assert_array_equal(nondominated_rank(np.array([[3.0, -1.0]])), [0])
    # all invalid
    np.testing.assert_array_equal(nondominated_rank(np.ones((3, 2)), np.zeros(3, bool)), [-1] * 3)
    # invalid rows neither dominate nor are dominated
    pts = np.array([[5.0, 5.0], [1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(nondominated_rank(pts, [False, True, True]), [-1, 0, 1])
    # chain: every point its own front
    chain = np.arange(6.0)[:, None].repeat(2, 1)
    np.testing.assert_array_equal(nondominated_rank(chain), [5, 4, 3, 2, 1, 0])
    # bool objectives, leading batch axes
    b = np.random.default_rng(1).random((2, 3, 7, 2)) < 0.5
    got = np.asarray(nondominated_rank(b))
    assert got.shape == (2, 3, 7)
    for i in np.ndindex(2, 3):
        np.testing.assert_array_equal(
            got[i], moocore.pareto_rank(b[i].astype(float), maximise=True)
        )


def test_bad_input_and_nonfinite():
    with pytest.raises(ValueError, match="M = 0"):
        nondominated_rank(np.zeros((3, 0)))
    with pytest.raises(ValueError, match="valid must have shape"):
        nondominated_rank(np.zeros((2, 3, 2)), np.ones((3, 2), bool))
    with pytest.raises(ValueError, match="points"):
        nondominated_rank(np.zeros(3))
    nan = np.array([[1.0, np.nan], [0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="non-finite"):
        nondominated_rank(nan)
    # masked NaN is fine; inside jit a NaN row is treated as invalid
    np.testing.assert_array_equal(nondominated_rank(nan, [False, True, True]), [-1, 1, 0])
    got = jax.jit(nondominated_rank)(jnp.asarray(nan))
    np.testing.assert_array_equal(got, [-1, 1, 0])


@pytest.mark.parametrize("g", [31, 32, 33, 63, 64, 65, 96, 100, 130])
def test_matches_moocore_word_boundaries(g):
    """Group sizes on both sides of the 32-bit word boundaries (padding bits in the last word)."""
    rng = np.random.default_rng(g)
    n = 60
    ints = rng.integers(0, 4, size=(n, g, 3)).astype(np.float32)
    floats = rng.normal(size=(n, g, 2)).astype(np.float32)
    for pts in (ints, floats):
        valid = rng.random((n, g)) < 0.9
        got = np.asarray(nondominated_rank(pts, valid))
        for b in range(n):
            np.testing.assert_array_equal(got[b], moocore_rank(pts[b], valid[b]), err_msg=f"g={g}")


def test_float_bit_patterns_vs_moocore():
    """Subnormals (flushed to zero by XLA's float arithmetic), -0.0 == +0.0, huge magnitudes,
    negative values and bfloat16 / float16 inputs all rank as moocore ranks them."""
    tiny = np.float32(1e-39)  # subnormal
    big = np.float32(3e38)
    pts = np.array(
        [[2 * tiny, 0], [tiny, 0], [-0.0, 1], [0.0, 1], [-tiny, 2], [-big, 3], [big, -big],
         [-2 * tiny, 2], [0.0, -0.0]],
        np.float32,
    )  # fmt: skip
    np.testing.assert_array_equal(
        nondominated_rank(pts), moocore.pareto_rank(pts.astype(np.float64), maximise=True)
    )
    rng = np.random.default_rng(7)
    vals = np.array([-2.5, -1.0, -0.0, 0.0, 0.5, 1.25, 3.0], np.float32)
    grid = rng.choice(vals, size=(200, 12, 3))
    want = [moocore.pareto_rank(x.astype(np.float64), maximise=True) for x in grid]
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):  # all values exact in each dtype
        got = np.asarray(nondominated_rank(jnp.asarray(grid, dtype)))
        np.testing.assert_array_equal(got, np.stack(want), err_msg=str(dtype))


def test_vmap_and_jit_equal_batched():
    rng = np.random.default_rng(11)
    pts = rng.integers(0, 3, size=(4, 5, 40, 3)).astype(np.float32)
    valid = rng.random((4, 5, 40)) < 0.8
    want = np.asarray(nondominated_rank(pts, valid))
    got_vmap = jax.vmap(nondominated_rank)(jnp.asarray(pts), jnp.asarray(valid))
    got_jit = jax.jit(nondominated_rank)(jnp.asarray(pts), jnp.asarray(valid))
    np.testing.assert_array_equal(got_vmap, want)
    np.testing.assert_array_equal(got_jit, want)
    for i in np.ndindex(4, 5):
        np.testing.assert_array_equal(want[i], moocore_rank(pts[i], valid[i]))


def test_many_fronts_and_single_objective():
    """A 200-point chain (200 fronts, more than one word of rows) and M = 1 (ties share a rank)."""
    rng = np.random.default_rng(3)
    chain = rng.permutation(200).astype(np.float32)[:, None].repeat(2, 1)
    np.testing.assert_array_equal(nondominated_rank(chain), 199 - chain[:, 0].astype(int))
    one = rng.integers(0, 6, size=(30, 70, 1))
    got = np.asarray(nondominated_rank(one))
    for b in range(30):  # rank = number of distinct values above
        want = [np.unique(one[b, :, 0][one[b, :, 0] > v]).size for v in one[b, :, 0]]
        np.testing.assert_array_equal(got[b], want)


def test_dominance_matrix_vs_definition():
    rng = np.random.default_rng(5)
    pts = rng.integers(0, 3, (3, 20, 3)).astype(np.float32)  # G > 16: both code paths exist
    valid = rng.random((3, 20)) < 0.8
    got = np.asarray(dominance_matrix(jnp.asarray(pts), jnp.asarray(valid)))
    for b, i, j in np.ndindex(3, 20, 20):
        want = (
            valid[b, i]
            and valid[b, j]
            and all(pts[b, i] >= pts[b, j])
            and any(pts[b, i] > pts[b, j])
        )
        assert got[b, i, j] == want


def test_traces_once():
    rng = np.random.default_rng(0)
    before = nd_mod._rank_jit._cache_size()
    for _ in range(3):
        nondominated_rank(
            rng.integers(0, 3, (37, 9, 3)).astype(np.float32), rng.random((37, 9)) < 0.9
        )
    assert nd_mod._rank_jit._cache_size() == before + 1


def test_archive_add():
    a = np.zeros((0, 2))
    a, added = archive_add(a, [1.0, 1.0])
    assert added and a.shape == (1, 2)
    a, added = archive_add(a, [0.5, 0.5])  # dominated
    assert not added and a.shape == (1, 2)
    a, added = archive_add(a, [1.0, 1.0])  # duplicate
    assert not added
    a, added = archive_add(a, [2.0, 0.0])  # non-dominated
    assert added and a.shape == (2, 2)
    a, added = archive_add(a, [2.0, 2.0])  # dominates both
    assert added
    np.testing.assert_array_equal(a, [[2.0, 2.0]])
    with pytest.raises(ValueError, match="archive"):
        archive_add(np.zeros((2, 3)), [1.0, 1.0])
    pts = np.random.default_rng(3).integers(0, 4, (40, 3)).astype(float)
    kept = nondominated_filter(pts)
    front = np.unique(pts[moocore.pareto_rank(pts, maximise=True) == 0], axis=0)
    np.testing.assert_array_equal(np.unique(kept, axis=0), front)


def test_tool_efficiency_reward_and_tracker():
    np.testing.assert_allclose(
        tool_efficiency_reward([0, 1, 3], 1), np.exp(-0.7 * np.array([1, 0, 2])), rtol=1e-6
    )
    t = NOptimalTracker()
    n_calls = np.array([[3, 2, 5], [1, 4, 0]])
    success = np.array([[True, True, False], [False, False, False]])
    t, r = t.step(["a", "b"], n_calls, success)
    assert t.get("a") == 2 and t.get("b") is None
    np.testing.assert_allclose(r[0], np.exp(-0.7 * np.abs(n_calls[0] - 2)), rtol=1e-6)
    np.testing.assert_array_equal(r[1], 0.0)  # no success -> zero
    r_min = t.rewards(["a", "b"], n_calls, no_success="group_min")
    np.testing.assert_allclose(r_min[1], np.exp(-0.7 * np.abs(n_calls[1] - 0)), rtol=1e-6)
    r_zero = t.rewards(["a", "b"], n_calls, no_success="assume_zero_calls")
    np.testing.assert_allclose(r_zero[1], np.exp(-0.7 * n_calls[1]), rtol=1e-6)
    # N_opt only decreases, across epochs; a failed run with fewer calls does not count
    t2, _ = t.step(["a"], np.array([[1, 0]]), np.array([[True, False]]))
    assert t2.get("a") == 1 and t.get("a") == 2  # immutable
    t3, _ = t2.step(["a"], np.array([[4]]), np.array([[True]]))
    assert t3.get("a") == 1
    # checkpoint round trip through JSON keeps int and str ids
    t4, _ = t3.step([7], np.array([[2]]), np.array([[True]]))
    back = NOptimalTracker.from_state(json.loads(json.dumps(t4.to_state())))
    assert back == t4 and back.get(7) == 2
    with pytest.raises(ValueError, match="no_success"):
        t.rewards(["a"], np.array([[1]]), no_success="bogus")
    with pytest.raises(ValueError, match="prompt_ids"):
        t.update(["a", "b"], np.array([[1]]), np.array([[True]]))
    with pytest.raises(ValueError, match="n_calls"):
        t.update(["a"], np.array([[-1]]), np.array([[True]]))
