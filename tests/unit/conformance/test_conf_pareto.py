"""Peer conformance: non-dominated sorting and hypervolume vs moocore's and pymoo's own test cases.

mojax maximises every objective; moocore and pymoo minimise by default, so minimisation cases are
passed negated (points and reference point). mojax's ``nondominated_rank`` treats exact duplicates
as one front (moocore's ``keep_weakly=True``); ``nondominated_filter`` keeps the first copy of a
duplicate (moocore's default ``keep_weakly=False``).
"""

import moocore
import numpy as np
import pytest

from mojax.pareto import hv_contribution, hypervolume, nondominated_filter, nondominated_rank


def ranks_min(points):
    """mojax ranks of a minimisation problem (negated rows)."""
    return np.asarray(nondominated_rank(-np.asarray(points, np.float32)))


def test_moocore_hv_input1():
    """multi-objective/moocore python/tests/test_moocore.py::TestHypervolume::test_hv_output:
    input1.dat sets 1 and 2, ref (10, 10) -> 90.46272765 and 53.969708954 (minimisation)."""
    x = moocore.get_dataset("input1.dat")
    for set_id, want in ((1, 90.46272765), (2, 53.969708954)):
        pts = x[x[:, 2] == set_id, :2]
        assert hypervolume(-pts, -np.array([10.0, 10.0])) == pytest.approx(want, rel=1e-9)


def test_moocore_hv_small_cases():
    """Same test: ref (2, 2, 2), x [[1, 0, 1], [0, 1, 0]] -> 5.0 (minimisation), and the
    ``maximise=True`` case ref (-2, -2, -2), x [[-1, 0, -1], [0, -1, 0]] -> 5.0 (as is)."""
    x = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    assert hypervolume(-x, -np.full(3, 2.0)) == 5.0
    assert hypervolume(np.array([[-1.0, 0.0, -1.0], [0.0, -1.0, 0.0]]), np.full(3, -2.0)) == 5.0
    # the contribution of one point to the other: 5 - 4 (the volume of [0,1,0] alone is 2*1*2)
    assert hv_contribution(-x[0], -x[1:], -np.full(3, 2.0)) == pytest.approx(1.0)


@pytest.mark.parametrize("extra_dims", [0, 1, 2])
def test_moocore_keep_weakly(extra_dims):
    """moocore test_is_nondominated_keep_weakly (minimisation, zero columns appended): the 9 points
    [[2,0],[1,1],[3,0],[2,0],[1,2],[3,0],[0,2],[1,1],[1,1]] -> keep_weakly=True front
    [T,T,F,T,F,F,T,T,T] (mojax rank 0), default (first copy only) [T,T,F,F,F,F,T,F,F] (mojax
    ``nondominated_filter``); and [[1,0,1],[1,1,1],[0,1,1],[1,0,1],[1,1,0],[1,1,1]] ->
    weak [T,F,T,T,T,F], default [T,F,T,F,T,F]."""
    cases = [
        (
            [[2, 0], [1, 1], [3, 0], [2, 0], [1, 2], [3, 0], [0, 2], [1, 1], [1, 1]],
            [True, True, False, True, False, False, True, True, True],
            [True, True, False, False, False, False, True, False, False],
        ),
        (
            [[1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]],
            [True, False, True, True, True, False],
            [True, False, True, False, True, False],
        ),
    ]
    for x, weak, strict in cases:
        x = np.asarray(x, np.float64)
        x = np.concatenate([x, np.zeros((len(x), extra_dims))], axis=1)
        assert (ranks_min(x) == 0).tolist() == weak
        np.testing.assert_array_equal(nondominated_filter(-x), -x[np.asarray(strict)])


def test_moocore_is_nondominated():
    """moocore test_is_nondominated: input1.dat set 3 -> [F,F,F,F,T,F,T,T,F,T] (minimisation);
    the 4-objective maximisation case keeps rows [0,0,1,2], [10,20,0,0], [20,10,0,0]."""
    x = moocore.get_dataset("input1.dat")
    sub = x[x[:, 2] == 3, :2]
    want = [False, False, False, False, True, False, True, True, False, True]
    assert (ranks_min(sub) == 0).tolist() == want
    y = np.array([[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 1, 2], [1, 0, 0, 0],
                  [10, 20, 0, 0], [20, 10, 0, 0], [2, 2, 0, 0]], np.float32)  # fmt: skip
    front = np.asarray(nondominated_rank(y)) == 0
    np.testing.assert_array_equal(y[front], [[0, 0, 1, 2], [10, 20, 0, 0], [20, 10, 0, 0]])


def test_moocore_nondominated_sorting_fronts():
    """moocore test_nondominated_sorting_3d (three fronts, one front, five fronts) and
    test_pareto_rank_dim0_dim1 (1-D: [0..4] -> ranks 0..4; with x[2] = 1 -> [0, 1, 1, 2, 3])."""
    three = [[1, 2, 3], [3, 1, 2], [2, 3, 1], [10, 20, 30], [30, 10, 20], [20, 30, 10],
             [100, 200, 300], [300, 100, 200], [200, 300, 100]]  # fmt: skip
    assert ranks_min(three).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert ranks_min([[1, 2, 3], [3, 1, 2], [2, 3, 1]]).tolist() == [0, 0, 0]
    assert ranks_min([[k, k, k] for k in range(1, 6)]).tolist() == [0, 1, 2, 3, 4]
    x = np.arange(5.0).reshape(-1, 1)
    assert ranks_min(x).tolist() == [0, 1, 2, 3, 4]
    x[2] = 1
    assert ranks_min(x).tolist() == [0, 1, 1, 2, 3]


def _pymoo_fronts(F):
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    ranks = np.full(len(F), -1)
    for r, idx in enumerate(NonDominatedSorting(method="fast_non_dominated_sort").do(F)):
        ranks[idx] = r
    return ranks


def test_pymoo_non_dominated_sorting_cases():
    """anyoptimization/pymoo tests/misc/test_non_dominated_sorting.py builds F = random (100, 2)
    and F = ones (n, 3) with random columns 1-2 (a tied first objective) and checks that sorters
    agree; here mojax agrees with pymoo's fast non-dominated sort on the same constructions
    (seeded; n = 300 instead of 1000 to keep the suite fast)."""
    rng = np.random.default_rng(0)
    f2 = rng.random((100, 2))
    np.testing.assert_array_equal(ranks_min(f2), _pymoo_fronts(f2))
    f3 = np.ones((300, 3))
    f3[:, 1:] = rng.random((300, 2))
    np.testing.assert_array_equal(ranks_min(f3), _pymoo_fronts(f3))


def _pymoo_case(problem, ref):
    """pymoo tests/indicators/test_hv.py case_2d / case_3d: the true front[::10] * 1.2, permuted
    with np.random.seed(1), reference point 1.5 per objective (minimisation)."""
    np.random.seed(1)
    f = problem.pareto_front()[::10] * 1.2
    return f[np.random.permutation(len(f))], np.asarray(ref, np.float64)


@pytest.mark.parametrize("case", ["2d", "3d"])
def test_pymoo_hv_cases(case):
    from pymoo.indicators.hv import HV
    from pymoo.problems.many import DTLZ1
    from pymoo.problems.multi import ZDT1

    problem, ref = (ZDT1(), [1.5, 1.5]) if case == "2d" else (DTLZ1(), [1.5, 1.5, 1.5])
    f, ref = _pymoo_case(problem, ref)
    want = HV(ref_point=ref)(f)
    assert hypervolume(-f, -ref) == pytest.approx(want, rel=1e-9)
    # contributions, as pymoo's test_hvc_2d checks them: HV(all) - HV(all but i)
    for i in range(0, len(f), max(1, len(f) // 5)):
        rest = np.delete(f, i, axis=0)
        want_i = want - HV(ref_point=ref)(rest)
        assert hv_contribution(-f[i], -rest, -ref) == pytest.approx(want_i, rel=1e-7, abs=1e-12)
