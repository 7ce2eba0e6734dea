"""The tool phase of a rollout: parse the calls, run them on a ``ToolPool``, make observations.

``parse_calls`` applies the turn / call limits and parses each call (``task.parse_tool_call``);
``ToolRunner`` runs them, either when the round's observations are needed (serial) or at once in
the background (``RolloutSpec.overlap_tools``), and ``observations`` turns the results into the
tokens that are appended (``task.format_observation``, truncated to ``max_obs_tokens``).

Results are collected per row and handled in row order, so the observations, the counters and the
``Turn`` records do not depend on when each call finished.

Multi-process: a process runs the calls of the rows it owns (``mojax.distributed.RowLayout.owner``:
the rows its devices hold) on its own host. Where several processes hold the same rows
(``RowLayout.shared``), they split those rows' calls and ``ToolRunner.results`` all-gathers their
results, so each holder appends the same observations.
"""

from __future__ import annotations

import collections
import concurrent.futures
import math
from collections.abc import Callable

import numpy as np

from mojax import distributed
from mojax.rollout.observations import decode_ids, encode_observation, malformed_message
from mojax.rollout.rows import WAIT_TOOL, Row
from mojax.rollout.spec import RolloutSpec
from mojax.rollout.tools.pool import ToolPool
from mojax.rollout.tools.result import ToolResult


def tool_fn(tool) -> Callable[[str], ToolResult] | None:
    """``tool.run`` or the callable ``tool`` itself (None for no tool)."""
    if tool is None:
        return None
    run = getattr(tool, "run", None)
    if callable(run):
        return run
    if callable(tool):
        return tool
    raise ValueError(f"tool must be callable (text -> ToolResult) or have .run, got {tool!r}")


def parse_calls(
    spec: RolloutSpec, rows: list[Row], tool_rows: list[int], task, counters: collections.Counter
) -> list[int]:
    """Ends the tool rows past the turn / call limits; parses the others' calls.

    Returns:
      The rows whose call is answered (``Row.call``: the parsed input, None when malformed).
    """
    answered = []
    for i in tool_rows:
        row = rows[i]
        if len(row.turns) + 1 >= spec.max_turns:
            row.end("max_turns")
        elif row.n_calls >= spec.max_tool_calls:
            row.end("max_tool_calls")
        else:
            try:
                row.call = task.parse_tool_call(row.text)
            except Exception:  # noqa: BLE001 - a parser bug must not end the rollout
                counters["parse_exceptions"] += 1
                row.call = None
            answered.append(i)
    return answered


class ToolRunner:
    """Runs a rollout's tool calls on a ``ToolPool`` and hands back each row's result.

    Args:
      spec: the rollout's settings (``multi_turn``, ``stateful``, ``tool_timeout_s``,
        ``overlap_tools``).
      tool: ``text -> ToolResult`` callable or an object with ``.run``; with ``spec.stateful``
        an object with ``.session()`` (one session per row).
      pool: the pool to run calls in (default: a private pool of ``min(8, B)`` threads, closed by
        ``close``).
      owned: bool [B], the rows whose calls this process runs (all rows in one process).
      task_name: for the error when a tool is needed but missing.
      gather: all-gather the results of every process (rows held by several processes).

    Raises:
      ValueError: no usable ``tool`` while calls can be answered; ``stateful`` without
        ``.session()``.
    """

    def __init__(
        self, spec: RolloutSpec, tool, pool: ToolPool | None, owned, task_name, gather=False
    ):
        owned = np.asarray(owned, bool)
        self.owned, self.gather = owned, bool(gather)
        self.fn = tool_fn(tool)
        if spec.multi_turn and self.fn is None:
            raise ValueError(f"tool: task {task_name!r} stops at {spec.stop.text!r}")
        if spec.stateful and not callable(getattr(tool, "session", None)):
            raise ValueError("stateful=True needs a tool with .session() (e.g. PythonSandbox)")
        self.sessions = (
            {i: tool.session() for i in np.flatnonzero(owned)} if spec.stateful else None
        )
        self.own_pool = pool is None and spec.multi_turn
        if self.own_pool:
            pool = ToolPool(
                max_workers=max(1, min(8, int(owned.sum()))), timeout_s=spec.tool_timeout_s
            )
        self.pool = pool
        self._executor = None
        if spec.overlap_tools and spec.decode_segment > 0 and spec.multi_turn:
            # one waiting thread per batch in flight: a round submits at most one batch per
            # segment of its longest turn, and collects them all before the next round
            batches = math.ceil(spec.max_new_tokens / spec.decode_segment)
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=batches, thread_name_prefix="mojax-rollout-calls"
            )
        self._rows_executor = None  # ``start``'s, made on first use
        self._queued: list[int] = []  # rows whose calls run at the next ``results``
        self._running: list[tuple[list[int], concurrent.futures.Future]] = []

    def _calls(self, rows: list[Row], ids: list[int]):
        return [(self.sessions[i].run if self.sessions else self.fn, (rows[i].call,)) for i in ids]

    def submit(self, rows: list[Row], answered: list[int]) -> None:
        """Hands over the rows whose (well-formed) calls must run; starts them in the
        background when overlapping, else queues them for ``results``."""
        ids = [i for i in answered if rows[i].call is not None and self.owned[i]]
        if not ids:
            return
        if self._executor is None:
            self._queued += ids
        else:
            future = self._executor.submit(self.pool.run, self._calls(rows, ids))
            self._running.append((ids, future))

    def results(self, rows: list[Row]) -> dict[int, ToolResult]:
        """Every submitted call's result by row (waits for the ones still running); with
        ``gather``, every process's results (all-gathered: a collective, called at the same point
        of the schedule on every process)."""
        out = {}
        if self._queued:  # the serial schedule: one batch of the round's calls, in row order
            ids, self._queued = sorted(self._queued), []
            out.update(zip(ids, self.pool.run(self._calls(rows, ids)), strict=True))
        for ids, future in self._running:
            out.update(zip(ids, future.result(), strict=True))
        self._running = []
        if self.gather and distributed.process_count() > 1:
            out = distributed.merge_owned(distributed.allgather_objects(out))
        return out

    def start(self, rows: list[Row], answered: list[int]) -> None:
        """Starts each answered row's (well-formed) call at once in the background, one row per
        task, so each result is ready as soon as its own call ends (``ready``); for a rollout
        whose tool rows re-enter a running decode (``mojax.rollout.continuous_agent``; one
        process)."""
        if self._rows_executor is None:  # one waiting thread per call the pool runs at once
            self._rows_executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, self.pool.max_workers), thread_name_prefix="mojax-row-calls"
            )
        for i in answered:
            if rows[i].call is not None and self.owned[i]:
                future = self._rows_executor.submit(self.pool.run, self._calls(rows, [i]))
                self._running.append(([i], future))

    @property
    def pending(self) -> bool:
        """Calls started by ``start`` whose results ``ready`` has not handed back."""
        return bool(self._running)

    def ready(self, wait: bool = False) -> dict[int, ToolResult]:
        """The results of the started calls that have ended, by row (handed back once); with
        ``wait``, first waits until at least one has ended."""
        if wait and self._running:
            concurrent.futures.wait(
                [f for _, f in self._running], return_when=concurrent.futures.FIRST_COMPLETED
            )
        out, left = {}, []
        for ids, future in self._running:
            if future.done():
                out.update(zip(ids, future.result(), strict=True))
            else:
                left.append((ids, future))
        self._running = left
        return out

    def close(self) -> None:
        for executor in (self._executor, self._rows_executor):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        if self.own_pool:
            self.pool.close()


def observations(
    spec: RolloutSpec,
    rows: list[Row],
    results: dict[int, ToolResult],
    tokenizer,
    task,
    counters: collections.Counter,
    only=None,
) -> dict[int, tuple[list[int], dict]]:
    """Observation tokens and ``Turn`` fields of every row waiting on a call, in row order
    (``only``: of those rows only; ``results`` must hold each one's result unless malformed).

    A row whose observation and one more token do not fit in its response buffer ends with
    ``budget`` (its call did run: ``executed=False`` records that nothing was appended).

    Returns:
      ``{row: (observation ids, Turn fields)}`` for the rows to resume.
    """
    obs = {}
    for i in range(len(rows)) if only is None else only:
        row = rows[i]
        if row.waiting != WAIT_TOOL:
            continue
        if row.call is None:
            counters["malformed"] += 1
            message = malformed_message(spec.stop.text)  # shown as is (no error line)
            result = ToolResult(output=message, error=message, exit_reason="error")
            exit_reason = "malformed"
        else:
            result = results[i]
            exit_reason = result.exit_reason
            counters["tool_calls_run"] += 1
            counters[f"exit/{exit_reason}"] += 1
            counters["tool_errors"] += result.error is not None
            counters["timeouts"] += bool(result.timed_out)
            counters["output_truncated"] += bool(result.truncated)
        ids, cut = encode_observation(  # the malformed-call message is the framework's own text
            tokenizer, task, result.observation, spec.max_obs_tokens, trusted=row.call is None
        )
        counters["obs_truncated"] += cut
        fields = dict(
            call=row.call,
            malformed=row.call is None,
            observation=decode_ids(tokenizer, ids),
            tool_output=result.observation,
            obs_tokens=len(ids),
            obs_truncated=cut,
            exit_reason=exit_reason,
            error=result.error,
            timed_out=bool(result.timed_out),
            output_truncated=bool(result.truncated),
            duration_s=float(result.duration_s),
        )
        if row.length + len(ids) + 1 > spec.max_response_len:  # no room for it and one token
            row.end("budget", executed=False, **fields)
            continue
        obs[i] = (ids, fields)
    return obs
