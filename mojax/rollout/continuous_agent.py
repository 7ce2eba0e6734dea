"""The rollout driver: one ``protocol.Session`` stepped until every row is done, for every engine.

``run_rollout`` opens one session of the run's sampler (``mojax.sampling.protocol``) and
``drive`` steps it; after each step, for the rows whose decode that step ended::

    settle        sort each finished row: done (eos, length, budget), a tool call, a rejected
                  multi-token stop candidate                              rows.settle(only=...)
    run calls     parse the calls (turn / call limits) and run them on the ToolPool
                                                       calls.parse_calls, ToolRunner
    requeue       every row whose result has come back (or whose call was malformed) gets its
                  observation (loss-masked) and a new turn, a rejected candidate the rest of its
                  turn, where the engine has room for it (``session.fits``; else the row ends
                  with ``budget``)              calls.observations, session.fits, session.requeue

A session with ``rounds`` (the static engine, ``mojax.sampling.static.session``) takes a whole
round: its calls run as ``ToolRunner.submit`` schedules them (serially once every row has stopped,
or, with decode segments and ``overlap_tools``, from the segment each row stopped in) and the
round's rows are requeued together once every result is in. Otherwise (the continuous engine)
each call starts as its row stops (one row per task, ``ToolRunner.start``) and its row is
requeued as soon as its result is ready, at the front of the engine's queue, while the other rows
decode on; a row waiting for its tool holds no slot, and when nothing decodes and calls still run
the driver waits for the first of them to end.

What a row samples does not depend on this schedule: each row draws from its own random stream
(call key, row id, response position), and its turns, calls and observations are its own. So the
continuous engine's rollout equals the static one (``tests/integration/rollout/test_rollout_continuous.py``,
token for token), with two differences that only budgets expose: a row's turn is decoded in one
piece (decode segments are the static engine's), and a row's room in the cache is its own slot's
(``max_total_len``), where the static engine's rows share one write position and end with
``budget`` when the longest row's context fills it.

Several processes: the session's ``layout`` says which rows this process decodes and runs the
calls of. The static engine's rows lie over the mesh and its rounds are agreed (the session's
collectives, ``ToolRunner.results``), so ``poll`` runs after every step on every process. The
continuous engine runs one session per process over the rows of its own block of prompt groups
(``distributed.group_layout``, ``own_groups``), on its own devices; nothing crosses processes while
they decode (each has its own number of segments), so ``poll`` (a preemption check agrees across
processes) runs once, after the session. ``run_rollout`` all-gathers the finished rows once
(``gather_rows``). Files: none.
"""

from __future__ import annotations

import collections

import numpy as np

from mojax import distributed
from mojax.rollout.calls import ToolRunner, observations, parse_calls
from mojax.rollout.rows import WAIT_FALSE_STOP, WAIT_TOOL, DecodeView, Row, settle
from mojax.rollout.spec import RolloutSpec


def drive(
    spec: RolloutSpec,
    session,
    rows: list[Row],
    runner: ToolRunner,
    tokenizer,
    task,
    counters: collections.Counter,
    poll,
):
    """Runs the whole rollout on one ``protocol.Session`` (module docstring); returns its output
    and the ``DecodeView`` of its rows (``counters`` gets the session's).

    A session with ``rounds`` (the static engine) takes a whole round: the round's calls run as
    ``ToolRunner.submit`` schedules them (serial, or overlapping its decode segments) and the rows
    are requeued once all have their results (``ToolRunner.results``, all-gathered where processes
    share rows); ``poll`` is called after every step, on every process. Otherwise each call starts
    as its row ends (``ToolRunner.start``) and its row is requeued as soon as its result is ready;
    ``poll`` is called after every step (several processes: once, at the end)."""
    rounds = bool(session.rounds)
    agreed = rounds or distributed.process_count() == 1  # poll at every step
    for row in rows:
        row.start_call(0, spec.max_new_tokens)
    while session.busy or (runner.pending and not rounds):
        if session.busy:
            finished = session.step(more_coming=runner.pending)
        else:  # nothing to decode, calls running: wait for the first to end
            finished = np.zeros((0,), np.int64)
        view = DecodeView.of(session.view())
        tool_rows = settle(spec, rows, view, tokenizer, counters, only=finished)
        answered = parse_calls(spec, rows, tool_rows, task, counters)
        if rounds:  # the round's rows wait while the engine resumes its paused ones
            runner.submit(rows, answered)
            results = None if session.busy else runner.results(rows)
        else:
            runner.start(rows, answered)
            results = runner.ready(wait=not session.busy)
        if results is not None:
            _requeue(spec, session, rows, results, tokenizer, task, counters)
        if agreed:
            poll()  # after every step and its tools: a signal abandons the rollout here
    if not agreed:
        poll()  # the same number of times on every process
    counters.update(session.counters())
    return session.output(), DecodeView.of(session.view())


def _requeue(spec, session, rows: list[Row], results: dict, tokenizer, task, counters) -> None:
    """Requeues the rows whose observation is ready (``results``, or a malformed call) and the
    rejected stop candidates, each with a new turn or the rest of its turn. A row whose
    observation and one more token do not fit its room in the engine's cache (``session.fits``)
    ends with ``budget``."""
    ready = [
        i
        for i, row in enumerate(rows)
        if row.waiting == WAIT_TOOL and (row.call is None or i in results)
    ]
    obs = observations(spec, rows, results, tokenizer, task, counters, only=ready)
    false_stops = [i for i, row in enumerate(rows) if row.waiting == WAIT_FALSE_STOP]
    order = sorted(list(obs) + false_stops)
    # every process asks (a round's verdict is agreed), with or without rows of its own
    fits = session.fits(order, [len(obs[i][0]) if i in obs else 0 for i in order])
    take, appended, budgets = [], [], []
    for i, fit in zip(order, fits, strict=True):
        row = rows[i]
        ids, fields = obs.get(i, ([], None))
        if not fit:  # counted by the engine (``cache_exhausted``)
            row.end("budget", **(fields or {}))
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
