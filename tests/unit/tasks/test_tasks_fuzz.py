"""Fuzz: random strings never crash any reward function; values are finite and in bounds."""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mojax.tasks import maze as maze_lib
from mojax.tasks import toolrl
from mojax.tasks.calculator import CalculatorTask
from mojax.tasks.framework.base import Example
from mojax.tasks.math import MathTask
from mojax.tasks.maze_task import MazeTask
from mojax.tasks.musique import MuSiQueTask
from mojax.tasks.qa import QATask

CALL = '{"name": "dashboard", "parameters": {"login_id": "user123", "limit": 20}}'
GOLD_CALL = "<think> t </think>\n<tool_call>\n" + CALL + "\n</tool_call>"
GOLD_RESP = "<think> t </think>\n<response> hello there </response>"
GOLD_BOTH = GOLD_CALL + "\n<response> ok </response>"
GOLDS = (GOLD_CALL, GOLD_RESP, GOLD_BOTH, "<think> only </think>")

FRAGMENTS = [
    "<think>",
    "</think>",
    "\n",
    " ",
    "<tool_call>",
    "</tool_call>",
    CALL,
    '{"name": ',
    '"dashboard"',
    '"parameters": {',
    '"login_id": "user123"',
    '"limit": 20',
    "}",
    "}}",
    "[[[[",
    "NaN",
    "1e999",
    "<response>",
    "</response>",
    "<response_1>",
    "</response_1>",
    "<response_2>",
    "</response_2>",
    "<route_1>",
    "</route_1>",
    "UP",
    "DOWN",
    "LEFT",
    "RIGHT",
    ",",
    "<answer>",
    "</answer>",
    "\\boxed{",
    "\\frac{1}{2}",
    "0.5",
    "<support>",
    "</support>",
    "3, 7",
    "99999999999999999999999",
    "<calc>",
    "</calc>",
    "<output>",
    "<search>",
    "</search>",
    "é",
    "\x00",
    "\ud7ff",
    "<|im_end|>",
    "```python",
    "```output",
    "-",
    "37*48",
]
tag_soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=40).map(
    "".join
)
texts = st.one_of(st.text(max_size=300), tag_soup)


def _musique_example():
    para = [{"idx": i, "title": "t", "paragraph_text": "p"} for i in range(20)]
    rec = {
        "paragraphs": para,
        "question": "q",
        "answer": "Eiffel Tower",
        "answer_aliases": ["tour"],
        "question_decomposition": [{"paragraph_support_idx": 3}, {"paragraph_support_idx": 7}],
    }
    return MuSiQueTask.example(rec, "m")


def _user(text):
    return ({"role": "user", "content": text},)


CASES = [
    *[
        (toolrl.ToolRLTask(mode, matching), Example("t", _user("q"), gold))
        for mode in ("toolrl", "awpo", "vpo")
        for matching in ("optimal", "greedy")
        for gold in GOLDS
    ],
    (MathTask(), MathTask().example("p", "\\frac{1}{2}", "m")),
    (MathTask("tags"), MathTask("tags").example("p", ["3", "-3"], "m")),
    (QATask(), Example("q", _user("q"), ("Chief of Protocol", "chief"))),
    (QATask("f1"), Example("q", _user("q"), ("Chief of Protocol",))),
    (MuSiQueTask(), _musique_example()),
    (MazeTask(), Example("z", _user("z"), maze_lib.generate_split("test", 1)[0])),
    (MazeTask(convex_bonus=True), Example("z", _user("z"), maze_lib.generate_split("test", 1)[0])),
    (CalculatorTask(), CalculatorTask().load("test", 1)[0]),
]


def _check(task, rewards, valid):
    assert rewards.dtype == np.float32 and np.isfinite(rewards).all()
    lo = np.array([o.min for o in task.objectives], np.float32)
    hi = np.array([o.max for o in task.objectives], np.float32)
    assert (rewards >= lo).all() and (rewards <= hi).all()
    assert not rewards[~np.asarray(valid)].any()


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(texts)
def test_every_task_scores_any_string(text):
    for task, ex in CASES:
        r, valid, reason = task.score_safe(text, ex)
        _check(task, r[None], [valid])
        # these reward functions handle every string themselves: nothing is left to the wrapper
        assert valid, (task.name, reason)


@FUZZ
@given(texts, st.integers(1, 4), st.booleans())
def test_every_task_scores_any_set(text, s, dedup):
    for task, ex in CASES:
        set_r, set_v = task.score_set(text, ex, s, dedup=dedup)
        assert set_r.shape == (s, task.num_objectives) and set_v.shape == (s,)
        _check(task, set_r, set_v)


@FUZZ
@given(texts, st.sampled_from(GOLDS))
def test_toolrl_public_functions(text, gold):
    assert toolrl.format_reward(text, gold) in (0.0, 1.0)
    for matching in ("optimal", "greedy"):
        c = toolrl.correctness_reward(text, gold, matching)
        assert np.isfinite(c) and -3.0 <= c <= 3.0
        e = toolrl.execution_score(text, gold, matching)
        assert 0.0 <= e <= 1.0
    v = toolrl.vpo_reward_vector(text, gold)
    assert v.shape == (4,) and np.isfinite(v).all() and (v >= 0).all() and (v <= 1).all()


@FUZZ
@given(
    st.lists(
        st.dictionaries(
            st.text(max_size=3),
            st.one_of(
                st.integers(),
                st.floats(allow_nan=True),
                st.text(max_size=5),
                st.none(),
                st.lists(st.integers(), max_size=2),
            ),
            max_size=3,
        ),
        max_size=3,
    )
)
def test_toolrl_random_call_lists(params_list):
    pred = (
        "<think> x </think>\n<tool_call>\n"
        + "\n".join(json.dumps({"name": "dashboard", "parameters": p}) for p in params_list)
        + "\n</tool_call>"
    )
    for matching in ("optimal", "greedy"):
        c = toolrl.correctness_reward(pred, GOLD_CALL, matching)
        assert np.isfinite(c) and -3.0 <= c <= 3.0
    assert np.isfinite(toolrl.vpo_reward_vector(pred, GOLD_CALL)).all()


def test_huge_and_adversarial_outputs():
    huge = [
        "<think>" + "a" * 2_000_000 + "</think>\n<tool_call>\n" + CALL + "\n</tool_call>",
        "<tool_call>\n" + "[" * 100_000 + "\n</tool_call>",  # json recursion depth
        "<response_1>" * 200_000,
        "\\boxed{" * 50_000,
        "<answer>" + "UP " * 300_000 + "</answer>",
        "<support>" + "1," * 300_000 + "</support><answer>x</answer>",
        "<calc>" + "9" * 1_000_000 + "</calc><answer>" + "9" * 5000 + "</answer>",
    ]
    for text in huge:
        for task, ex in CASES[::8] + CASES[24:]:
            r, valid, _ = task.score_safe(text, ex)
            _check(task, r[None], [valid])
            task.score_set(text, ex, 3)
    r = toolrl.correctness_reward(huge[0], GOLD_CALL)
    assert r == 3.0  # the long thought does not change the calls
    assert toolrl.correctness_reward(huge[1], GOLD_CALL) == -3.0
