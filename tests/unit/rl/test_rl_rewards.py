"""Reward batch: task scores, r_tool from the N_optimal table (000 Eq. 4, worked by hand), judge
failures invalid, DAPO overlong shaping (DAPO Eq. 13) and the per-objective group filter."""

import math

import numpy as np
import pytest

from mojax.pareto import NOptimalTracker
from mojax.rewards import ToolEfficiency, groups_with_signal, overlong_penalty, score_rollouts
from mojax.tasks.calculator import CalculatorTask


def test_calculator_rewards_with_tool_efficiency_by_hand():
    task = CalculatorTask()
    exs = task.load("train", 2, seed=0)
    a0, a1 = exs[0].target, exs[1].target
    responses = [
        f"<answer>{a0}</answer>",  # right, 0 calls -> N_opt(p0) = 0
        f"<calc>x</calc><output>{a0}</output><answer>{a0}</answer>",  # right, 1 call
        "<answer>-99999</answer>",  # wrong, 0 calls
        f"<calc>x</calc><output>{a1}</output><answer>{a1}</answer>",  # right, 1 call -> N_opt(p1)=1
        "garbage without an answer",
        f"<calc>x</calc><output>1</output><calc>y</calc><output>2</output><answer>{a1}</answer>",
    ]
    n_calls = [0, 1, 0, 1, 0, 2]
    out = score_rollouts(task, exs, responses, n_calls, 3, sources=[ToolEfficiency()])
    e = math.exp(-0.7)
    np.testing.assert_allclose(out.rewards[..., 0], [[1, 1, 0], [1, 0, 1]])
    np.testing.assert_allclose(out.rewards[..., 1], [[1, e, 1], [1, e, e]], rtol=1e-6)
    assert out.valid.all()
    tracker = NOptimalTracker.from_state(out.states["tool_efficiency"])
    assert tracker.table == {exs[0].id: 0, exs[1].id: 1}
    assert out.metrics["reward/r_task/mean"] == pytest.approx(4 / 6)
    assert out.metrics["tool/calls_mean"] == pytest.approx(4 / 6)
    # a prompt with no success so far gets r_tool = 0 ("zero" mode)
    out2 = score_rollouts(
        task, exs[:1], ["<answer>-99999</answer>"] * 2, [1, 0], 2, sources=[ToolEfficiency()]
    )
    np.testing.assert_array_equal(out2.rewards[..., 1], 0.0)


def test_missing_tracker_is_a_clear_error():
    task = CalculatorTask()
    exs = task.load("train", 1, seed=0)
    with pytest.raises(ValueError, match="N_optimal tracker"):
        score_rollouts(task, exs, ["x"], [0], 1)


def test_overlong_penalty_matches_dapo_eq13():
    lengths = np.array([10, 12, 14, 16, 20])
    # max_len 16, buffer 4: 0 up to 12, then (12 - L)/4, -1 at 16 and beyond
    np.testing.assert_allclose(overlong_penalty(lengths, 16, 4), [0, 0, -0.5, -1, -1])
    np.testing.assert_array_equal(overlong_penalty(lengths, 16, 0), 0)


def test_groups_with_signal_is_per_objective():
    r = np.zeros((4, 3, 2), np.float32)
    r[1, :, 0] = [1, 1, 1]  # constant
    r[2, :, 1] = [0, 0.5, 0]  # only the second objective varies: kept
    r[3, :, 0] = [1, 0, 0]
    valid = np.ones((4, 3), bool)
    valid[3, 1:] = False  # one valid sample left: dropped
    np.testing.assert_array_equal(groups_with_signal(r, valid), [False, False, True, False])
