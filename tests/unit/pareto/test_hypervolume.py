"""Hypervolume vs moocore, pymoo and inclusion-exclusion; ParetoPO Stage-1 state."""

import itertools
import json

import moocore
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pymoo.indicators.hv import HV

from mojax.pareto import (
    Stage1State,
    hv_contribution,
    hypervolume,
    stage1_cancellation_warning,
    stage1_init,
    stage1_sample_scales,
    stage1_update,
)


def hv_inclusion_exclusion(points, ref):
    """Exact HV (maximisation) from the union-of-boxes formula; boxes [ref, p] for p > ref."""
    pts = [p for p in np.asarray(points, float) if np.all(p > ref)]
    total = 0.0
    for k in range(1, len(pts) + 1):
        for subset in itertools.combinations(pts, k):
            corner = np.min(subset, axis=0)
            total += (-1) ** (k + 1) * np.prod(corner - ref)
    return total


def test_known_values():
    assert hypervolume([[1.0, 1.0], [2.0, 0.5]], [0.0, 0.0]) == pytest.approx(1.5)
    assert hypervolume(np.zeros((0, 2)), [0.0, 0.0]) == 0.0
    # worse than the reference in one objective: adds nothing
    assert hypervolume([[-1.0, 3.0]], [0.0, 0.0]) == 0.0
    # on the reference boundary: adds nothing
    assert hypervolume([[0.0, 3.0], [1.0, 1.0]], [0.0, 0.0]) == pytest.approx(1.0)
    # duplicates count once
    assert hypervolume([[1.0, 2.0]] * 4, [0.0, 0.0]) == pytest.approx(2.0)
    # M = 1 and M = 3
    assert hypervolume([[3.0], [1.0]], [0.5]) == pytest.approx(2.5)
    assert hypervolume([[1.0, 1.0, 1.0]], [0.0, 0.0, 0.0]) == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda m: st.tuples(
            hnp.arrays(np.float64, st.tuples(st.integers(0, 8), st.just(m)),
                       elements=st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.5])),
            hnp.arrays(np.float64, (m,), elements=st.sampled_from([-0.5, 0.0, 0.5])),
        )
    )
)  # fmt: skip
def test_hypervolume_vs_references(case):
    """Includes points worse than the reference, on it, and duplicates (coarse value grid)."""
    pts, ref = case
    got = hypervolume(pts, ref)
    assert got == pytest.approx(hv_inclusion_exclusion(pts, ref), rel=1e-9, abs=1e-12)
    better = pts[np.all(pts > ref, axis=1)]
    if pts.shape[1] >= 2 and len(better):
        assert got == pytest.approx(moocore.hypervolume(pts, ref=ref, maximise=True), rel=1e-12)
        assert got == pytest.approx(HV(ref_point=-ref)(-pts), rel=1e-9)


def test_random_float_sets_vs_pymoo():
    rng = np.random.default_rng(0)
    for m in (2, 3, 5):
        for _ in range(20):
            pts = rng.normal(size=(30, m))
            ref = rng.normal(size=m) - 1.0
            assert hypervolume(pts, ref) == pytest.approx(HV(ref_point=-ref)(-pts), rel=1e-9)


def test_hv_contribution():
    ref = np.zeros(2)
    arch = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert hv_contribution([1.5, 1.5], arch, ref) == pytest.approx(0.25)
    assert hv_contribution([0.5, 0.5], arch, ref) == 0.0  # dominated
    assert hv_contribution([1.0, 2.0], arch, ref) == 0.0  # duplicate
    assert hv_contribution([-1.0, 5.0], arch, ref) == 0.0  # worse than ref
    assert hv_contribution([3.0, 3.0], np.zeros((0, 2)), ref) == pytest.approx(9.0)
    rng = np.random.default_rng(1)
    for _ in range(50):
        a, p = rng.normal(size=(5, 3)), rng.normal(size=3)
        ref3 = np.full(3, -2.0)
        want = hv_inclusion_exclusion(np.vstack([a, p]), ref3) - hv_inclusion_exclusion(a, ref3)
        assert hv_contribution(p, a, ref3) == pytest.approx(want, abs=1e-9)
    with pytest.raises(ValueError, match="archive"):
        hv_contribution([1.0, 1.0], np.zeros((2, 3)), ref)
    with pytest.raises(ValueError, match="points"):
        hypervolume([[np.nan, 1.0]], ref)


def test_stage1_global_matches_algorithm1():
    v0 = np.array([0.2, 0.5])
    s = stage1_init(v0)
    assert s.r_pareto == 1.0 and s.dhv_bar == 0.0
    np.testing.assert_array_equal(s.ref, v0)
    traj = [
        np.array([0.4, 0.6]),
        np.array([0.3, 0.55]),
        np.array([0.5, 0.52]),
        np.array([0.6, 0.7]),
    ]
    # independent replay of Alg. 1 lines 13-17 with numpy + the inclusion-exclusion HV
    archive, bar = [v0], 0.0
    for v in traj:
        dhv = hv_inclusion_exclusion(np.vstack(archive + [v]), v0) - hv_inclusion_exclusion(
            np.vstack(archive), v0
        )
        bar = 0.5 * bar + 0.5 * dhv
        if not any(np.all(a >= v) for a in archive):
            archive = [a for a in archive if not (np.all(v >= a) and np.any(v > a))] + [v]
        s, metrics = stage1_update(s, v)
        assert s.dhv_bar == pytest.approx(bar, abs=1e-12)
        assert s.r_pareto == pytest.approx(0.5 + 1.5 * np.tanh(bar), abs=1e-12)
        assert metrics["pareto/archive_size"] == len(archive)
        assert metrics["pareto/hv"] == pytest.approx(hv_inclusion_exclusion(np.vstack(archive), v0))
    assert s.step == 4
    # checkpoint round trip through JSON
    back = Stage1State.from_state(json.loads(json.dumps(s.to_state())))
    np.testing.assert_array_equal(back.archive, s.archive)
    assert back.to_state() == s.to_state()
    with pytest.raises(ValueError, match="unknown"):
        Stage1State.from_state({**s.to_state(), "extra": 1})


def test_stage1_fixed_reference_and_per_trajectory():
    s = stage1_init([0.5, 0.5], ref=[0.0, 0.0])
    assert hypervolume(s.archive, s.ref) == pytest.approx(0.25)
    s, _ = stage1_update(s, [0.6, 0.4])
    rewards = np.array([[[1.0, 1.0], [0.5, 0.5], [0.0, 0.0], [1.0, 1.0]]])
    valid = np.array([[True, True, True, False]])
    scales = stage1_sample_scales(s, rewards, valid)
    assert scales.shape == (1, 4) and scales.dtype == np.float32
    for j in range(3):
        dhv = hv_contribution(rewards[0, j], s.archive, s.ref)
        want = 0.5 + 1.5 * np.tanh(0.5 * s.dhv_bar + 0.5 * dhv)
        assert scales[0, j] == pytest.approx(want, rel=1e-6)
    assert scales[0, 3] == 1.0
    assert scales[0, 0] > scales[0, 1]


def test_cancellation_warning():
    assert "cancels" in stage1_cancellation_warning("global", "grpo")
    assert stage1_cancellation_warning("global", "dr_grpo") is None
    assert stage1_cancellation_warning("per_trajectory", "grpo") is None
    with pytest.raises(ValueError, match="stage1.mode"):
        stage1_cancellation_warning("both", "grpo")
