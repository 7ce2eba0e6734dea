"""Reward sources (``mojax.rewards``): the method reads its column of the per-objective validity mask,
a run builds the sources its task's external objectives need and the method declares, one
rollout's options reach only the sources that have them, and the sources' state per split."""

import numpy as np
import pytest

from mojax.advantages import AWPO, AdvantageInputs, MethodContext, awpo
from mojax.pareto import NOptimalTracker
from mojax.rewards import (
    JudgeSource,
    ToolEfficiency,
    build_sources,
    score_rollouts,
    split_states,
    with_options,
    with_split_states,
)
from mojax.rewards.registry import legacy_objective_valid, migrate_host_dict
from mojax.tasks.calculator import CalculatorTask
from mojax.tasks.toolrl import ToolRLTask


def _awpo_batch():
    rng = np.random.default_rng(0)
    rewards = np.stack([rng.uniform(0, 2, (3, 5)), rng.uniform(0, 1, (3, 5))], -1)
    valid = np.ones((3, 5), bool)
    mask = np.ones((3, 5, 2), bool)
    mask[0, 1, 1] = mask[1, 3, 1] = mask[2, 0, 1] = False  # the judge failed there
    rewards[..., 1] = np.where(mask[..., 1], rewards[..., 1], 0.0)
    return rewards.astype(np.float32), valid, mask


def test_awpo_reads_the_judge_column_of_the_validity_mask():
    rewards, valid, mask = _awpo_batch()
    hooks = AWPO.make_hooks(MethodContext(AWPO, {"r_max": 2.0}))
    got, _, _ = hooks.advantages(
        0, None, AdvantageInputs(rewards, valid, objective_valid=mask), None
    )
    want = awpo(rewards, valid, r_max=2.0, reason_valid=mask[..., 1])
    np.testing.assert_array_equal(np.asarray(got.advantages), np.asarray(want.advantages))
    unmasked = awpo(rewards, valid, r_max=2.0)  # the failures scored as 0: another answer
    assert not np.allclose(np.asarray(unmasked.advantages), np.asarray(want.advantages))
    other = mask.copy()
    other[..., 0] = False  # the outcome column is not the method's to read
    again, _, _ = hooks.advantages(
        0, None, AdvantageInputs(rewards, valid, objective_valid=other), None
    )
    np.testing.assert_array_equal(np.asarray(again.advantages), np.asarray(want.advantages))
    assert AWPO.reward_sources == ("judge",) and "reason_valid" in AWPO.data_args


class _Judge:
    def score(self, prompt, response, reference):
        return 0.5


def test_build_sources_follows_the_external_objectives_and_the_method():
    reward = type("R", (), dict(alpha=0.3, no_success="group_min", gate="success", n_opt="tracked"))
    calc = CalculatorTask()
    (tool,) = build_sources(calc, reward_spec=reward)
    assert tool == ToolEfficiency(alpha=0.3, no_success="group_min", gate="success")
    task = ToolRLTask(mode="awpo")
    judge = _Judge()
    (src,) = build_sources(task, judge=judge, method="awpo", method_sources=("judge",))
    assert isinstance(src, JudgeSource) and src.judge is judge
    with pytest.raises(ValueError, match="estimator 'awpo' needs the reward source 'judge'"):
        build_sources(calc, reward_spec=reward, method="awpo", method_sources=("judge",))
    with pytest.raises(ValueError, match="unknown reward source 'oracle'"):
        build_sources(calc, method="x", method_sources=("oracle",))
    with pytest.raises(ValueError, match=r"'r_tool' but no reward source fills it \(tool_eff"):
        score_rollouts(calc, calc.load("train", 1, seed=0), ["x"], [0], 1)


def test_one_rollouts_options_reach_only_the_sources_that_have_them():
    judge = JudgeSource(_Judge())
    tool, same = with_options([ToolEfficiency(), judge], {"n_opt": "fixed", "elsewhere": 1})
    assert tool == ToolEfficiency(n_opt="fixed") and same is judge
    assert with_options([ToolEfficiency()], {"n_opt": None}) == (ToolEfficiency(),)


def test_the_states_of_one_split_and_of_other_sources_are_kept():
    state = with_split_states({}, "train", {"tool_efficiency": {"a": 1}})
    state = with_split_states(state, "validation", {"tool_efficiency": {"b": 2}, "other": [3]})
    assert state == {"tool_efficiency": {"train": {"a": 1}, "validation": {"b": 2}},
                     "other": {"validation": [3]}}  # fmt: skip
    assert split_states(state, "validation") == {"tool_efficiency": {"b": 2}, "other": [3]}
    assert with_split_states(state, "validation", {}) == {"tool_efficiency": {"train": {"a": 1}}}
    # score_rollouts hands back the states of sources it did not call
    calc = CalculatorTask()
    ex = calc.load("train", 1, seed=0)
    out = score_rollouts(calc, ex, [f"<answer>{ex[0].target}</answer>"], [0], 1,
                         sources=[ToolEfficiency()], states={"other": [3]})  # fmt: skip
    assert out.states["other"] == [3]
    assert NOptimalTracker.from_state(out.states["tool_efficiency"]).table == {ex[0].id: 0}


def test_older_layouts_migrate():
    table = NOptimalTracker({"q": 2}).to_state()
    fields = {"data": {}, "tracker": table, "train_stats": {}}
    assert migrate_host_dict(fields) == {
        "data": {}, "train_stats": {}, "reward_state": {"tool_efficiency": {"train": table}}
    }  # fmt: skip
    assert migrate_host_dict({"data": {}}) == {"data": {}}
    old = np.array([[True, False]])
    mask = legacy_objective_valid({"reason_valid": old}, 3)
    assert mask.shape == (1, 2, 3) and (mask == old[..., None]).all()
    assert legacy_objective_valid({}, 3) is None
