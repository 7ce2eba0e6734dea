"""Multi-turn agentic rollouts: decode, stop at a tool call, run the tool, append, resume.

The driver runs a sampler's resumable decode (``Sampler.generate`` then ``append_and_continue`` on
the same KV cache; ``mojax.sampling.sampler``) and, between decode calls, the host work of a
tool-integrated agent (ToRL, arXiv:2503.23383; Search-R1, arXiv:2503.09516). One round is::

    decode until stop   every live row decodes until eos or the task's tool stop (``</calc>``,
                        ``</code>``, ...)                                   rows.settle
    parse and run tools rows that stopped on the tool stop: parse the call, run the calls in
                        parallel on a ToolPool                        calls.parse_calls, ToolRunner
    append observations format and tokenize the observations, append them (loss-masked) to those
                        rows only and decode them further          calls.observations, _round_plan

until every row is finished (eos, length, turn / call limits, token budget). Rows proceed
independently: a finished row stays finished while the others keep calling tools.

Observation tokens are in ``tokens`` with ``loss_mask`` 0 and ``logprobs`` 0, so the PPO loss never
trains on tool output; the policy tokens carry the sampler's fp32 policy log-probs (the
``old_logprobs`` of the rollout batch contract (``docs/architecture.md``)). ``n_calls`` is the ``N_call`` of the tool reward
``r_tool`` of ParetoPO (arXiv:2606.16111, Eq. 4).

Tool stops that are several tokens are detected with candidate ids and a host-side check (see
``mojax.rollout.stops``). By default the tools run while the device is idle (a decode call runs
until every row has stopped). With ``RolloutSpec.decode_segment`` the decode runs in segments
and, with ``overlap_tools``, a row's call starts at the end of the segment it stopped in while the
other rows decode on; the observations are appended at the same point of the schedule, so the
tokens and log-probs do not depend on when the tools finish.

A rollout can be abandoned between two decode calls (``interrupt``, on a preemption signal).

On a ``ContinuousSampler`` there are no rounds: ``mojax.rollout.continuous_agent`` steps one
continuous-batching session and requeues each tool row as soon as its observation is ready, while
the other rows decode on.

Multi-process (``mojax.distributed``): each process does the host work of the rows its devices hold
(``RowLayout``): it reads only those rows after a decode call, runs their tools and builds their part
of the next append; the processes agree per round on whether any row resumes and on the widest
observation (one small collective each), and the finished rollout is all-gathered once.

Shapes: B = P*G rows, prompt-major (row ``p * G + g``); response arrays are [B, max_response_len]
(response slots); the KV cache has ``max_total_len`` cache slots.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from mojax import distributed
from mojax.models.qwen import DEFAULT_LOGICAL_AXIS_RULES
from mojax.rollout import continuous_agent
from mojax.rollout import stops as stops_lib
from mojax.rollout.calls import ToolRunner, observations, parse_calls
from mojax.rollout.observations import decode_ids
from mojax.rollout.rows import WAIT_FALSE_STOP, DecodeView, Row, Turn, settle
from mojax.rollout.spec import RolloutSpec
from mojax.rollout.tools.pool import ToolPool
from mojax.sampling import protocol
from mojax.sampling.protocol import Sampler


@dataclasses.dataclass
class RolloutResult:
    """Everything a multi-turn rollout returns (host numpy arrays; rows prompt-major).

    Attributes:
      tokens: int32 [B, max_response_len] response tokens (policy and observation tokens),
        ``pad_id`` after ``lengths``.
      logprobs: fp32 [B, max_response_len] policy log-probs of the sampled tokens (0 on
        observations, padding).
      loss_mask: bool [B, max_response_len] True only on policy-generated tokens.
      lengths: int32 [B] used response slots.
      n_calls: int32 [B] tool calls answered with an observation (malformed calls included
        unless ``count_malformed=False``).
      finish_reason: B strings of ``FINISH_REASONS``.
      texts: B decoded response transcripts (observations included).
      turns: per row, its ``Turn`` records in order.
      counters: host counts (``tool_calls``, ``tool_errors``, ``timeouts``, ``malformed``,
        ``obs_truncated``, ``false_stops``, ``decode_calls``, ``exit/<reason>``, ...).
      num_samples: G.
      stop: the ``StopSpec`` of the tool stop (None for single-turn tasks).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    loss_mask: np.ndarray
    lengths: np.ndarray
    n_calls: np.ndarray
    finish_reason: list[str]
    texts: list[str]
    turns: list[list[Turn]]
    counters: dict[str, int]
    num_samples: int
    stop: stops_lib.StopSpec | None


@dataclasses.dataclass(frozen=True)
class _AppendPlan:
    """One ``append_and_continue`` call: int32 [B, width] observations, [B] lengths / resume /
    token budgets, and the bucket floor of the append."""

    obs_tokens: np.ndarray
    obs_lengths: np.ndarray
    resume: np.ndarray
    budget: np.ndarray
    min_bucket: int


def _pad_prompts(prompts_ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    if not len(prompts_ids):
        raise ValueError("prompts_ids: need at least one prompt")
    lengths = np.asarray([len(p) for p in prompts_ids], np.int32)
    if lengths.min() < 1:
        raise ValueError(f"prompts_ids: prompt {int(np.argmin(lengths))} is empty")
    tokens = np.zeros((len(prompts_ids), int(lengths.max())), np.int32)
    for i, ids in enumerate(prompts_ids):
        tokens[i, : len(ids)] = np.asarray(ids, np.int32)
    return tokens, lengths


def _turn_budget(spec: RolloutSpec, left: int) -> int:
    """Budget of the next decode call of a row with ``left`` tokens of its turn: all of them, or
    one segment."""
    return min(left, spec.decode_segment) if spec.decode_segment else left


def _fits(spec: RolloutSpec, view: DecodeView, cache_slots: int, width: int, min_bucket: int):
    """The cache can take an append of ``width`` tokens and one more decode step."""
    return view.cache_end + protocol.bucket_length(width, min_bucket) + 1 <= cache_slots


def _pause_plan(
    spec: RolloutSpec, rows: list[Row], paused: list[int], view, cache_slots, counters
) -> _AppendPlan | None:
    """Resumes the rows paused at a segment's end with an empty append (same turn, the rest of
    its budget); the others keep waiting. Without cache room the paused rows end (``budget``)."""
    if not _fits(spec, view, cache_slots, 0, spec.false_stop_bucket):
        for i in paused:
            rows[i].end("budget")
        counters["cache_exhausted"] += 1
        return None
    b = len(rows)
    resume, budget = np.zeros((b,), bool), np.full((b,), spec.max_new_tokens, np.int32)
    for i in paused:
        resume[i] = True
        budget[i] = _turn_budget(spec, spec.max_new_tokens - rows[i].turn_used)
        rows[i].start_call(rows[i].length, budget[i])
    counters["segment_resumes"] += 1
    empty = np.zeros((b, 1), np.int32)
    return _AppendPlan(empty, np.zeros((b,), np.int32), resume, budget, spec.false_stop_bucket)


def _round_plan(
    spec: RolloutSpec, rows: list[Row], obs: dict, view, cache_slots, counters
) -> _AppendPlan | None:
    """The round's append: each answered row gets its observation and a new turn, each rejected
    stop candidate the rest of its turn. None when no row resumes, or (rows ended with
    ``budget``) when the cache cannot take the append and one more step."""
    false_stops = [i for i, row in enumerate(rows) if row.waiting == WAIT_FALSE_STOP]
    resume_rows = sorted(list(obs) + false_stops)
    width = max([len(obs[i][0]) for i in obs] + [0])
    # every process takes the same decision: any row of any process resumes; the widest append
    any_resume, width = (int(x) for x in distributed.global_max([bool(resume_rows), width]))
    if not any_resume:
        return None
    min_bucket = spec.min_obs_bucket if width else spec.false_stop_bucket
    if not _fits(spec, view, cache_slots, width, min_bucket):  # these rows end here
        for i in resume_rows:
            rows[i].end("budget", **(obs[i][1] if i in obs else {}))
        counters["cache_exhausted"] += 1
        return None
    b = len(rows)
    obs_tokens, obs_lengths = np.zeros((b, max(width, 1)), np.int32), np.zeros((b,), np.int32)
    resume, budget = np.zeros((b,), bool), np.full((b,), spec.max_new_tokens, np.int32)
    for i in resume_rows:
        row, resume[i] = rows[i], True
        if i in obs:
            ids, fields = obs[i]
            obs_tokens[i, : len(ids)], obs_lengths[i] = ids, len(ids)
            row.close_turn(row.length, "tool", executed=True, **fields)
            row.n_calls += bool(fields["call"] is not None or spec.count_malformed)
            counters["tool_calls"] += 1
            row.turn_start, row.turn_used, row.false_stops = row.length + len(ids), 0, 0
        # a new turn, or a rejected candidate's turn: what is left of it (a segment at most)
        budget[i] = _turn_budget(spec, spec.max_new_tokens - row.turn_used)
        row.start_call(row.length + obs_lengths[i], budget[i])
    return _AppendPlan(obs_tokens, obs_lengths, resume, budget, min_bucket)


def as_sampler(sampler_or_model, mesh=None, rules=DEFAULT_LOGICAL_AXIS_RULES) -> Sampler:
    """A ``Sampler`` as is; a ``QwenModel`` as the static in-graph engine over ``mesh``."""
    if hasattr(sampler_or_model, "update_weights"):
        return sampler_or_model
    return protocol.in_graph(sampler_or_model, mesh=mesh, rules=rules)


def run_rollout(
    spec: RolloutSpec,
    sampler,
    tokenizer,
    task,
    prompts_ids: Sequence[Sequence[int]],
    *,
    key: jax.Array,
    num_samples: int = 1,
    tool=None,
    pool: ToolPool | None = None,
    mesh=None,
    rules=DEFAULT_LOGICAL_AXIS_RULES,
    interrupt=None,
) -> RolloutResult:
    """Samples ``num_samples`` multi-turn responses per prompt with ``spec``, running tools.

    Args:
      spec: the fixed settings (``RolloutSpec.create(tokenizer, task, ...)``, built once).
      sampler: a ``mojax.sampling.Sampler`` (its weights set), or a ``QwenModel`` to sample with the
        in-graph sampler over ``mesh``.
      tokenizer: the tokenizer ``spec`` was built with (encode / decode).
      task: a ``mojax.tasks`` task (``parse_tool_call``, ``format_observation``).
      prompts_ids: P token lists (the chat-templated prompts, unpadded).
      key: PRNG key; the rollout is a deterministic function of it (and of the tool outputs).
      num_samples: G.
      tool: needed when calls can be answered (``ToolRunner``).
      pool: a ``ToolPool`` to run calls in (default: a private pool of ``min(8, B)`` threads).
      mesh, rules: sharding of the in-graph sampler when ``sampler`` is a model.
      interrupt: called before the first decode call and after each one (once its round's tools
        are done), the same number of times on every process (the rounds are agreed); it raises
        to abandon the rollout (``mojax.preemption.Preemption.check`` raises ``Interrupted``).

    Raises:
      ValueError naming the argument (``num_samples``, ``tool``, ``prompts_ids``, ...).
      Whatever ``interrupt`` raises (the rollout is abandoned; its tool calls are not waited for).
    """
    integer = isinstance(num_samples, int | np.integer) and not isinstance(num_samples, bool)
    if not integer or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    prompts, prompt_lengths = _pad_prompts(prompts_ids)
    g = int(num_samples)
    b = prompts.shape[0] * g
    name = getattr(task, "name", task)
    sampler = as_sampler(sampler, mesh, rules)
    rounds = protocol.rounds(sampler)
    if rounds:  # the static engine: rows where its devices hold them
        layout = distributed.row_layout(sampler.row_sharding, b)
    else:  # a session per process, over its own prompt groups (``protocol``)
        layout = distributed.group_layout(b, g)
    owned = layout.owner == distributed.process_index()
    runner = ToolRunner(spec, tool, pool, owned, name, gather=layout.shared)
    rows = [Row(call_budget=spec.first_budget(), local=bool(x)) for x in layout.local]
    counters: collections.Counter = collections.Counter(decode_calls=1)
    poll = interrupt or (lambda: None)
    try:
        poll()
        if rounds:
            out, view = _rounds(
                spec, sampler, rows, runner, tokenizer, task, (prompts, prompt_lengths, key, g),
                counters, poll, layout,
            )  # fmt: skip
        else:  # tool turns enter the running decode
            requests = _requests(spec, prompts, prompt_lengths, key, g)
            out, view = continuous_agent.drive(
                spec, sampler, rows, runner, tokenizer, task, requests, counters, poll
            )
    finally:
        runner.close()
    return _result(spec, rows, view, out, tokenizer, _counters(counters, layout), g, layout)


def _rounds(spec, sampler, rows, runner, tokenizer, task, call, counters, poll, layout):
    """The round-based rollout (module docstring) of the static engine (``protocol.rounds``);
    ``call``: ``(prompts, prompt_lengths, key, G)``. Returns the last decode call's output and
    its ``DecodeView``."""
    decode = dict(spec.sampling)
    first = _first_call(spec, *call, decode)
    cache_slots = first["max_total_len"]
    out = sampler.generate(**first)
    while True:
        view = DecodeView.of(out, layout)  # waits for the decode call
        plan = _step(spec, rows, view, runner, tokenizer, task, cache_slots, counters)
        poll()  # after every decode call and its tools: a signal abandons the rollout here
        if plan is None:
            return out, view
        out = _decode_next(sampler, out, plan, decode)
        counters["decode_calls"] += 1


def _first_call(spec, prompts, prompt_lengths, key, g, decode) -> dict:
    """The arguments of the prefill and first decode call (a whole turn, or its first segment)
    of every row (``InGraphSampler.generate``); the cache is sized by ``spec.cache_slots``."""
    prompt_bucket = protocol.bucket_length(int(prompt_lengths.max()), spec.min_prompt_bucket)
    return dict(
        prompt_tokens=prompts,
        key=key,
        max_new_tokens=spec.first_budget(),
        num_samples=g,
        stop_token_ids=spec.sampler_stop_ids,
        prompt_lengths=prompt_lengths,
        pad_id=spec.pad_id,
        max_response_len=spec.max_response_len,
        max_total_len=spec.cache_slots(prompt_bucket),
        cache_dtype=spec.cache_dtype,
        min_prompt_bucket=spec.min_prompt_bucket,
        **decode,
    )


def _requests(spec, prompts, prompt_lengths, key, g) -> protocol.Requests:
    """The rollout's rows for ``Sampler.open``: a whole first turn each (no rounds to pause
    for); the engine sizes its cache from ``spec.limits()``."""
    return protocol.Requests(
        prompt_tokens=prompts,
        prompt_lengths=prompt_lengths,
        key=key,
        num_samples=g,
        max_new_tokens=spec.max_new_tokens,
        stop_token_ids=spec.sampler_stop_ids,
        max_response_len=spec.max_response_len,
        limits=spec.limits(),
        pad_id=spec.pad_id,
        cache_dtype=spec.cache_dtype,
        min_prompt_bucket=spec.min_prompt_bucket,
    )


def _decode_next(sampler, out, plan: _AppendPlan, decode):
    """Appends ``plan``'s observations to its rows and decodes them further (same KV cache)."""
    return sampler.append_and_continue(
        out.state,
        plan.obs_tokens,
        plan.obs_lengths,
        plan.resume,
        max_new_tokens=plan.budget,
        min_obs_bucket=plan.min_bucket,
        **decode,
    )


def _step(spec, rows, view, runner, tokenizer, task, cache_slots, counters):
    """The host work after one decode call: settle the rows, start their calls, and plan the
    next decode call (a segment's resume, or the round's observations). None: the rollout is
    done."""
    tool_rows, paused = settle(spec, rows, view, tokenizer, counters)
    runner.submit(rows, parse_calls(spec, rows, tool_rows, task, counters))
    if distributed.global_max([len(paused)])[0]:  # any process's rows paused
        plan = _pause_plan(spec, rows, paused, view, cache_slots, counters)
        if plan is not None:
            return plan
    results = runner.results(rows)
    obs = observations(spec, rows, results, tokenizer, task, counters)
    return _round_plan(spec, rows, obs, view, cache_slots, counters)


# counters of the schedule (the same on every process); the others count rows' events
_SCHEDULE_COUNTERS = ("decode_calls", "segment_resumes", "cache_exhausted")


def _counters(counters: collections.Counter, layout) -> dict[str, int]:
    """The rollout's counters: the schedule's, and the rows' events summed over the processes that
    send rows (``RowLayout.gathers``; one all-gather with several processes)."""
    mine = {k: int(v) for k, v in counters.items()}
    if distributed.process_count() == 1:
        return mine
    out = {k: v for k, v in mine.items() if k in _SCHEDULE_COUNTERS}
    for sends, theirs in distributed.allgather_objects((layout.gathers, mine)):
        for k, v in theirs.items():
            if sends and k not in _SCHEDULE_COUNTERS:
                out[k] = out.get(k, 0) + v
    return out


def _result(spec, rows, view, out, tokenizer, counters, num_samples, layout) -> RolloutResult:
    """The whole rollout on every process: this process's rows, then every row (all-gathered)."""
    lengths = view.lengths.astype(np.int32)
    arrays = dict(
        tokens=view.tokens,
        logprobs=layout.read(out.logprobs).astype(np.float32),
        loss_mask=layout.read(out.loss_mask).astype(bool),
        lengths=lengths,
        n_calls=np.asarray([row.n_calls for row in rows], np.int32),
    )
    objects = dict(
        finish=[str(row.finish) for row in rows],
        texts=[
            decode_ids(tokenizer, view.tokens[i, : lengths[i]]) if row.local else ""
            for i, row in enumerate(rows)
        ],
        turns=[row.turns for row in rows],
    )
    arrays, objects = distributed.gather_rows(layout, arrays, objects)
    return RolloutResult(
        **arrays,
        finish_reason=objects["finish"],
        texts=objects["texts"],
        turns=objects["turns"],
        counters=counters,
        num_samples=num_samples,
        stop=spec.stop,
    )


def rollout(
    sampler,
    tokenizer,
    task,
    prompts_ids: Sequence[Sequence[int]],
    *,
    key: jax.Array,
    num_samples: int = 1,
    tool=None,
    pool: ToolPool | None = None,
    mesh=None,
    rules=DEFAULT_LOGICAL_AXIS_RULES,
    stop_spec: stops_lib.StopSpec | None = None,
    **settings,
) -> RolloutResult:
    """``run_rollout`` with a spec built for this call: ``RolloutSpec.create(tokenizer, task,
    **settings)`` (so the vocabulary is scanned for a multi-token tool stop on every call unless
    ``stop_spec`` is given). Build the spec once and call ``run_rollout`` in a loop.

    Args:
      settings: the keywords of ``RolloutSpec.create`` (``max_new_tokens``, ``max_turns``, ...).
      stop_spec: a precomputed ``StopSpec`` for the tool stop (skips the vocabulary scan).
      others: as ``run_rollout``.
    """
    spec = RolloutSpec.create(tokenizer, task, stop_spec=stop_spec, **settings)
    return run_rollout(
        spec,
        sampler,
        tokenizer,
        task,
        prompts_ids,
        key=key,
        num_samples=num_samples,
        tool=tool,
        pool=pool,
        mesh=mesh,
        rules=rules,
    )
