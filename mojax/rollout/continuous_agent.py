"""A multi-turn rollout on the continuous-batching sampler: tool turns enter the running decode.

With a ``ContinuousSampler`` (``rollout.engine='continuous'``), ``run_rollout`` does not decode in
rounds. It opens one ``ContinuousSession`` for the rollout and steps it segment by segment; after
each segment, for the rows that segment finished::

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


def applies(sampler) -> bool:
    """The sampler can be stepped by this driver (it has ``open``: a ``ContinuousSampler``)."""
    return callable(getattr(sampler, "open", None))


def drive(
    spec: RolloutSpec,
    sampler,
    rows: list[Row],
    runner: ToolRunner,
    tokenizer,
    task,
    generate_kwargs: dict,
    counters: collections.Counter,
    poll,
):
    """Runs the whole rollout on one session (module docstring); returns its ``SamplingOutput``.

    ``generate_kwargs``: the first decode call's arguments (``ContinuousSampler.open``), its
    ``max_new_tokens`` the whole first turn. ``poll`` is called after every segment (several
    processes: once, at the end)."""
    alone = distributed.process_count() == 1
    own = None if alone else distributed.own_groups(len(generate_kwargs["prompt_tokens"]))
    session = sampler.open(**generate_kwargs, own=own)
    state = session.state
    for row in rows:
        row.start_call(0, spec.max_new_tokens)
    while session.busy or runner.pending:
        if session.busy:
            finished = session.step(more_coming=runner.pending)
        else:  # every slot idle, calls running: wait for the first to end
            finished = np.zeros((0,), np.int64)
        if alone:
            poll()
        view = DecodeView(state.tokens, state.length.astype(np.int64), state.finish_reason, 0)
        tool_rows, _ = settle(spec, rows, view, tokenizer, counters, only=finished)
        runner.start(rows, parse_calls(spec, rows, tool_rows, task, counters))
        results = runner.ready(wait=not session.busy)
        _requeue(spec, session, rows, results, tokenizer, task, counters)
    if not alone:
        poll()  # the same number of times on every process
    counters["decode_calls"] = 1
    counters["segments"] += session.segments
    return state.output()


def _requeue(spec, session, rows: list[Row], results: dict, tokenizer, task, counters) -> None:
    """Requeues the rows whose observation is ready (``results``, or a malformed call) and the
    rejected stop candidates, each with a new turn or the rest of its turn (``_round_plan`` of
    ``mojax.rollout.agent``, per row). A row whose context, observation and one more token do
    not fit its cache slot ends with ``budget``."""
    ready = [
        i
        for i, row in enumerate(rows)
        if row.waiting == WAIT_TOOL and (row.call is None or i in results)
    ]
    obs = observations(spec, rows, results, tokenizer, task, counters, only=ready)
    false_stops = [i for i, row in enumerate(rows) if row.waiting == WAIT_FALSE_STOP]
    state = session.state
    room = state.max_total_len - state.prompts.shape[1]  # a slot's cache past the prompt bucket
    take, appended, budgets = [], [], []
    for i in sorted(list(obs) + false_stops):
        row = rows[i]
        ids, fields = obs.get(i, ([], None))
        if row.length + len(ids) + 1 > room:
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
