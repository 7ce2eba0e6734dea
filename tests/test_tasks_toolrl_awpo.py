"""AWPO's execution score (AWPO arXiv:2512.19126, Eq. 19) and the ToolRL name-Jaccard switch."""

import json

import numpy as np
import pytest

from mojax.tasks import toolrl
from mojax.tasks.base import Example

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
