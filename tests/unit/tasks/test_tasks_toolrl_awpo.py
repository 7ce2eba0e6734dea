"""AWPO's execution score (AWPO arXiv:2512.19126, Eq. 19) and the ToolRL name-Jaccard switch."""

import json

import numpy as np
import pytest

from mojax.tasks import toolrl
from mojax.tasks.framework.base import Example

THINK = "<think> I should respond. </think>\n"
DIRECT_GOLD = THINK + "<response> Hello! </response>"


def _call(name, params):
    return json.dumps({"name": name, "parameters": params})


def _calls(*lines):
    return THINK + "<tool_call>\n" + "\n".join(lines) + "\n</tool_call>"


SPURIOUS = _calls(_call("search", {"q": "hi"}))


def test_direct_reply_execution_score_is_eq19_literally():
    """Issue 13 (4): gold without a tool call -> T empty, denominator 1 + 0 + 0, and r_name is the
    Jaccard of two name sets: 1 when the response calls no tool (both empty), 0 for a spurious call.
    The old constant 0.5 made a spurious call free (r_out = format + 0.5 either way)."""
    assert toolrl.execution_score(DIRECT_GOLD, DIRECT_GOLD) == 1.0
    assert toolrl.execution_score(THINK + "<response> Hi there </response>", DIRECT_GOLD) == 1.0
    assert toolrl.execution_score(SPURIOUS, DIRECT_GOLD) == 0.0
    # an unparseable call attempt is still a call, not "no call"
    assert toolrl.execution_score(THINK + "<tool_call>\n{bad\n</tool_call>", DIRECT_GOLD) == 0.0
    # an empty <tool_call> block calls no tool: N_P is empty as well
    assert toolrl.execution_score(THINK + "<tool_call>\n\n</tool_call>", DIRECT_GOLD) == 1.0
    # the old constant stays reachable behind the switch
    for resp in (DIRECT_GOLD, SPURIOUS):
        assert toolrl.execution_score(resp, DIRECT_GOLD, direct_reply="neutral") == 0.5
    # tool-call golds are unaffected by the switch
    gold = _calls(_call("f", {"a": 1}))
    for mode in toolrl.DIRECT_REPLY_MODES:
        assert toolrl.execution_score(gold, gold, direct_reply=mode) == 1.0


def test_awpo_task_r_out_penalises_spurious_calls():
    ex = Example("x", ({"role": "user", "content": "hi"},), DIRECT_GOLD)
    task = toolrl.ToolRLTask("awpo")
    r = task.score_batch([DIRECT_GOLD, SPURIOUS], [ex, ex]).rewards
    # r_out = format + exec: the gold reply 1 + 1; the spurious call 0 (structure) + 0
    np.testing.assert_allclose(r[:, 0], [2.0, 0.0])
    old = toolrl.ToolRLTask("awpo", direct_reply="neutral")
    np.testing.assert_allclose(
        old.score_batch([DIRECT_GOLD, SPURIOUS], [ex, ex]).rewards[:, 0], [1.5, 0.5]
    )
    with pytest.raises(ValueError, match="direct_reply"):
        toolrl.ToolRLTask("awpo", direct_reply="half")
    with pytest.raises(ValueError, match="direct_reply"):
        toolrl.execution_score(DIRECT_GOLD, DIRECT_GOLD, direct_reply="bogus")


def test_name_jaccard_multiset_vs_set_by_hand():
    """Gold [d, t]; response [d, t, d({})]. Multiset Jaccard 2/3 (authors' code): score 2/3 + 4 + 4
    over S_max 9 -> 6 * (26/3) / 9 - 3 = 25/9. Set Jaccard {d, t} vs {d, t} = 1 (AWPO Eq. 16 as
    written): score 9 = S_max but not an exact match -> 6 * 9 / 9 - 3 = 3."""
    d = {"login_id": "u", "api_key": "k", "code": "c"}
    t = {"subset": "h", "dataset": "p", "limit": 20}
    gold = _calls(_call("dashboard", d), _call("tsv2", t))
    resp = _calls(_call("dashboard", d), _call("tsv2", t), _call("dashboard", {}))
    assert toolrl.correctness_reward(resp, gold) == pytest.approx(25 / 9)
    assert toolrl.correctness_reward(resp, gold, name_jaccard="set") == pytest.approx(3.0)
    assert toolrl.execution_score(resp, gold, name_jaccard="set") == pytest.approx(1.0)
    # names [a, a] vs [a]: multiset 1/2, set 1; no parameters -> pairs add 1 each
    g2, r2 = _calls(_call("a", {}), _call("a", {})), _calls(_call("a", {}))
    s_multi, s_max = toolrl.correctness_score(
        toolrl.parse_tool_calls(g2), toolrl.parse_tool_calls(r2)
    )
    s_set, _ = toolrl.correctness_score(
        toolrl.parse_tool_calls(g2), toolrl.parse_tool_calls(r2), name_jaccard="set"
    )
    assert (s_multi, s_set, s_max) == (1.5, 2.0, 3.0)
    task = toolrl.ToolRLTask("toolrl", name_jaccard="set")
    ex = Example("x", ({"role": "user", "content": "hi"},), gold)
    np.testing.assert_allclose(task.score_batch([resp], [ex]).rewards[0], [1.0, 3.0])
    with pytest.raises(ValueError, match="name_jaccard"):
        toolrl.correctness_reward(resp, gold, name_jaccard="bag")


def test_name_jaccard_modes_agree_on_real_golds_without_repeats(shared):
    """On the real test split, golds never repeat a tool name within one answer, so both modes
    give the gold full marks and agree on a one-call-dropped perturbation."""
    examples = toolrl.ToolRLTask.load(shared / "data/toolrl/test.parquet")
    checked = 0
    for ex in examples:
        if "<tool_call>" not in ex.target.split("</think>")[-1]:
            continue
        calls = toolrl.parse_tool_calls(ex.target.split("</think>")[-1])
        names = [c["name"] for c in calls]
        if len(set(names)) != len(names) or len(calls) < 2:
            continue
        dropped = _calls(*[json.dumps(c) for c in calls[:-1]])
        assert toolrl.correctness_reward(dropped, ex.target) == pytest.approx(
            toolrl.correctness_reward(dropped, ex.target, name_jaccard="set")
        )
        checked += 1
    assert checked > 0


HEADER = "**Dialogue Records History**\n"


@pytest.mark.parametrize("path", ["test.parquet", "rlla_sft.json"])
def test_swirl_decomposition_on_real_dialogues(shared, path):
    """AWPO's SWiRL-style data: a dialogue with K steps -> K single-step instances, each with the
    full preceding context as prompt and the step taken there as gold."""
    examples = toolrl.ToolRLTask.load(shared / "data/toolrl" / path)
    out = toolrl.swirl_decompose(examples)
    # independent count: every assistant step in a history opens with exactly one <think>
    n_steps = sum(ex.messages[-1]["content"].count("<think>") for ex in examples)
    assert n_steps > 0  # the real data has multi-turn dialogues
    assert len(out) == len(examples) + n_steps
    by_source = {}
    for inst in out:
        by_source.setdefault(inst.meta.get("swirl_source", inst.id), []).append(inst)
    for ex in examples:
        group = by_source[ex.id]
        assert group[-1].target == ex.target and group[-1].messages == ex.messages
        history = ex.messages[-1]["content"]
        assert len(group) == history.count("<think>") + 1
        prev = ""
        for j, inst in enumerate(group[:-1], 1):
            prompt = inst.messages[-1]["content"]
            assert inst.messages[:-1] == ex.messages[:-1]  # the system prompt is kept
            assert prompt.startswith(HEADER) and prompt.startswith(prev)
            assert history.startswith(prompt)
            assert prompt.endswith(("</user>", "</obs>"))  # the step follows a turn or a result
            rest = history[len(prompt) :].lstrip()
            assert rest.startswith(inst.target) and inst.target.startswith("<think>")
            assert "<user>" not in inst.target and "<obs>" not in inst.target
            assert inst.id == f"{ex.id}/swirl{j}of{len(group)}"
            assert inst.meta["swirl_step"] == j and inst.meta["swirl_steps"] == len(group)
            # every decomposed gold is a well-formed ToolRL answer scoring full marks on itself
            g = inst.target
            assert toolrl.format_reward(g, g) == 1.0, inst.id
            has_call = "<tool_call>" in g
            assert toolrl.correctness_reward(g, g) == (3.0 if has_call else 0.0), inst.id
            assert toolrl.execution_score(g, g) == 1.0
            np.testing.assert_array_equal(toolrl.vpo_reward_vector(g, g), [1, 1, 1, 1])
            prev = prompt
    # single-turn examples pass through unchanged
    single = [ex for ex in examples if "<think>" not in ex.messages[-1]["content"]]
    assert single and all(by_source[ex.id] == [ex] for ex in single)


def test_swirl_by_hand_and_from_the_task(shared, tmp_path):
    history = (
        HEADER
        + "<user> convert 100 USD </user>\n\n<think> use a tool </think>\n<tool_call>\n"
        + _call("convert", {"amount": 100})
        + "\n</tool_call>\n<obs> [91.5] </obs>\n\n<think> answer </think>\n"
        "<response> 91.5 EUR </response>\n\n<user> thanks, and AAPL? </user>"
    )
    ex = Example("d", ({"role": "system", "content": "sys"}, {"role": "user", "content": history}),
                 THINK + "<tool_call>\n" + _call("quote", {"s": "AAPL"}) + "\n</tool_call>")  # fmt: skip
    spans = toolrl.dialogue_steps(history)
    assert [history[a:b][:13] for a, b in spans] == ["<think> use a", "<think> answe"]
    out = toolrl.swirl_decompose([ex])
    assert [o.id for o in out] == ["d/swirl1of3", "d/swirl2of3", "d"]
    assert out[0].messages[-1]["content"] == HEADER + "<user> convert 100 USD </user>"
    assert out[0].target.endswith("</tool_call>") and out[1].target.endswith("</response>")
    assert out[1].messages[-1]["content"].endswith("<obs> [91.5] </obs>")
    # ToolRLTask(swirl=True) decomposes what it loads; the class-level loader does not
    src = shared / "data/toolrl/test.parquet"
    plain = toolrl.ToolRLTask.load(src)
    assert toolrl.ToolRLTask(swirl=True).load(src) == toolrl.swirl_decompose(plain)
    assert toolrl.ToolRLTask().load(src) == plain
