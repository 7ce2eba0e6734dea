"""Held-out metrics per difficulty class and the unneeded-call measure (issue 47), against loops
written from their definitions."""

import json
import math

import numpy as np
import pytest

from mojax.rl.evaluate import summarize, write_samples
from mojax.tasks.calculator import CalculatorTask, Problem


def _ex(task, a, op, b, cls, i):
    return task.example(Problem(a, op, b, cls), f"p{i}")


def test_per_class_accuracy_calls_and_tool_efficiency_by_hand(tmp_path):
    task = CalculatorTask(problems="rule", recall=0.1)
    examples = [
        _ex(task, 12345, "*", 1, "rule", 0),  # N_opt 0
        _ex(task, 77, "-", 77, "rule", 1),  # N_opt 0
        _ex(task, 123, "+", 456, "medium", 2),  # N_opt 1
        _ex(task, 3, "+", 4, "recall", 3),  # N_opt 0 (shared fact)
    ]
    # rewards [P=4, N=2, M=2]; r_task 1 = success
    r = np.zeros((4, 2, 2), np.float32)
    r[0, :, 0] = [1, 1]
    r[1, :, 0] = [1, 0]
    r[2, :, 0] = [0, 1]
    r[3, :, 0] = [1, 1]
    valid = np.ones((4, 2), bool)
    valid[1, 0] = False  # an invalid sample never succeeds
    calls = np.array([[0, 1], [2, 0], [1, 3], [1, 0]])
    s = summarize(task, r, valid, calls, ks=(1,), examples=examples)
    assert s["eval/acc/rule"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert s["eval/acc/medium"] == pytest.approx(0.5)
    assert s["eval/acc/recall"] == pytest.approx(1.0)
    assert s["eval/calls/rule"] == pytest.approx((0 + 1 + 2 + 0) / 4)
    assert s["eval/calls/medium"] == pytest.approx(2.0)
    assert s["eval/problems/rule"] == 2 and s["eval/problems/medium"] == 1
    e = lambda c, n: math.exp(-0.7 * abs(c - n))
    assert s["eval/tool_eff/rule"] == pytest.approx((e(0, 0) + e(1, 0) + e(2, 0) + e(0, 0)) / 4)
    assert s["eval/tool_eff/medium"] == pytest.approx((e(1, 1) + e(3, 1)) / 2)
    # unneeded: every call where no tool is needed, else the calls beyond the first
    unneeded = [0, 1, 2, 0, 0, 2, 1, 0]
    assert s["eval/unneeded_calls"] == pytest.approx(np.mean(unneeded))
    assert s["eval/unneeded_calls/medium"] == pytest.approx(1.0)
    # the existing measures keep their definitions
    n_opt = np.array([0, 0, 1, 0])[:, None]
    assert s["eval/tool_efficiency"] == pytest.approx(np.exp(-0.7 * np.abs(calls - n_opt)).mean())
    assert s["eval/redundant_calls"] == pytest.approx(np.maximum(calls - n_opt, 0).mean())
    path = tmp_path / "eval" / "3.jsonl"
    write_samples(
        str(path),
        task,
        [x.id for x in examples],
        r,
        valid,
        calls,
        [x.meta["difficulty"] for x in examples],
    )
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["class"] for row in rows] == ["rule"] * 4 + ["medium", "medium", "recall", "recall"]


def test_facts_set_unneeded_calls_count_only_rule_solvable_easy_problems():
    """The default set's held-out single-digit sums are never trained on: a call there is needed
    unless a rule solves the sum (``x+0``); with ``shared_easy_facts`` they are known facts."""
    task = CalculatorTask(easy_ops="+")
    examples = [
        _ex(task, 3, "+", 0, "easy", 0),
        _ex(task, 3, "+", 4, "easy", 1),
        _ex(task, 37, "*", 48, "hard", 2),
    ]
    calls = np.array([[1], [1], [2]])
    got = task.eval_metrics(examples, None, None, calls)
    assert got["unneeded_calls"] == pytest.approx((1 + 0 + 1) / 3)
    assert got["redundant_calls"] == pytest.approx((1 + 1 + 1) / 3)  # counts the needed call too
    assert got["tool_eff/easy"] == pytest.approx(math.exp(-0.7))
    shared = CalculatorTask(easy_ops="+", shared_easy_facts=True)
    assert shared.eval_metrics(examples, None, None, calls)["unneeded_calls"] == pytest.approx(1.0)


def test_default_task_gets_per_class_keys_without_changing_the_old_ones():
    task = CalculatorTask(easy_ops="+")
    ex = task.load("test", 12, seed=0, mix={"easy": 0.5, "medium": 0.1, "hard": 0.4})
    rng = np.random.default_rng(0)
    r = np.stack([rng.integers(0, 2, (12, 4)), rng.random((12, 4))], -1).astype(np.float32)
    valid, calls = np.ones((12, 4), bool), rng.integers(0, 3, (12, 4))
    old = summarize(task, r, valid, calls, ks=(1, 2, 4))
    new = summarize(task, r, valid, calls, ks=(1, 2, 4), examples=ex)
    assert {k: new[k] for k in old} == old
    classes = {x.meta["difficulty"] for x in ex}
    assert {f"eval/acc/{c}" for c in classes} <= set(new)
    success = r[..., 0] == 1
    total = sum(new[f"eval/acc/{c}"] * new[f"eval/problems/{c}"] for c in classes)
    assert total / 12 == pytest.approx(success.mean())


class _Runner:
    """Records each call; a row's reward is its example's index, its calls the chunk's number."""

    def __init__(self, sets: int = 0):
        self.calls, self.sets = [], sets

    def run(self, params, examples, *, key, num_samples, temperature, states, stats):
        from types import SimpleNamespace

        self.calls.append((list(examples), np.asarray(key)))
        idx = np.asarray([int(ex.id[1:]) for ex in examples], np.float32)
        p, n = len(examples), num_samples
        rewards = np.broadcast_to(idx[:, None, None], (p, n, 2)).copy()
        calls = np.full((p, n), len(self.calls), np.int64)
        finish = ["stop", "budget"] * (p * n // 2) + ["stop"] * (p * n % 2)
        rollout = SimpleNamespace(counters={"timeouts": 1, "exit/ok": p}, finish_reason=finish)
        if not self.sets:
            return SimpleNamespace(
                rewards=rewards,
                valid=np.ones((p, n), bool),
                n_calls=calls,
                set_rewards=None,
                rollout=rollout,
            ), states
        set_rewards = np.repeat(rewards[:, :, None], self.sets, axis=2)
        return SimpleNamespace(
            rewards=rewards,
            valid=np.ones((p, n), bool),
            n_calls=calls,
            set_rewards=set_rewards,
            set_valid=np.ones((p, n, self.sets), bool),
            rollout=rollout,
        ), states


@pytest.mark.parametrize("batch, sets", [(0, 0), (10, 0), (4, 0), (3, 2)])
def test_held_out_rollouts_in_batches_of_prompts(batch, sets):
    """``eval.batch_prompts``: the split in batches of that many prompts, batch ``i`` keyed by
    ``fold_in(key, i)`` (one batch: ``key`` itself), the arrays concatenated in problem order."""
    from types import SimpleNamespace

    import jax

    from mojax.rl.evaluate import held_out_rollouts
    from mojax.rl.state import HostState

    task = CalculatorTask()
    examples = [_ex(task, 1, "+", i, "easy", i) for i in range(10)]
    runner = _Runner(sets)
    spec = SimpleNamespace(
        eval=SimpleNamespace(batch_prompts=batch, num_samples=3, temperature=1.0)
    )
    run = SimpleNamespace(spec=spec, runner=runner)
    key = jax.random.PRNGKey(7)
    rewards, valid, calls, events = held_out_rollouts(run, HostState(), None, examples, key)
    size = batch or 10
    want_chunks = [examples[i : i + size] for i in range(0, 10, size)]
    assert [c for c, _ in runner.calls] == want_chunks
    for i, (_, k) in enumerate(runner.calls):
        want = key if len(want_chunks) == 1 else jax.random.fold_in(key, i)
        np.testing.assert_array_equal(k, np.asarray(want))
    n = 3 * (sets or 1)
    assert rewards.shape == (10, n, 2) and valid.shape == calls.shape == (10, n)
    np.testing.assert_array_equal(rewards[:, 0, 0], np.arange(10))
    np.testing.assert_array_equal(
        calls[:, 0], np.repeat(np.arange(1, 11), size)[:10] if batch else 1
    )
    # the rollouts' events: counters summed over the batches, finish reasons counted per chain
    budget = sum(len(c) * 3 // 2 for c in want_chunks)
    assert events == {
        "timeouts": len(want_chunks),
        "exit/ok": 10,
        "finish/stop": 30 - budget,
        "finish/budget": budget,
    }


def test_event_metrics_names_counts_and_finish_fractions():
    """``eval/rollout/<counter>`` is a count; ``eval/rollout/finish/<reason>`` a fraction of rows."""
    import collections

    from mojax.rl.evaluate import event_metrics

    got = event_metrics(collections.Counter({"tool_errors": 2, "finish/budget": 3}), rows=12)
    assert got == {"eval/rollout/finish/budget": 0.25, "eval/rollout/tool_errors": 2.0}
