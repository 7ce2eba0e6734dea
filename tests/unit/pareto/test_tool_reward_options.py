"""``r_tool``'s two readings of ParetoPO Eq. 4 (issue 47): paid to every sample or to successes
only (``tool_reward.gate``), against the tracked or the task's fixed ``N_optimal``
(``tool_reward.n_opt``), checked against a numpy loop written from the equation."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from mojax.config import ConfigError
from mojax.pareto import NOptimalTracker, fixed_tool_reward, gate_by_success
from mojax.rewards import ToolEfficiency, score_rollouts, tool_column
from mojax.tasks.calculator import CalculatorTask, Problem


def eq4_loop(batches, *, gate, n_opt, fixed, alpha=0.7):
    """Eq. 4, ``exp(-alpha |N_call - N_optimal|)``; ``N_optimal`` the fewest calls of a successful
    trajectory of the prompt so far, current group included ("tracked"; no success yet: 0 reward),
    or ``fixed[prompt]``; with ``gate="success"`` a failed sample is paid 0."""
    table, out = {}, []
    for ids, calls, success in batches:
        r = np.zeros(calls.shape)
        for p, pid in enumerate(ids):
            wins = [int(c) for c, ok in zip(calls[p], success[p]) if ok]
            if wins:
                table[pid] = min(wins + ([table[pid]] if pid in table else []))
            for g in range(calls.shape[1]):
                if gate == "success" and not success[p][g]:
                    continue
                target = fixed[pid] if n_opt == "fixed" else table.get(pid)
                if target is not None:
                    r[p, g] = math.exp(-alpha * abs(int(calls[p][g]) - target))
        out.append(r)
    return out


@pytest.mark.parametrize("gate", ["all", "success"])
@pytest.mark.parametrize("n_opt", ["tracked", "fixed"])
def test_tool_column_matches_the_eq4_loop(gate, n_opt):
    rng = np.random.default_rng(0 if gate == "all" else 1)
    fixed = {f"q{i}": int(rng.integers(0, 2)) for i in range(6)}
    task = SimpleNamespace(name="fake", optimal_calls=lambda ex: fixed[ex.id])
    batches = []
    for _ in range(4):  # prompts recur across batches: the tracked table carries over
        ids = list(rng.choice(sorted(fixed), 3, replace=False))
        batches.append((ids, rng.integers(0, 4, (3, 5)), rng.random((3, 5)) < 0.4))
    want = eq4_loop(batches, gate=gate, n_opt=n_opt, fixed=fixed)
    tracker = NOptimalTracker()
    for (ids, calls, success), w in zip(batches, want):
        examples = [SimpleNamespace(id=i) for i in ids]
        tracker, got = tool_column(task, examples, calls, success, tracker, gate=gate, n_opt=n_opt)
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=0)
    assert len(np.unique(np.concatenate([w.ravel() for w in want]))) >= 3  # a case with substance


def test_the_issue_case_a_wrong_mental_answer_is_paid_only_ungated():
    """A hard problem (fixed N_opt = 1): a wrong direct answer and a correct call."""
    task = CalculatorTask()
    ex = task.example(Problem(37, "*", 48, "hard"), "h0")
    responses = [
        "<answer>1700</answer>",
        "<calc>37*48</calc><output>1776</output><answer>1776</answer>",
    ]
    e = math.exp(-0.7)
    cases = {
        ("all", "tracked"): [1.0, e],  # the wrong answer (0 calls) scores (0, 1.0): non-dominated
        ("success", "tracked"): [0.0, e],
        ("all", "fixed"): [e, 1.0],
        ("success", "fixed"): [0.0, 1.0],
    }
    for (gate, n_opt), want in cases.items():
        # tracked: a previous success with 0 calls makes N_opt 0, as in the issue
        tracker = NOptimalTracker({"h0": 0})
        source = ToolEfficiency(gate=gate, n_opt=n_opt)
        states = {"tool_efficiency": tracker.to_state()}
        out = score_rollouts(task, [ex], responses, [0, 1], 2, sources=[source], states=states)
        np.testing.assert_allclose(out.rewards[0, :, 0], [0.0, 1.0])
        np.testing.assert_allclose(
            out.rewards[0, :, 1], want, rtol=1e-6, err_msg=str((gate, n_opt))
        )


def test_helpers_check_their_input():
    with pytest.raises(ValueError, match="gate must be one of"):
        gate_by_success(np.ones((1, 2)), np.ones((1, 2), bool), "some")
    with pytest.raises(ValueError, match="success must have shape"):
        gate_by_success(np.ones((1, 2)), np.ones((2, 1), bool), "success")
    with pytest.raises(ValueError, match=r"n_opt \[P\]"):
        fixed_tool_reward(np.ones((2, 3)), [0, 1, 1])
    with pytest.raises(ValueError, match="n_opt must be one of"):
        tool_column(
            CalculatorTask(),
            [],
            np.zeros((0, 2)),
            np.zeros((0, 2), bool),
            NOptimalTracker(),
            n_opt="x",
        )
    task = SimpleNamespace(name="nofix")
    with pytest.raises(ValueError, match="has no optimal_calls"):
        tool_column(
            task, [SimpleNamespace(id=0)], [[1]], [[True]], NOptimalTracker(), n_opt="fixed"
        )


def test_config_keys_are_validated_naming_the_allowed_values():
    from mojax.spec.sections import ToolRewardSpec

    base = dict(alpha=0.7, no_success="zero")
    assert ToolRewardSpec(**base).gate == "success" and ToolRewardSpec(**base).n_opt == "tracked"
    with pytest.raises(ConfigError) as err:
        ToolRewardSpec(**base, gate="winners", n_opt="rule")
    text = str(err.value)
    assert (
        "config.tool_reward.gate: 'winners' is not allowed; allowed values: ['all', 'success']"
        in text
    )
    assert (
        "config.tool_reward.n_opt: 'rule' is not allowed; allowed values: ['tracked', 'fixed']"
        in text
    )


def test_a_fixed_n_opt_needs_a_task_rule():
    from mojax.advantages.paretopo import ParetoPOSpec
    from mojax.spec.rules import _n_opt_errors

    para = SimpleNamespace(enabled=True, validation_n_opt="fixed")
    para.reward_options = lambda: ParetoPOSpec.reward_options(para)  # the section's own method
    spec = SimpleNamespace(
        tool_reward=SimpleNamespace(n_opt="fixed"),
        sections={"paretopo": para},
    )
    no_rule = SimpleNamespace(name="qa", objective_names=("r_task", "r_tool"))
    errors = _n_opt_errors(spec, no_rule)
    assert [e.split(":")[0] for e in errors] == [
        "config.tool_reward.n_opt",
        "config.paretopo.validation_n_opt",
    ]
    assert _n_opt_errors(spec, CalculatorTask()) == []
