"""Multi-turn agentic rollouts: decode, stop at a tool call, run the tool, append, resume.

``run_rollout`` opens one session of the run's sampler (``mojax.sampling.protocol``: ``open``,
then ``step`` / ``requeue``) over the prompts' rows and drives it with the host work of a
tool-integrated agent (ToRL, arXiv:2503.23383; Search-R1, arXiv:2503.09516); the driver, one for
every engine, is ``mojax.rollout.continuous_agent``::

    decode until stop   the session's rows decode until eos or the task's tool stop (``</calc>``,
                        ``</code>``, ...)                              session.step, rows.settle
    parse and run tools rows that stopped on the tool stop: parse the call, run it on a
                        ToolPool                                 calls.parse_calls, ToolRunner
    append observations format and tokenize the observations and requeue those rows with them
                        (loss-masked) to decode further       calls.observations, session.requeue

until every row is finished (eos, length, turn / call limits, token budget). Rows proceed
independently: a finished row stays finished while the others keep calling tools. The static
engine takes a whole round of requeued rows at once (one append on its shared KV cache,
``mojax.sampling.static.session``); the continuous engine takes each row as soon as its
observation is ready, while the other rows decode on.

Observation tokens are in ``tokens`` with ``loss_mask`` 0 and ``logprobs`` 0, so the PPO loss never
trains on tool output; the policy tokens carry the sampler's fp32 policy log-probs (the
``old_logprobs`` of the rollout batch contract (``docs/architecture.md``)). ``n_calls`` is the
``N_call`` of the tool reward ``r_tool`` of ParetoPO (arXiv:2606.16111, Eq. 4).

Tool stops that are several tokens are detected with candidate ids and a host-side check (see
``mojax.rollout.stops``). By default the static engine's tools run while the device is idle (a
decode call runs until every row has stopped). With ``RolloutSpec.decode_segment`` it decodes in
segments and, with ``overlap_tools``, a row's call starts at the end of the segment it stopped in
while the other rows decode on; the observations are appended at the same point of the schedule,
so the tokens and log-probs do not depend on when the tools finish.

A rollout can be abandoned between two steps (``interrupt``, on a preemption signal).

Multi-process (``mojax.distributed``): each process does the host work of the rows its session
decodes (``Session.layout``): it reads only those rows after a step, runs their tools and requeues
them; the static engine's processes agree per round on whether any row resumes and on the widest
observation (one small collective each); the finished rollout is all-gathered once.

Shapes: B = P*G rows, prompt-major (row ``p * G + g``); response arrays are [B, max_response_len]
(response slots).
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
from mojax.rollout.calls import ToolRunner
from mojax.rollout.observations import decode_ids
from mojax.rollout.rows import Row, Turn
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


def as_sampler(sampler_or_model, mesh=None, rules=DEFAULT_LOGICAL_AXIS_RULES) -> Sampler:
    """A ``Sampler`` as is; an object with the static engine's calls (``generate``,
    ``append_and_continue``) as one whose sessions are rounds of them
    (``protocol.round_sampler``); a ``QwenModel`` as the static in-graph engine over ``mesh``."""
    if hasattr(sampler_or_model, "open"):
        return sampler_or_model
    if hasattr(sampler_or_model, "append_and_continue"):
        return protocol.round_sampler(sampler_or_model)
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
      sampler: a ``mojax.sampling.protocol.Sampler`` (its weights set), or a ``QwenModel`` to
        sample with the static in-graph engine over ``mesh`` (``as_sampler``).
      tokenizer: the tokenizer ``spec`` was built with (encode / decode).
      task: a ``mojax.tasks`` task (``parse_tool_call``, ``format_observation``).
      prompts_ids: P token lists (the chat-templated prompts, unpadded).
      key: PRNG key; the rollout is a deterministic function of it (and of the tool outputs).
      num_samples: G.
      tool: needed when calls can be answered (``ToolRunner``).
      pool: a ``ToolPool`` to run calls in (default: a private pool of ``min(8, B)`` threads).
      mesh, rules: sharding of the in-graph sampler when ``sampler`` is a model.
      interrupt: called before the first step and after each one (once its tools are done or
        started), the same number of times on every process (the static engine's rounds are
        agreed; a per-process engine's session: once, at its end); it raises to abandon the
        rollout (``mojax.infra.preemption.Preemption.check`` raises ``Interrupted``).

    Raises:
      ValueError naming the argument (``num_samples``, ``tool``, ``prompts_ids``, ...).
      Whatever ``interrupt`` raises (the rollout is abandoned; its tool calls are not waited for).
    """
    integer = isinstance(num_samples, int | np.integer) and not isinstance(num_samples, bool)
    if not integer or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    prompts, prompt_lengths = _pad_prompts(prompts_ids)
    g = int(num_samples)
    name = getattr(task, "name", task)
    session = as_sampler(sampler, mesh, rules).open(
        _requests(spec, prompts, prompt_lengths, key, g), dict(spec.sampling)
    )
    layout = session.layout  # the rows this process decodes and runs the tools of
    owned = layout.owner == distributed.process_index()
    runner = ToolRunner(spec, tool, pool, owned, name, gather=layout.shared)
    rows = [Row(local=bool(x)) for x in layout.local]
    counters: collections.Counter = collections.Counter()
    poll = interrupt or (lambda: None)
    try:
        poll()
        out, view = continuous_agent.drive(
            spec, session, rows, runner, tokenizer, task, counters, poll
        )
    finally:
        runner.close()
    return _result(spec, rows, view, out, tokenizer, _counters(counters, layout), g, layout)


def _requests(spec, prompts, prompt_lengths, key, g) -> protocol.Requests:
    """The rollout's rows for ``Sampler.open``: a whole first turn each (an engine that decodes
    in segments pauses and resumes its rows itself); the engine sizes its cache from
    ``spec.limits()``."""
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
