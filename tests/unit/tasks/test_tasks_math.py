"""Tool-integrated math: answer extraction and math-verify equivalence on the real MATH500/AIME."""

import json
import threading

import numpy as np
import pytest

from mojax.tasks import math as tm

HALF = "\\frac{1}{2}"


@pytest.mark.parametrize(
    "response",
    [
        "so x = \\boxed{0.5}.",
        "\\boxed{1/2}",
        "\\boxed{\\frac12}",
        "\\boxed{\\dfrac{1}{2}}",
        "The answer is 1/2.",
        "Final Answer: $\\frac{1}{2}$",
        "<answer>0.5</answer>",
        "first \\boxed{3}, on second thought \\boxed{\\frac{2}{4}}",
    ],
)
def test_equivalent_forms_match(response):
    ex = tm.MathTask().example("p", HALF, "x")
    np.testing.assert_array_equal(tm.MathTask().score(response, ex), [1.0, 0.0])
    assert tm.is_equivalent(tm.extract_answer(response), "0.5")


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{0.6}",
        "\\boxed{2}",
        "\\boxed{\\frac{1}{3}}",
        "\\boxed{-1/2}",
        "no answer here",
        "\\boxed{\\frac{1}{2}",  # truncated: unbalanced braces -> no boxed answer, no plain answer
        "",
        "\\boxed{}",
    ],
)
def test_wrong_answers_do_not(response):
    ex = tm.MathTask().example("p", HALF, "x")
    np.testing.assert_array_equal(tm.MathTask().score(response, ex), [0.0, 0.0])


def test_extraction():
    assert tm.extract_boxed("a \\boxed{\\frac{a}{b^{2}}} b") == "\\frac{a}{b^{2}}"
    assert tm.extract_boxed("\\boxed 5$") == "5"
    assert tm.extract_boxed("\\fbox{7} then \\boxed{8}") == "8"
    assert tm.extract_boxed("\\boxed{unclosed") is None
    assert tm.extract_answer("The answer is: 42.") == "42"
    assert tm.extract_answer(None) is None


@pytest.fixture(scope="module")
def math500(shared):
    return tm.MathTask().load(shared / "data/math/math500.jsonl")


def test_real_math500_golds_and_reference_solutions(math500):
    assert len(math500) == 500
    task = tm.MathTask()
    for ex in math500[:150]:
        gold = ex.target[0]
        assert task.score(f"Therefore \\boxed{{{gold}}}.", ex)[0] == 1.0, gold
        assert task.score(ex.meta["solution"], ex)[0] == 1.0, gold  # the worked solution
    # a different integer answer never matches
    ints = [e for e in math500[:150] if e.target[0].isdigit()]
    for a, b in zip(ints, ints[1:]):
        if int(a.target[0]) != int(b.target[0]):
            assert task.score(f"\\boxed{{{b.target[0]}}}", a)[0] == 0.0


def test_real_aime(shared):
    task = tm.MathTask()
    a24 = task.load(shared / "data/math/aime24.jsonl")
    a25 = task.load(shared / "data/math/aime25.jsonl")
    assert len(a24) == 30 and len(a25) == 30
    ex = next(e for e in a24 if e.target[0] == "025")
    assert task.score("\\boxed{25}", ex)[0] == 1.0  # leading zero
    assert task.score("\\boxed{26}", ex)[0] == 0.0
    assert a25[0].target == ("70",)  # int answers become strings
    assert task.score("so the sum is \\boxed{70}", a25[0])[0] == 1.0


def test_other_jsonl_shapes(tmp_path):
    p = tmp_path / "olympiad.jsonl"
    rows = [
        {"question": "Find x.", "final_answer": ["$3$", "$-3$"], "id": 7},
        {"problem": "AMC", "answer": 27.0},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    task = tm.MathTask(tool_format="tags")
    exs = task.load(p)
    assert exs[0].target == ("$3$", "$-3$") and exs[0].id.endswith("#7")
    assert task.score("\\boxed{-3}", exs[0])[0] == 1.0
    assert exs[1].target == ("27",)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no problem"}))
    with pytest.raises(ValueError, match="problem"):
        task.load(bad)


def test_tool_protocol():
    torl = tm.MathTask()
    assert torl.tool_stop == "```output"
    text = "Let me compute.\n```python\nprint(2**10)\n```\n```output"
    assert torl.parse_tool_call(text) == "print(2**10)"
    assert torl.format_observation("1024\n") == "\n1024\n```\n"
    transcript = text + torl.format_observation("1024") + "So \\boxed{1024}."
    assert torl.count_tool_calls(transcript) == 1
    assert torl.parse_tool_call("no code") is None
    tags = tm.MathTask("tags")
    assert tags.tool_stop == "</code>"
    assert tags.parse_tool_call("x <code>print(1)</code>") == "print(1)"
    assert tags.parse_tool_call("<code>print(1)") is None
    assert tags.format_observation("1") == "<output>1</output>"
    with pytest.raises(ValueError, match="tool_format"):
        tm.MathTask("bash")


def test_scoring_from_a_worker_thread():
    # math-verify's signal-based timeout only works in the main thread; mojax turns it off there
    # and refuses answers that could run without bound (counted as invalid, never a hang).
    task = tm.MathTask()
    ex = task.example("p", HALF, "x")
    out = []

    def work():
        out.append(tm.is_equivalent("0.5", HALF))
        out.append(task.score_safe("\\boxed{9^{9^{9^{9}}}}", ex))

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=60)
    assert out[0] is True
    rewards, valid, reason = out[1]
    assert not valid and reason == "UnsafeToVerify" and not rewards.any()
