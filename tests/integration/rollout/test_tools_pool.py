"""ToolPool: parallel tool calls, results in call order, per-call deadlines, failures contained,
and a self-timed tool's own timeout always ahead of the pool's."""

import threading
import time

import pytest
from sandbox_support import make_sandbox

from mojax.rollout.tools import Calculator, PythonSandbox, ToolPool, ToolResult
from mojax.rollout.tools.pool import DEADLINE_MARGIN_S, call_timeout


def _sleepy(seconds, tag):
    time.sleep(seconds)
    return ToolResult(output=str(tag))


def test_results_come_back_in_call_order_and_run_in_parallel():
    active, peak, lock = [0], [0], threading.Lock()

    def tool(tag):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2 - 0.03 * tag)  # later calls finish first
        with lock:
            active[0] -= 1
        return ToolResult(output=str(tag))

    with ToolPool(max_workers=4) as pool:
        results = pool.map(tool, list(range(6)))
    assert [r.output for r in results] == [str(i) for i in range(6)]
    assert peak[0] == 4  # as many calls at once as workers


def test_overrunning_call_times_out_without_blocking_the_others():
    with ToolPool(max_workers=3, timeout_s=0.3) as pool:
        start = time.monotonic()
        results = pool.run([(_sleepy, (0.05, "a")), (_sleepy, (5.0, "b")), (_sleepy, (0.05, "c"))])
        assert time.monotonic() - start < 2.0
    assert [r.output for r in results][::2] == ["a", "c"]
    assert results[1].timed_out and results[1].exit_reason == "timeout"
    assert "worker pool" in results[1].error


def test_deadline_counts_from_the_start_of_a_call_not_its_queueing():
    with ToolPool(max_workers=1, timeout_s=0.5) as pool:
        results = pool.run([(_sleepy, (0.2, i)) for i in range(4)])  # 0.8 s in the queue in all
    assert [r.exit_reason for r in results] == ["ok"] * 4


def test_tool_exceptions_and_bad_returns_are_contained_and_counted():
    def broken(_):
        raise KeyError("boom")

    with ToolPool(max_workers=2) as pool:
        results = pool.run([(broken, ("x",)), (lambda: "not a result", ()), (_sleepy, (0, "ok"))])
        assert [r.exit_reason for r in results] == ["exception", "exception", "ok"]
        assert results[0].error == "KeyError: 'boom'"
        assert "returned str" in results[1].error
        assert pool.stats == {"exception": 2, "ok": 1}
        state = pool.state_dict()
    restored = ToolPool()
    restored.load_state_dict(state)
    assert restored.stats == {"exception": 2, "ok": 1}
    restored.close()
    with pytest.raises(ValueError, match="max_workers"):
        ToolPool(max_workers=0)


def test_mixed_real_tools_in_one_batch():
    sandbox = PythonSandbox(timeout_s=1.0, memory_mb=256)
    calc = Calculator()
    calls = [
        (sandbox.run, ("print(sum(range(10)))",)),
        (calc.run, ("2 ** 100",)),
        (sandbox.run, ("while True:\n    pass",)),
        (calc.run, ("1 / 0",)),
        (sandbox.run, ("print('π')",)),
    ]
    with ToolPool(max_workers=4, timeout_s=10) as pool:
        results = pool.run(calls)
    assert [r.output for r in results[:2]] == ["45\n", str(2**100)]
    assert results[2].exit_reason == "timeout"  # the sandbox's own wall clock, not the pool's
    assert results[3].error == "division by zero"
    assert results[4].output == "π\n"
    assert pool.stats["timeout"] == 1 and pool.stats["ok"] == 3 and pool.stats["error"] == 1


class _SelfTimed:
    """A tool that ends its own calls: ``deadline_s`` is the longest one can take."""

    deadline_s = 0.6

    def run(self, seconds):
        time.sleep(seconds)
        return ToolResult(output="", error="its own timeout", timed_out=True, exit_reason="timeout")


def test_a_self_timed_tool_outlasts_a_shorter_pool_timeout():
    tool = _SelfTimed()
    assert call_timeout(tool.run, 0.2) == 0.6 + DEADLINE_MARGIN_S
    assert call_timeout(tool.run, 60.0) == 60.0  # a longer pool timeout stays
    assert call_timeout(tool.run, None) is None and call_timeout(_sleepy, 0.2) == 0.2
    with ToolPool(max_workers=2, timeout_s=0.2) as pool:
        results = pool.run([(tool.run, (0.5,)), (_sleepy, (0.5, "plain"))])
    assert results[0].error == "its own timeout"  # not cut off by the pool at 0.2 s
    assert "worker pool" in results[1].error  # a tool without a deadline still is


def test_slow_sandbox_calls_end_with_the_sandbox_message_when_both_timeouts_are_equal():
    """The trainer gives the pool and the sandbox the same ``rollout.tool_timeout_s``."""
    sandbox = make_sandbox("bwrap", timeout_s=1.0, memory_mb=256)
    assert sandbox.deadline_s > sandbox.timeout_s
    slow = "print('started', flush=True)\nimport time\ntime.sleep(30)"
    calls = [(sandbox.run, (slow,))] * 3 + [(sandbox.session().run, (slow,))]
    with ToolPool(max_workers=4, timeout_s=1.0) as pool:
        results = pool.run(calls)
    for result in results:
        assert result.exit_reason == "timeout", result
        assert result.observation == "started\ntimeout: exceeded 1 s wall clock", result
