"""Phases of ``mojax.rl.step``: the PPO batch keeps multi-answer rollouts without a valid answer,
SAW gets each objective's theoretical minimum from the task, and a judge failure invalidates only
the reasoning objective. Each was wrong before the step-layer redesign (issue 13, items 2-4)."""

import dataclasses
import types

import numpy as np
import pytest

from mojax.rl.builders import method_kwargs
from mojax.rl.episodes import Episodes
from mojax.rl.step import assemble
from mojax.tasks.framework.base import Example


def _episodes(p=2, g=2, s=None, valid=None, set_valid=None):
    t = 4
    rollout = types.SimpleNamespace(
        tokens=np.full((p * g, t), 5, np.int32),
        logprobs=np.full((p * g, t), -1.0, np.float32),
        loss_mask=np.ones((p * g, t), bool),
        lengths=np.full((p * g,), t, np.int32),
    )
    ex = [
        Example(id=f"e{i}", messages=({"role": "user", "content": "x"},), target=0)
        for i in range(p)
    ]
    valid = np.ones((p, g), bool) if valid is None else valid
    sets = None if s is None else np.zeros((p, g, s, 2), np.float32)
    return Episodes(
        ex, [[1, 2, 3]] * p, g, rollout, np.zeros((p, g, 2)), valid, {}, sets, set_valid
    )


def _run():
    spec = types.SimpleNamespace(packing=types.SimpleNamespace(enabled=False))
    learner = types.SimpleNamespace(total_len=8, ref_logprobs=None)
    return types.SimpleNamespace(learner=learner, spec=spec)


def test_multi_answer_rollouts_without_a_valid_answer_stay_in_the_loss():
    set_valid = np.ones((2, 2, 3), bool)
    set_valid[1, 0] = False  # rollout (1, 0): none of its S = 3 answers parsed
    eps = _episodes(s=3, valid=set_valid.any(-1), set_valid=set_valid)
    adv = np.array([[0.5, -0.5], [-1.68, 1.68]], np.float32)
    batch = assemble(_run(), eps, types.SimpleNamespace(advantages=adv, clip_eps=None))
    rows = batch.loss_mask.sum(-1)
    assert rows[2] == rows[0] > 0  # row p*G + g = 2 keeps its (negative) advantage's gradient
    assert batch.advantages[2] == pytest.approx(-1.68)


def test_single_answer_invalid_rows_and_dropped_groups_get_no_gradient():
    valid = np.array([[True, False], [True, True]])
    eps = dataclasses.replace(_episodes(valid=valid), kept=np.array([True, False]))
    batch = assemble(_run(), eps, types.SimpleNamespace(advantages=np.ones((2, 2)), clip_eps=None))
    assert (batch.loss_mask.sum(-1) > 0).tolist() == [True, False, False, False]


def test_saw_offsets_by_the_tasks_theoretical_minima():
    from mojax.advantages import METHODS
    from mojax.tasks.toolrl import ToolRLTask

    task = ToolRLTask()

    def spec(name, kwargs):
        return types.SimpleNamespace(method=METHODS[name], advantage=kwargs)

    kw = method_kwargs(spec("saw_grpo", {"fallback": True}), task)
    assert kw["reward_min"] == tuple(float(o.min) for o in task.objectives) == (0.0, -3.0)
    assert kw["objective_names"] == task.objective_names and kw["fallback"] is True
    kw = method_kwargs(spec("saw_gdpo", {"reward_min": (1.0, 2.0)}), task)
    assert kw["reward_min"] == (1.0, 2.0)  # the config wins
    assert method_kwargs(spec("grpo", {"weights": (0.6, 0.4)}), task) == {"weights": (0.6, 0.4)}


class _FlakyJudge:
    """Scores 0.8, except the second response of every call, where it fails."""

    def score(self, prompt, response, reference):
        if response == "fail":
            raise RuntimeError("judge timed out")
        return 0.8


def test_judge_failure_invalidates_only_the_reasoning_objective():
    from mojax.rewards import JudgeSource, score_rollouts
    from mojax.tasks.toolrl import ToolRLTask

    task = ToolRLTask(mode="awpo")
    gold = "<think>x</think>\n<response>hello</response>"
    ex = [Example(id="a", messages=({"role": "user", "content": "hi"},), target=gold)]
    responses = ["<think>y</think>\n<response>hello</response>", "fail"]
    rb = score_rollouts(task, ex, responses, np.zeros(2), 2, sources=[JudgeSource(_FlakyJudge())],
                        prompts_text=["hi"])  # fmt: skip
    k = task.objective_index("r_reason")
    assert rb.objective_valid[..., k].tolist() == [[True, False]]
    assert rb.objective_valid[..., 1 - k].tolist() == [[True, True]]
    assert rb.rewards[0, 0, k] == pytest.approx(0.8) and rb.rewards[0, 1, k] == 0.0
    assert rb.valid[0, 0]  # the scored sample keeps its outcome reward
