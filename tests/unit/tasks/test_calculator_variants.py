"""The calculator's experiment variants: a warm start that over-calls (``redundant`` demos), the
fixed ``N_opt`` and held-out tool efficiency, and AWPO's mode (an outcome reward and a plan the
offline judge scores against the fixed ``N_opt``'s decision)."""

import math

import numpy as np
import pytest

from mojax.tasks.calculator import CalculatorTask, sft_demonstrations, think_plan
from mojax.tasks.framework.judge import OverlapJudge


def _examples(n=60, split="train"):
    return CalculatorTask().load(split, n, seed=3, mix={"easy": 0.4, "medium": 0.2, "hard": 0.4})


def test_redundant_demos_call_twice_with_the_same_expression():
    demos = sft_demonstrations(_examples(), seed=1, behaviours={"redundant": 1.0})
    for d in demos:
        expr = d.example.meta["expr"]
        calls = [t for t, trainable in d.segments if t.startswith("<calc>")]
        assert calls == [f"<calc>{expr}</calc>"] * 2 and d.n_calls == 2
        assert d.response.endswith(f"<answer>{d.example.target}</answer>") and d.correct


def test_default_behaviours_keep_their_demos():
    """Adding a behaviour name leaves the default mix's random stream, and so its demos, as is."""
    ex = _examples()
    a = sft_demonstrations(ex, seed=2)
    b = sft_demonstrations(ex, seed=2, behaviours={"always": 0.3, "never": 0.3, "when_hard": 0.4})
    assert [d.response for d in a] == [d.response for d in b]
    with pytest.raises(ValueError, match="behaviours must weight"):
        sft_demonstrations(ex, behaviours={"sometimes": 1.0})


def test_tool_efficiency_against_the_fixed_n_opt():
    task, ex = CalculatorTask(), _examples(8, "test")
    calls = np.random.default_rng(0).integers(0, 4, (8, 3))
    got = task.eval_metrics(ex, None, None, calls)
    want_eff, want_red = [], []
    for p, e in enumerate(ex):  # a loop from the definition
        n_opt = 0 if e.meta["difficulty"] == "easy" else 1
        for c in calls[p]:
            want_eff.append(math.exp(-0.7 * abs(int(c) - n_opt)))
            want_red.append(max(int(c) - n_opt, 0))
    assert got["tool_efficiency"] == pytest.approx(np.mean(want_eff))
    assert got["redundant_calls"] == pytest.approx(np.mean(want_red))


def test_awpo_mode_scores_format_and_correctness_and_judges_the_plan():
    task = CalculatorTask(mode="awpo")
    assert task.objective_names == ("r_out", "r_reason") and task.external_objectives == (
        "r_reason",
    )
    (hard,) = [e for e in _examples() if e.meta["difficulty"] == "hard"][:1]
    right = f"{think_plan(True)}<calc>{hard.meta['expr']}</calc><output>{hard.target}</output>"
    right += f"<answer>{hard.target}</answer>"
    assert task.score(right, hard).tolist() == [2.0, 0.0]
    assert task.score(f"<answer>{hard.target}</answer>", hard).tolist() == [1.0, 0.0]
    judge, ref = OverlapJudge(), task.judge_reference(hard)
    assert ref == think_plan(True)
    assert judge.score("", right, ref) == 1.0
    assert judge.score("", f"{think_plan(False)}<answer>1</answer>", ref) == 0.0
    with pytest.raises(ValueError, match="mode must be one of"):
        CalculatorTask(mode="x")
