"""ToolRL rewards on the real rlla_4k data and hand-worked perturbations (SAW App. C, AWPO 19)."""

import itertools
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mojax.tasks import toolrl
from mojax.tasks.framework.base import Example

DASH = {"login_id": "user123", "api_key": "key123", "survey_code": "ABC123"}
TSV = {"subset": "health", "dataset": "public_data", "limit": 20}
THINK = "<think> I should use the appropriate tool. </think>\n"


def _call(name, params):
    return json.dumps({"name": name, "parameters": params})


def _resp(*lines):
    return THINK + "<tool_call>\n" + "\n".join(lines) + "\n</tool_call>"


GOLD = _resp(_call("dashboard", DASH), _call("tsv2", TSV))  # S_max = 1 + (1+3) + (1+3) = 9


@pytest.fixture(scope="module")
def test_split(shared):
    return toolrl.ToolRLTask.load(shared / "data/toolrl/test.parquet")


def test_every_real_gold_scores_full_marks(test_split):
    assert len(test_split) == 80
    n_call = 0
    for ex in test_split:
        g = ex.target
        has_call = "<tool_call>" in g
        n_call += has_call
        assert toolrl.format_reward(g, g) == 1.0, ex.id
        for matching in ("optimal", "greedy"):
            assert toolrl.correctness_reward(g, g, matching) == (3.0 if has_call else 0.0), ex.id
        assert toolrl.execution_score(g, g) == 1.0  # Eq. 19; a direct reply calls no tool
        assert toolrl.execution_score(g, g, direct_reply="neutral") == (1.0 if has_call else 0.5)
        np.testing.assert_array_equal(toolrl.vpo_reward_vector(g, g), [1, 1, 1, 1])
    assert n_call == 71  # 71 tool-call golds and 9 response-only golds in the test split


def test_real_prompts(test_split):
    # the chat-template rendering of these messages is checked in test_tasks_base.py
    task = toolrl.ToolRLTask()
    ex = test_split[0]
    msgs = task.messages(ex)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"].startswith("You are a helpful multi-turn dialogue assistant")
    assert msgs[1]["content"].startswith("**Dialogue Records History**\n<user>")
    multi = task.messages(ex, num_answers=3)
    assert multi[0] == msgs[0]
    assert multi[1]["content"].startswith(msgs[1]["content"] + "\n\n---\nADDITIONAL INSTRUCTION")
    assert (
        "<response_1>...</response_1> through <response_3>...</response_3>" in multi[1]["content"]
    )


def test_sft_json_loads(shared):
    sft = toolrl.ToolRLTask.load(shared / "data/toolrl/rlla_sft.json")
    assert len(sft) == 400
    assert [m["role"] for m in sft[0].messages] == ["system", "user"]
    # The distilled golds whose <think> does not mention the tags score full marks; the others
    # (they quote "<tool_call>" inside <think>) fail the authors' rule, as they would in ToolRL.
    clean = [
        e
        for e in sft
        if e.target.count("<tool_call>") <= 1 and "<response>" not in e.target.split("</think>")[0]
    ]
    assert len(clean) > 350
    for e in clean:
        want = 3.0 if "<tool_call>" in e.target else 0.0
        assert toolrl.correctness_reward(e.target, e.target) == want, e.id


@pytest.mark.parametrize(
    "name,response,fmt,correct",
    [
        # gold itself: names Jaccard 1, pairs 4 + 4 -> score 9 = S_max -> +3
        ("exact", GOLD, 1.0, 3.0),
        # drop tsv2: names {d} vs {d, t}: 1/2; dashboard pair 1 + 3 -> 4.5 / 9 -> 6*0.5 - 3 = 0
        ("drop_call", _resp(_call("dashboard", DASH)), 1.0, 0.0),
        # limit 20 -> 25: 1 + 4 + (1 + 2) = 8 -> 6*8/9 - 3 = 7/3
        (
            "wrong_value",
            _resp(_call("dashboard", DASH), _call("tsv2", {**TSV, "limit": 25})),
            1.0,
            7 / 3,
        ),
        # "20" (string) is not 20 (int): same as a wrong value
        (
            "wrong_type",
            _resp(_call("dashboard", DASH), _call("tsv2", {**TSV, "limit": "20"})),
            1.0,
            7 / 3,
        ),
        # extra dashboard({}): names [d, t, d] vs [d, t]: 2 / 3; pairs 4 + 4 -> 26/3 / 9 -> 25/9
        (
            "extra_call",
            _resp(_call("dashboard", DASH), _call("tsv2", TSV), _call("dashboard", {})),
            1.0,
            25 / 9,
        ),
        # missing key survey_code: keys 2/3, values 2 -> 1 + (2/3 + 2) + 4 = 23/3 -> 6*23/27 - 3
        (
            "missing_key",
            _resp(
                _call("dashboard", {"login_id": "user123", "api_key": "key123"}), _call("tsv2", TSV)
            ),
            1.0,
            6 * (23 / 3) / 9 - 3,
        ),
        # calls in the other order: same multiset, full pair scores -> +3
        ("swapped", _resp(_call("tsv2", TSV), _call("dashboard", DASH)), 1.0, 3.0),
        # broken JSON: structure fine, correctness -3
        ("broken_json", _resp(_call("dashboard", DASH)[:-1], _call("tsv2", TSV)), 1.0, -3.0),
        # missing </tool_call>: neither the structure nor the calls parse
        ("missing_close", THINK + "<tool_call>\n" + _call("dashboard", DASH), 0.0, -3.0),
        # no tool call at all
        ("response_only", THINK + "<response> Sure. </response>", 0.0, -3.0),
        # missing <think>
        (
            "no_think",
            "<tool_call>\n"
            + _call("dashboard", DASH)
            + "\n"
            + _call("tsv2", TSV)
            + "\n</tool_call>",
            0.0,
            3.0,
        ),
    ],
)
def test_perturbations_worked_by_hand(name, response, fmt, correct):
    assert toolrl.format_reward(response, GOLD) == fmt, name
    for matching in ("optimal", "greedy"):
        assert toolrl.correctness_reward(response, GOLD, matching) == pytest.approx(correct), name
    assert toolrl.execution_score(response, GOLD) == pytest.approx((correct + 3) / 6)


def test_greedy_and_optimal_matching_differ():
    gold = _resp(_call("f", {"a": 1}), _call("f", {"a": 1, "b": 2}))
    pred = _resp(_call("f", {"a": 1, "b": 2}), _call("f", {"a": 1, "c": 3}))
    # S_max = 1 + (1 + 1) + (1 + 2) = 6; names [f, f] vs [f, f]: Jaccard 1.
    # Greedy (gold order, first strictly-best unused): f(a=1) takes f(a=1,b=2): keys 1/2 + a 1
    #   = 1.5 (f(a=1,c=3) also 1.5, not strictly better); f(a=1,b=2) gets f(a=1,c=3): keys 1/3
    #   + a 1 = 4/3. score = 1 + 1.5 + 4/3 = 23/6 -> 6 * 23/36 - 3 = 5/6.
    assert toolrl.correctness_reward(pred, gold, "greedy") == pytest.approx(5 / 6)
    # Optimal: f(a=1) <- f(a=1,c=3) (1.5), f(a=1,b=2) <- f(a=1,b=2) (1 + 2 = 3).
    #   score = 1 + 1.5 + 3 = 5.5 -> 6 * 5.5/6 - 3 = 2.5.
    assert toolrl.correctness_reward(pred, gold, "optimal") == pytest.approx(2.5)


def _brute_force_optimal(gold_calls, pred_calls):
    """Independent reference: the best injective gold->pred assignment by enumeration (Eq. 17)."""
    names_g = [g["name"] for g in gold_calls]
    names_p = [p["name"] for p in pred_calls]
    from collections import Counter

    if names_g == names_p:
        name = 1.0
    elif not names_g or not names_p:
        name = 0.0
    else:
        inter = sum((Counter(names_g) & Counter(names_p)).values())
        name = inter / (len(names_g) + len(names_p) - inter)

    def pair(g, p):
        if g["name"] != p["name"]:
            return 0.0
        gk, pk = list(g["parameters"]), list(p["parameters"])
        if gk == pk:
            keys = 1.0
        elif not gk or not pk:
            keys = 0.0
        else:
            keys = len(set(gk) & set(pk)) / len(set(gk) | set(pk))
        vals = sum(1 for k, v in g["parameters"].items() if p["parameters"].get(k, object()) == v)
        return keys + vals

    best = 0.0
    slots = list(range(len(pred_calls))) + [None] * len(gold_calls)
    for perm in itertools.permutations(slots, len(gold_calls)):
        best = max(
            best, sum(pair(g, pred_calls[j]) for g, j in zip(gold_calls, perm) if j is not None)
        )
    s_max = 1 + sum(1 + len(g["parameters"]) for g in gold_calls)
    if gold_calls == pred_calls:
        return 3.0
    return 6 * (name + best) / s_max - 3


def test_optimal_matching_equals_brute_force_and_beats_greedy():
    rng = np.random.default_rng(0)
    for _ in range(300):

        def rand_calls(n):
            calls = []
            for _ in range(n):
                keys = rng.choice(["a", "b", "c", "d"], size=rng.integers(0, 4), replace=False)
                calls.append(
                    {
                        "name": str(rng.choice(["f", "g"])),
                        "parameters": {str(k): int(rng.integers(0, 2)) for k in keys},
                    }
                )
            return calls

        g, p = rand_calls(rng.integers(1, 4)), rand_calls(rng.integers(0, 4))
        gold, pred = _resp(*[json.dumps(c) for c in g]), _resp(*[json.dumps(c) for c in p])
        opt = toolrl.correctness_reward(pred, gold, "optimal")
        assert opt == pytest.approx(_brute_force_optimal(g, p))
        assert opt >= toolrl.correctness_reward(pred, gold, "greedy") - 1e-12
        assert -3 <= opt <= 3


def test_vpo_vector_worked_by_hand():
    drop = _resp(_call("dashboard", DASH))
    # name F1: P = 1, R = 1/2 -> 2/3; the aligned dashboard pair has key F1 1 and value F1 1.
    np.testing.assert_allclose(toolrl.vpo_reward_vector(drop, GOLD), [1, 2 / 3, 1, 1], rtol=1e-6)
    wrong = _resp(_call("dashboard", DASH), _call("tsv2", {**TSV, "limit": 25}))
    # value F1 per pair: dashboard 1; tsv2 mean(1, 1, 0) = 2/3 -> mean 5/6
    np.testing.assert_allclose(toolrl.vpo_reward_vector(wrong, GOLD), [1, 1, 1, 5 / 6], rtol=1e-6)
    partial = _resp(_call("dashboard", DASH), _call("tsv2", {**TSV, "dataset": "public data set"}))
    # "public_data" is one \w+ token; "public data set" has 3 -> no overlap -> 0; mean(1, 1, 0)
    np.testing.assert_allclose(toolrl.vpo_reward_vector(partial, GOLD), [1, 1, 1, 5 / 6], rtol=1e-6)
    extra_key = _resp(_call("dashboard", {**DASH, "x": 1}), _call("tsv2", TSV))
    # dashboard keys: P = 3/4, R = 1 -> F1 6/7; tsv2 keys 1 -> mean (6/7 + 1) / 2
    np.testing.assert_allclose(
        toolrl.vpo_reward_vector(extra_key, GOLD), [1, 1, (6 / 7 + 1) / 2, 1], rtol=1e-6
    )
    np.testing.assert_array_equal(toolrl.vpo_reward_vector("garbage", GOLD), [0, 0, 0, 0])
    resp_gold = THINK + "<response> Hi </response>"
    np.testing.assert_array_equal(toolrl.vpo_reward_vector(resp_gold, resp_gold), [1, 1, 1, 1])
    np.testing.assert_array_equal(toolrl.vpo_reward_vector(GOLD, resp_gold), [0, 0, 0, 0])


def test_format_rules_per_gold_kind():
    both = THINK + "<tool_call>\n" + _call("f", {}) + "\n</tool_call>\n<response> ok </response>"
    assert toolrl.format_reward(both, both) == 1.0
    assert toolrl.format_reward(both.replace("\n<response>", "<response>"), both) == 0.0
    assert toolrl.format_reward(both + "<response>x</response>", both) == 0.0
    assert toolrl.format_reward(GOLD, both) == 0.0  # missing the response block
    think_only = "<think> nothing to do </think>"
    assert toolrl.format_reward(think_only, think_only) == 1.0
    assert toolrl.format_reward(think_only + " tail", think_only) == 0.0
    # end-of-turn tokens and surrounding whitespace are stripped first
    assert toolrl.format_reward("  " + GOLD + "<|im_end|>\n", GOLD) == 1.0
    assert toolrl.format_reward(THINK + "<tool_call>\n</tool_call>", GOLD) == 0.0
    assert toolrl.format_reward(THINK + "<tool_call>\n\n</tool_call>", GOLD) == 1.0


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("toolrl", [1.0, 0.0]),
        ("awpo", [1.5, 0.0]),
        ("vpo", [1.0, 2 / 3, 1.0, 1.0]),
    ],
)
def test_task_modes(mode, expected):
    task = toolrl.ToolRLTask(mode)
    ex = Example("x", ({"role": "user", "content": "hi"},), GOLD)
    batch = task.score_batch([_resp(_call("dashboard", DASH)), None], [ex, ex])
    np.testing.assert_allclose(batch.rewards[0], expected, rtol=1e-6)
    assert batch.valid.tolist() == [True, True]
    assert batch.external == (("r_reason",) if mode == "awpo" else ())
    assert task.is_success(task.score_batch([GOLD], [ex]).rewards).tolist() == [True]


def test_vpo_set_scoring():
    task = toolrl.ToolRLTask("vpo")
    ex = Example("x", ({"role": "user", "content": "hi"},), GOLD)
    text = (
        f"<response_1>{GOLD}</response_1>\n<response_2>{_resp(_call('dashboard', DASH))}"
        f"</response_2><response_3>{GOLD}"
    )
    r, v = task.score_set(text, ex, 4)
    assert v.tolist() == [True, True, False, False]
    np.testing.assert_allclose(r[:2], [[1, 1, 1, 1], [1, 2 / 3, 1, 1]], rtol=1e-6)
    assert not r[2:].any()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="matching"):
        toolrl.correctness_reward(GOLD, GOLD, matching="hungarian")
    with pytest.raises(ValueError, match="mode"):
        toolrl.ToolRLTask("bogus")


_SOUP = [
    "<think>",
    "</think>",
    "\n",
    " ",
    "x",
    "<tool_call>",
    "</tool_call>",
    "<response>",
    "</response>",
    '{"name": "f", "parameters": {}}',
]


_VALID = [
    GOLD,
    THINK + "<response> a </response>",
    "<think> t </think>",
    GOLD + "\n<response> b </response>",
    "<think></think>\n<tool_call>\n\n</tool_call>",
]


def _mutate(base, edits):
    for pos, op, frag in edits:
        pos %= len(base) + 1
        base = (
            base[:pos] + frag + base[pos:] if op == "ins" else base[:pos] + base[pos + len(frag) :]
        )
    return base


_SKELETON = st.builds(
    _mutate,
    st.sampled_from(_VALID),
    st.lists(
        st.tuples(st.integers(0, 300), st.sampled_from(["ins", "del"]), st.sampled_from(_SOUP)),
        max_size=2,
    ),
)


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(st.lists(st.sampled_from(_SOUP), max_size=14).map("".join), _SKELETON),
    st.sampled_from(
        [
            GOLD,
            THINK + "<response> a </response>",
            "<think> t </think>",
            GOLD + "\n<response> b </response>",
        ]
    ),
)
def test_format_reward_equals_the_authors_regexes(text, gold):
    """Independent reference: ToolRL's regexes + tag counts, run with Python's re."""
    resp = text.strip().removesuffix("<|im_end|>").strip()
    has_call, has_resp = "<tool_call>" in gold, "<response>" in gold
    if has_resp and not has_call:
        ok = bool(re.search(r"^<think>.*?</think>\n<response>.*?</response>$", resp, re.DOTALL))
        ok &= resp.count("<response>") == 1 and resp.count("</response>") == 1
    elif has_call and not has_resp:
        ok = bool(
            re.search(r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>$", resp, re.DOTALL)
        )
        ok &= resp.count("<tool_call>") == 1 and resp.count("</tool_call>") == 1
    elif has_call and has_resp:
        ok = bool(
            re.search(
                r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>\n"
                r"<response>.*?</response>$",
                resp,
                re.DOTALL,
            )
        )
        ok &= resp.count("<tool_call>") == 1 and resp.count("</tool_call>") == 1
        ok &= resp.count("<response>") == 1 and resp.count("</response>") == 1
    else:
        ok = bool(re.search(r"^<think>.*?</think>$", resp, re.DOTALL))
    assert toolrl.format_reward(text, gold) == float(ok)
