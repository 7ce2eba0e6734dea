"""Calculator tool-use task: generator, splits, tool protocol and SFT demonstrations."""

import ast
import collections
import operator

import numpy as np
import pytest

from mojax.tasks import calculator as C


def _evaluate(expr):
    """Independent test-side calculator: AST over + - * on ints only."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def ev(node):
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(expr)

    return ev(ast.parse(expr, mode="eval").body)


def test_problems_deterministic_disjoint_and_graded():
    a = C.generate_problems("train", 500, seed=3)
    assert a == C.generate_problems("train", 500, seed=3)
    assert a != C.generate_problems("train", 500, seed=4)
    splits = {s: C.generate_problems(s, 400, seed=3) for s in C.SPLITS}
    exprs = {s: {p.expr for p in ps} for s, ps in splits.items()}
    assert not exprs["train"] & exprs["test"] and not exprs["train"] & exprs["validation"]
    assert not exprs["test"] & exprs["validation"]
    counts = collections.Counter(p.difficulty for p in a)
    assert 100 < counts["easy"] < 200 and 100 < counts["medium"] < 200 and counts["hard"] > 150
    for p in a:
        assert p.answer == _evaluate(p.expr)
        if p.difficulty == "easy":
            assert 0 <= p.a <= 9 and 0 <= p.b <= 9
        elif p.difficulty == "hard":
            assert p.op == "*" and p.a >= 12 and p.b >= 3 and p.a * p.b >= 144
    shared = {s: C.generate_problems(s, 400, seed=3, shared_easy_facts=True) for s in C.SPLITS}
    by_split = {s: {p.expr for p in ps if p.difficulty != "easy"} for s, ps in shared.items()}
    easy = {s: {p.expr for p in ps if p.difficulty == "easy"} for s, ps in shared.items()}
    assert not by_split["train"] & by_split["test"] and easy["train"] & easy["test"]
    with pytest.raises(ValueError, match="split"):
        C.generate_problems("dev", 1)
    with pytest.raises(ValueError, match="mix"):
        C.generate_problems("train", 1, mix={"impossible": 1.0})


def test_prompt_and_scoring():
    task = C.CalculatorTask()
    ex = task.load("test", 3, seed=0)[0]
    p = ex.meta["problem"]
    assert ex.messages == ({"role": "user", "content": f"Compute {p.expr}."},)
    assert task.score(f"<answer>{p.answer}</answer>", ex).tolist() == [1.0, 0.0]
    assert task.score(f"<answer> {p.answer} </answer><|im_end|>", ex)[0] == 1.0
    assert task.score(f"<answer>{p.answer + 1}</answer>", ex)[0] == 0.0
    assert task.score(f"<answer>{p.answer}", ex)[0] == 0.0  # unterminated
    assert task.score("<answer>twelve</answer>", ex)[0] == 0.0
    assert task.objective_names == ("r_task", "r_tool") and task.external_objectives == ("r_tool",)


def test_tool_protocol_on_malformed_calls():
    task = C.CalculatorTask()
    assert task.tool_stop == "</calc>"
    assert task.parse_tool_call("<calc>37*48</calc>") == "37*48"
    assert task.parse_tool_call("<calc> 1+2 </calc><output>3</output><calc>4*5</calc>") == "4*5"
    assert task.parse_tool_call("<calc>37*48") is None
    assert task.parse_tool_call("<calc></calc>") is None
    assert task.parse_tool_call("<calc>" + "9" * 500 + "</calc>") is None
    assert (
        task.parse_tool_call("<calc>３７×４８</calc>") == "３７×４８"
    )  # unicode is the tool's job
    assert task.format_observation(" 1776 ") == "<output>1776</output>"


def test_scripted_rollout_needs_only_the_task_attributes():
    """Drive the tool loop the way the rollout does: decode to ``tool_stop``, parse, run, append."""
    task = C.CalculatorTask()
    exs = task.load("train", 60, seed=1)
    for demo in C.sft_demonstrations(exs, seed=1):
        script = "".join(t for t, trainable in demo.segments if trainable)  # what the policy writes
        transcript, n_calls, pos = "", 0, 0
        while True:
            k = script.find(task.tool_stop, pos)
            if k < 0:
                transcript += script[pos:]
                break
            transcript += script[pos : k + len(task.tool_stop)]
            pos = k + len(task.tool_stop)
            expr = task.parse_tool_call(transcript)
            transcript += task.format_observation(str(_evaluate(expr)))
            n_calls += 1
        assert transcript == demo.response
        assert n_calls == demo.n_calls == task.count_tool_calls(transcript)
        assert task.score(transcript, demo.example)[0] == float(demo.correct)


def test_sft_demonstrations_mix_behaviours_and_trade_off():
    task = C.CalculatorTask()
    exs = task.load("train", 3000, seed=0)
    demos = C.sft_demonstrations(exs, seed=0)
    assert demos == C.sft_demonstrations(exs, seed=0)
    beh = collections.Counter(d.behaviour for d in demos)
    assert beh.keys() == {"always", "never", "when_hard"}
    for d in demos:
        hard = d.example.meta["difficulty"] == "hard"
        if d.behaviour == "always" or (d.behaviour == "when_hard" and hard):
            assert d.n_calls == 1 and d.correct
            assert d.segments[1] == (task.format_observation(str(d.example.target)), False)
        else:
            assert d.n_calls == 0 and len(d.segments) == 1 and d.segments[0][1]
    acc = {b: np.mean([d.correct for d in demos if d.behaviour == b]) for b in beh}
    calls = {b: np.mean([d.n_calls for d in demos if d.behaviour == b]) for b in beh}
    # the trade-off RL can discover: never is cheap but wrong on hard problems, always is accurate
    # but calls every time, when_hard is nearly as accurate with fewer calls
    assert acc["always"] == 1.0 and calls["always"] == 1.0
    assert calls["never"] == 0.0 and acc["never"] < 0.85
    assert acc["when_hard"] > 0.95 and 0.3 < calls["when_hard"] < 0.5
    hard_never = [
        d.correct
        for d in demos
        if d.behaviour == "never" and d.example.meta["difficulty"] == "hard"
    ]
    assert 0.2 < np.mean(hard_never) < 0.4  # mental error 0.7 on hard problems
    with pytest.raises(ValueError, match="behaviours"):
        C.sft_demonstrations(exs[:1], behaviours={"sometimes": 1.0})


def _independent_think_format(response):
    """Test-side rule, written from the docstring: a non-empty, tag-free plan in a leading
    <think> block, then an <answer> block somewhere after it."""
    import re

    text = "" if response is None else str(response).strip()
    for end in ("<|im_end|>", "<|endoftext|>"):
        text = text.removesuffix(end).strip()
    m = re.match(r"<think>([^<]*)</think>(.*)$", text, re.S)
    if m is None or not m.group(1).strip():
        return 0.0
    return float(re.search(r"<answer>.*</answer>", m.group(2), re.S) is not None)


@pytest.mark.parametrize(
    "response",
    [
        "<think>tool</think><calc>3*4</calc><output>12</output><answer>12</answer>",
        "<think>mental</think><answer>5</answer><|im_end|>",
        "  <think> mental </think><answer>5</answer>",
        "<answer>3</answer>",
        "<answer>3</answer><think>late</think>",
        "<think></think><answer>3</answer>",
        "<think>  </think><answer>3</answer>",
        "<think>x<calc>1</calc></think><answer>1</answer>",
        "<think>mental</think>",
        "<think>mental</think><answer>5",
        "<think>mental<answer>5</answer>",
        "",
        None,
    ],
)
def test_think_format_matches_an_independent_rule(response):
    assert C.think_format(response) == _independent_think_format(response)


def test_think_rate_adds_plans_and_zero_keeps_the_old_demos():
    task = C.CalculatorTask()
    exs = task.load("train", 2000, seed=0)
    plain = C.sft_demonstrations(exs, seed=3)
    assert C.sft_demonstrations(exs, seed=3, think_rate=0.0) == plain  # no draw at 0
    assert not any(C.think_format(d.response) for d in plain)
    think = C.sft_demonstrations(exs, seed=3, think_rate=0.25)
    shown = [d for d in think if d.segments[0][0].startswith("<think>")]
    assert 0.21 < len(shown) / len(think) < 0.29  # binomial, 2000 draws: sd ~0.01
    for d in think:
        opens = d.segments[0][0].startswith("<think>")
        assert C.think_format(d.response) == float(opens)
        if opens:  # the plan says what the demo does next, and is trained on
            assert d.segments[0] == (C.think_plan(bool(d.n_calls)), True)
    everyone = C.sft_demonstrations(exs, seed=3, think_rate=1.0)
    assert all(C.think_format(d.response) == 1.0 for d in everyone)
    with pytest.raises(ValueError, match="think_rate"):
        C.sft_demonstrations(exs[:1], think_rate=1.5)
