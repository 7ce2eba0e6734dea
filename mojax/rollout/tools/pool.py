"""Worker pool that runs a batch of tool calls in parallel on the host, results in call order.

A rollout step stops many rows at a tool tag at once; their calls are independent, mostly waiting on
subprocesses (Python sandbox) or sockets (retrieval), so threads are the right unit: the GIL is
released while they wait. Every call gets a per-call deadline measured from when it *starts* running
(not from when it was queued), and no call can take the batch down: a tool that raises becomes
``ToolResult(exit_reason="exception")`` and one that overruns its deadline becomes
``ToolResult(exit_reason="timeout")``. The overrunning thread cannot be killed (Python threads
cannot be); the pool's timeout is a backstop.

A tool that enforces a wall-clock limit of its own (``PythonSandbox``, ``PythonSession``) says how
long one call can take at most, kill and clean-up included, as ``deadline_s``. The pool then waits
``deadline_s + DEADLINE_MARGIN_S`` for its calls when that is longer than its own timeout, so the
two limits never race: a slow call ends with the tool's own timeout result, whose text is the only
one it can produce, and a resumed run sees the same observation.

Counts of each exit reason are kept in ``ToolPool.stats`` (host-side state for the metrics writer).
"""

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from mojax.rollout.tools.result import ToolResult

ToolCall = tuple[Callable[..., ToolResult], tuple]
DEADLINE_MARGIN_S = 1.0  # how much longer the pool waits than a self-timed tool's ``deadline_s``


@runtime_checkable
class SelfTimed(Protocol):
    """A tool whose calls end on their own within ``deadline_s`` seconds of starting."""

    deadline_s: float


def call_timeout(fn: Callable, timeout: float | None) -> float | None:
    """The pool's deadline for a call of ``fn``: ``timeout``, raised past the tool's own deadline.

    ``fn`` is a tool's bound ``run`` method (or the tool itself); when its object is ``SelfTimed``,
    the result is at least ``deadline_s + DEADLINE_MARGIN_S``. ``None`` (no deadline) stays None.
    """
    if timeout is None:
        return None
    owner = getattr(fn, "__self__", fn)  # a bound method's object; else the callable itself
    if isinstance(owner, SelfTimed):
        return max(timeout, float(owner.deadline_s) + DEADLINE_MARGIN_S)
    return timeout


class ToolPool:
    """Thread pool for tool calls; use as a context manager or call ``close()``.

    Args:
      max_workers: parallel calls (each Python sandbox call is one process).
      timeout_s: default per-call deadline (seconds from the call's start), ``None`` = no deadline;
        longer for a self-timed tool (``call_timeout``).
    """

    def __init__(self, max_workers: int = 8, timeout_s: float | None = 60.0):
        if not isinstance(max_workers, int) or max_workers <= 0:
            raise ValueError(f"ToolPool: max_workers must be a positive int, got {max_workers!r}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"ToolPool: timeout_s must be positive or None, got {timeout_s!r}")
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self.stats: collections.Counter = collections.Counter()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="mojax-tool"
        )
        self._lock = threading.Lock()

    def __enter__(self) -> "ToolPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stops accepting calls; does not wait for overrunning calls (they end on their own)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def map(
        self,
        fn: Callable[[str], ToolResult],
        inputs: Sequence[str],
        timeout_s: float | None = ...,
    ) -> list[ToolResult]:
        """``[fn(x) for x in inputs]`` in parallel (e.g. ``pool.map(sandbox.run, codes)``)."""
        return self.run([(fn, (x,)) for x in inputs], timeout_s=timeout_s)

    def run(self, calls: Sequence[ToolCall], timeout_s: float | None = ...) -> list[ToolResult]:
        """Runs ``fn(*args)`` for each ``(fn, args)`` in parallel; returns results in input order.

        Args:
          calls: ``(callable, args)`` pairs; each callable returns a ``ToolResult``.
          timeout_s: per-call deadline from the call's start; default the pool's ``timeout_s``;
            longer for a self-timed tool (``call_timeout``).
        """
        timeout = self.timeout_s if timeout_s is ... else timeout_s
        timeouts = [call_timeout(fn, timeout) for fn, _ in calls]
        started: dict[int, float] = {}
        futures = [
            self._executor.submit(self._call, i, fn, tuple(args), started)
            for i, (fn, args) in enumerate(calls)
        ]
        results: list[ToolResult | None] = [None] * len(futures)
        pending = dict(enumerate(futures))
        while pending:
            done, _ = concurrent.futures.wait(
                list(pending.values()), timeout=0.02, return_when=concurrent.futures.FIRST_COMPLETED
            )
            now = time.monotonic()
            for i, future in list(pending.items()):
                if future in done:
                    results[i] = future.result()
                    del pending[i]
                elif timeouts[i] is not None and i in started and now - started[i] > timeouts[i]:
                    results[i] = ToolResult(
                        output=f"Error: tool call exceeded {timeouts[i]:g} s",
                        error=f"timeout: tool call exceeded {timeouts[i]:g} s (worker pool)",
                        timed_out=True,
                        exit_reason="timeout",
                        duration_s=now - started[i],
                    )
                    del pending[i]
        with self._lock:
            self.stats.update(r.exit_reason for r in results)
        return results

    def state_dict(self) -> dict:
        """Exit-reason counts, for the checkpoint's host state."""
        with self._lock:
            return {"stats": dict(self.stats)}

    def load_state_dict(self, state: dict) -> None:
        if "stats" not in state:
            raise KeyError("ToolPool.load_state_dict: missing key 'stats'")
        with self._lock:
            self.stats = collections.Counter(state["stats"])

    @staticmethod
    def _call(i: int, fn, args: tuple, started: dict) -> ToolResult:
        started[i] = time.monotonic()
        try:
            result = fn(*args)
        except Exception as e:  # noqa: BLE001 - a tool bug must not end the rollout
            return ToolResult(
                output=f"Error: tool failed ({type(e).__name__})",
                error=f"{type(e).__name__}: {e}",
                exit_reason="exception",
                duration_s=time.monotonic() - started[i],
            )
        if not isinstance(result, ToolResult):
            return ToolResult(
                output="Error: tool returned no result",
                error=f"tool returned {type(result).__name__}, not ToolResult",
                exit_reason="exception",
                duration_s=time.monotonic() - started[i],
            )
        return result
