"""The calculator's rule problem set (``task.kwargs.problems="rule"``, issue 47): a no-tool class
solved by a rule on operands never seen in training, held-out problems distinct and disjoint from
training, class counts that follow the mix, demonstrations and the fixed ``N_opt``."""

import collections
import math
import re

import pytest

from mojax.tasks.calculator import CalculatorTask, sft_demonstrations
from mojax.tasks.calculator_rule import RULE_FORMS, digit_without_carry, rule_mix, rule_solvable

MIX = {"easy": 0.5, "medium": 0.1, "hard": 0.4}  # the default config.task.mix ("easy" = "rule")


def _by_hand(fn, true_cases, false_cases):
    """``fn(a, op, b)`` is True on each of ``true_cases`` and False on each of ``false_cases``."""
    for case, want in [(c, True) for c in true_cases] + [(c, False) for c in false_cases]:
        assert fn(*case) is want, case


def _rule_operand(expr: str) -> int:
    """``x`` of a rule problem, from its expression alone (the operand that is not 0 or 1)."""
    a, b = (int(v) for v in re.split(r"[+*-]", expr))
    return max(a, b)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_held_out_problems_are_distinct_and_never_in_training(seed):
    task = CalculatorTask(problems="rule", recall=0.1, easy_ops="+")
    splits = {
        s: task.load(s, n, seed=seed, mix=MIX)
        for s, n in (("train", 4000), ("validation", 1200), ("test", 1200))
    }
    exprs = {
        s: [e.meta["expr"] for e in ex if e.meta["difficulty"] != "recall"]
        for s, ex in splits.items()
    }
    for s in ("validation", "test"):
        assert len(exprs[s]) >= 1000
        assert len(set(exprs[s])) == len(exprs[s])  # drawn without replacement
        assert not set(exprs[s]) & set(exprs["train"])  # disjoint by expression
    assert not set(exprs["validation"]) & set(exprs["test"])
    # rule problems: a held-out operand never appears in any training rule problem, in any form
    operands = {
        s: {_rule_operand(e.meta["expr"]) for e in ex if e.meta["difficulty"] == "rule"}
        for s, ex in splits.items()
    }
    assert len(operands["test"]) > 400
    assert not operands["test"] & operands["train"]
    assert not operands["validation"] & operands["train"]
    # recall facts are shared knowledge: the same single-digit sums in every split
    recall = {
        s: {e.meta["expr"] for e in ex if e.meta["difficulty"] == "recall"}
        for s, ex in splits.items()
    }
    assert recall["test"] and recall["test"] <= {f"{a}+{b}" for a in range(10) for b in range(10)}


@pytest.mark.parametrize("cls", ["rule", "medium", "hard", "digit", "carry"])
def test_thousands_of_distinct_held_out_problems_per_class(cls):
    ex = CalculatorTask(problems="rule").load("test", 3000, seed=0, mix={cls: 1.0})
    assert len({e.meta["expr"] for e in ex}) == 3000
    assert {e.meta["difficulty"] for e in ex} == {cls}


def test_class_counts_follow_the_mix():
    task = CalculatorTask(problems="rule", recall=0.2)
    n = 2000
    ex = task.load("test", n, seed=3, mix=MIX)
    counts = collections.Counter(e.meta["difficulty"] for e in ex)
    weights = rule_mix(MIX, 0.2)
    total = sum(weights.values())
    for cls, w in weights.items():
        p = w / total
        assert abs(counts[cls] - n * p) <= 4 * math.sqrt(n * p * (1 - p)), (cls, counts)


def test_rule_problems_by_hand():
    task = CalculatorTask(problems="rule")
    ex = task.load("train", 400, seed=0, mix={"rule": 1.0})
    forms = collections.Counter()
    for e in ex:
        p = e.meta["problem"]
        x = _rule_operand(e.meta["expr"])
        assert 10 <= x <= 99999
        form = e.meta["expr"].replace(str(x), "x", 1).replace(str(x), "x")
        forms[form] += 1
        want = 0 if form in ("x*0", "0*x", "x-x") else x
        assert e.target == want == p.answer
        assert task.optimal_calls(e) == 0 and not task.needs_tool(e)
    assert set(forms) == set(RULE_FORMS)
    for e in task.load("train", 300, seed=0, mix={"medium": 1.0, "hard": 1.0}):
        p = e.meta["problem"]
        assert not rule_solvable(p.a, p.op, p.b) and task.optimal_calls(e) == 1
    recall = CalculatorTask(problems="rule", recall=1.0).load("train", 20, seed=0, mix={"rule": 0})
    assert all(CalculatorTask(problems="rule").optimal_calls(e) == 0 for e in recall)
    _by_hand(rule_solvable, [(3, "+", 0), (0, "*", 7), (12, "-", 12), (1, "*", 9)],
             [(3, "+", 4), (12, "-", 11), (2, "*", 3), (0, "-", 5)])  # fmt: skip


def test_demonstrations_solve_the_rule_class_and_call_where_needed():
    task = CalculatorTask(problems="rule")
    ex = task.load("train", 3000, seed=1, mix={"rule": 0.5, "medium": 0.25, "hard": 0.25})
    demos = sft_demonstrations(
        ex, seed=0, behaviours={"never": 0.5, "when_hard": 0.5}, problems="rule"
    )
    wrong = collections.Counter()
    direct = collections.Counter()
    for d in demos:
        cls = d.example.meta["difficulty"]
        if d.behaviour == "when_hard":
            assert d.n_calls == (0 if cls == "rule" else 1)
            assert d.correct or d.n_calls == 0
        if d.n_calls == 0:
            direct[cls] += 1
            wrong[cls] += not d.correct
    assert wrong["rule"] == 0 and direct["rule"] > 1000  # solvable without the tool
    for cls, rate in (("medium", 0.5), ("hard", 0.7)):  # unreliable without it
        n = direct[cls]
        assert abs(wrong[cls] - n * rate) <= 4 * math.sqrt(n * rate * (1 - rate)), (cls, wrong, n)


def test_facts_default_is_unchanged_and_bad_kwargs_are_refused():
    a = CalculatorTask(easy_ops="+").load("test", 50, seed=0, mix=MIX)
    b = CalculatorTask(easy_ops="+", problems="facts", recall=0.0).load("test", 50, seed=0, mix=MIX)
    assert [e.meta["expr"] for e in a] == [e.meta["expr"] for e in b]
    assert {e.meta["difficulty"] for e in a} <= {"easy", "medium", "hard"}
    with pytest.raises(ValueError, match="problems must be one of"):
        CalculatorTask(problems="rules")
    with pytest.raises(ValueError, match="recall must be"):
        CalculatorTask(recall=0.1)
    with pytest.raises(ValueError, match="mix of the rule problems"):
        CalculatorTask(problems="rule").load("test", 5, mix={"easy": 0.5, "rule": 0.5})
    with pytest.raises(ValueError, match="mix of the rule problems"):
        CalculatorTask(problems="rule").load("test", 5, mix={"tricky": 1.0})


def test_vocabulary_corpus_holds_the_rule_demonstrations():
    from types import SimpleNamespace

    from mojax.rl.builders import _ChatML
    from mojax.tasks.framework.base import Splits

    task = CalculatorTask(problems="rule")
    train = task.load("train", 30, seed=0, mix=MIX)
    splits = Splits(
        train,
        task.load("validation", 5, seed=0, mix=MIX),
        task.load("test", 5, seed=0, mix=MIX),
        task,
    )
    sft = SimpleNamespace(think_rate=0.0)
    texts = task.vocab_corpus(splits, _ChatML(), sft=sft, seed=0, num_answers=0)
    demos = sft_demonstrations(train, seed=0, problems="rule")
    assert all(d.response in texts for d in demos)
    joined = "\n".join(texts)
    assert all(f"Compute {e.meta['expr']}." in joined for e in splits.all)  # every prompt


def test_digit_and_carry_problems_by_hand():
    """``x+d`` / ``d+x``: the ``digit`` class takes no carry into ``x``'s last digit and needs no
    tool; ``carry`` does and needs it; a held-out ``x`` appears in no training problem of either."""
    task = CalculatorTask(problems="rule")
    mix = {"digit": 0.5, "carry": 0.5}
    splits = {s: task.load(s, n, seed=2, mix=mix) for s, n in (("train", 3000), ("test", 600))}
    for e in splits["train"]:
        p = e.meta["problem"]
        x, d = max(p.a, p.b), min(p.a, p.b)
        assert p.op == "+" and 10 <= x <= 99999 and 1 <= d <= 9 and e.target == x + d
        carry = x % 10 + d >= 10
        assert e.meta["difficulty"] == ("carry" if carry else "digit")
        assert task.needs_tool(e) is carry and task.optimal_calls(e) == int(carry)
        if not carry:  # the rule: x with its last digit replaced by the digit sum
            assert str(x + d) == str(x)[:-1] + str(x % 10 + d)
    orders = {e.meta["problem"].a < 10 for e in splits["train"]}
    assert orders == {True, False}  # both x+d and d+x
    operands = {s: {max(e.meta["problem"].a, e.meta["problem"].b) for e in ex}
                for s, ex in splits.items()}  # fmt: skip
    assert len(operands["test"]) > 500 and not operands["test"] & operands["train"]
    _by_hand(digit_without_carry, [(18, "+", 1), (1, "+", 18), (10, "+", 9)],
             [(19, "+", 1), (5, "+", 4), (120, "-", 3), (99999, "+", 1), (30, "*", 2)])  # fmt: skip


def test_demonstrations_answer_the_digit_class_directly_and_call_on_carries():
    task = CalculatorTask(problems="rule")
    ex = task.load("train", 2000, seed=1, mix={"digit": 0.5, "carry": 0.5})
    demos = sft_demonstrations(ex, seed=0, behaviours={"never": 0.5, "when_hard": 0.5},
                               problems="rule")  # fmt: skip
    direct = collections.Counter()
    wrong = collections.Counter()
    for d in demos:
        cls = d.example.meta["difficulty"]
        if d.behaviour == "when_hard":
            assert d.n_calls == (cls == "carry") and d.correct
        if d.n_calls == 0:
            direct[cls] += 1
            wrong[cls] += not d.correct
    assert wrong["digit"] == 0 and direct["digit"] > 700
    n = direct["carry"]
    assert abs(wrong["carry"] - n * 0.5) <= 4 * math.sqrt(n * 0.25), (wrong, n)


def test_digit_and_carry_weights_come_from_the_task_kwargs():
    """``task.kwargs.digit`` / ``carry`` add the classes to the mix (``config.task.mix`` takes no
    new keys from the command line); at 0 the problems are the default's, draw for draw."""
    plain = CalculatorTask(problems="rule").load("train", 300, seed=4, mix=MIX)
    zero = CalculatorTask(problems="rule", digit=0.0, carry=0.0).load("train", 300, seed=4, mix=MIX)
    assert [e.meta["expr"] for e in zero] == [e.meta["expr"] for e in plain]
    task = CalculatorTask(problems="rule", digit=0.25, carry=0.25)
    counts = collections.Counter(
        e.meta["difficulty"] for e in task.load("test", 2000, seed=4, mix=MIX)
    )
    assert set(counts) == {"rule", "medium", "hard", "digit", "carry"}
    for cls in ("digit", "carry"):  # weight 0.25 of 1.5
        p = 0.25 / 1.5
        assert abs(counts[cls] - 2000 * p) <= 4 * math.sqrt(2000 * p * (1 - p)), counts
    assert rule_mix({"digit": 0.5}, carry=0.5) == {"digit": 0.5, "carry": 0.5}
    with pytest.raises(ValueError, match="also in the mix"):
        rule_mix({"digit": 0.5}, digit=0.5)
    with pytest.raises(ValueError, match="digit must be >= 0, and > 0 only with problems='rule'"):
        CalculatorTask(digit=0.3)
