"""A multi-turn rollout on a session engine: tool turns enter the running decode.

With an engine driven as sessions (``protocol.Sampler`` with ``rounds = False``: the continuous
engine, ``rollout.engine='continuous'``, or any engine of ``protocol.SAMPLERS``), ``run_rollout``
does not decode in rounds. It opens one ``protocol.Session`` for the rollout and steps it (the
continuous engine: segment by segment); after each step, for the rows that step finished::

    settle        sort each finished row: done (eos, length, budget), a tool call, a rejected
                  multi-token stop candidate                              rows.settle(only=...)
    start calls   parse the calls (turn / call limits) and start each at once on the ToolPool,
                  one row per task                     calls.parse_calls, ToolRunner.start
    requeue       every row whose result has come back (or whose call was malformed) gets its
                  observation (loss-masked) and a new turn, a rejected candidate the rest of its
                  turn; they go to the front of the session's queue and enter the next free slots
                  while the other rows decode on           calls.observations, session.requeue

A row waiting for its tool holds no slot, and no row waits for a round to end. When every slot is
idle and calls still run, the driver waits for the first of them to end.

What a row samples does not depend on this schedule: each row draws from its own random stream
(call key, row id, response position), and its turns, calls and observations are its own. So the
rollout equals the round-based one (``tests/rollout/test_rollout_continuous.py``: the static
sampler's rollout, token for token), with two differences that only budgets expose: a row's turn
is decoded in one piece (``decode_segment`` pauses belong to the static sampler's rounds), and a
row's room in the cache is its own slot's (``max_total_len``), where the static sampler's rows
share one write position and end with ``budget`` when the longest row's context fills it.

Several processes: each process runs its own session over the rows of its own block of prompt
groups (``distributed.group_layout``, ``own_groups``), on its own devices, and runs those rows'
calls; nothing crosses processes while they decode (each has its own number of segments), and
``run_rollout`` all-gathers the finished rows once (``gather_rows``). ``poll`` (a preemption
check agrees across processes) is then called once, after the session, instead of after every
segment. Files: none.
"""

from __future__ import annotations

import collections

import numpy as np

from mojax import distributed
from mojax.rollout.calls import ToolRunner, observations, parse_calls
from mojax.rollout.rows import WAIT_FALSE_STOP, WAIT_TOOL, DecodeView, Row, settle
from mojax.rollout.spec import RolloutSpec
from mojax.sampling import protocol


def drive(
    spec: RolloutSpec,
    sampler,
    rows: list[Row],
    runner: ToolRunner,
    tokenizer,
    task,
    requests: protocol.Requests,
    counters: collections.Counter,
    poll,
):
    """Runs the whole rollout on one session (module docstring) of a ``protocol.Sampler``;
    returns its output and the ``DecodeView`` of its rows.

    ``requests``: the rows (``Sampler.open``), ``max_new_tokens`` the whole first turn. ``poll``
    is called after every step (several processes: once, at the end)."""
    alone = distributed.process_count() == 1
    session = sampler.open(requests, dict(spec.sampling))
    for row in rows:
        row.start_call(0, spec.max_new_tokens)
    while session.busy or runner.pending:
        if session.busy:
            finished = session.step(more_coming=runner.pending)
        else:  # every slot idle, calls running: wait for the first to end
            finished = np.zeros((0,), np.int64)
        if alone:
            poll()
        tool_rows, _ = settle(spec, rows, _view(session), tokenizer, counters, only=finished)
        runner.start(rows, parse_calls(spec, rows, tool_rows, task, counters))
        results = runner.ready(wait=not session.busy)
        _requeue(spec, session, rows, results, tokenizer, task, counters)
    if not alone:
        poll()  # the same number of times on every process
    for name, value in session.counters().items():
        counters[name] = value
    return session.output(), _view(session)


def _view(session) -> DecodeView:
    """The session's host buffers as the rows read them (no shared cache position)."""
    p = session.view()
    return DecodeView(p.tokens, np.asarray(p.lengths).astype(np.int64), p.finish_reason, 0)


def _requeue(spec, session, rows: list[Row], results: dict, tokenizer, task, counters) -> None:
    """Requeues the rows whose observation is ready (``results``, or a malformed call) and the
    rejected stop candidates, each with a new turn or the rest of its turn (``_round_plan`` of
    ``mojax.rollout.agent``, per row). A row whose observation and one more token do not fit
    its room in the engine's cache (``session.fits``) ends with ``budget``."""
    ready = [
        i
        for i, row in enumerate(rows)
        if row.waiting == WAIT_TOOL and (row.call is None or i in results)
    ]
    obs = observations(spec, rows, results, tokenizer, task, counters, only=ready)
    false_stops = [i for i, row in enumerate(rows) if row.waiting == WAIT_FALSE_STOP]
    order = sorted(list(obs) + false_stops)
    if not order:
        return
    fits = session.fits(order, [len(obs[i][0]) if i in obs else 0 for i in order])
    take, appended, budgets = [], [], []
    for i, fit in zip(order, fits, strict=True):
        row = rows[i]
        ids, fields = obs.get(i, ([], None))
        if not fit:
            row.end("budget", **(fields or {}))
            counters["cache_exhausted"] += 1
            continue
        if fields is not None:
            row.close_turn(row.length, "tool", executed=True, **fields)
            row.n_calls += bool(fields["call"] is not None or spec.count_malformed)
            counters["tool_calls"] += 1
            row.turn_start, row.turn_used, row.false_stops = row.length + len(ids), 0, 0
        budget = spec.max_new_tokens - row.turn_used
        row.start_call(row.length + len(ids), budget)
        take.append(i)
        appended.append(np.asarray(ids, np.int32))
        budgets.append(budget)
    if take:
        session.requeue(take, appended, budgets)
