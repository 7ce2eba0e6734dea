"""Multi-turn agentic rollouts: decode, stop at a tool call, run the tool, append, resume.

The driver runs the sampler's resumable decode (``mojax.sampling.generate`` then
``append_and_continue`` on the same KV cache) and, between decode calls, does the host work of a
tool-integrated agent (ToRL / Search-R1 style)::

    decode every live row until eos or the task's tool stop (``</calc>``, ``</code>``, ...)
    on the host: rows that stopped on the tool stop -> parse the call (``task.parse_tool_call``)
                 run the calls in parallel (``ToolPool``), format (``task.format_observation``)
                 and tokenize the observations
    append the observations (loss-masked) to those rows only and decode them further
    until every row is finished (eos, length, turn / call limits, token budget)

Rows proceed independently: a finished row stays finished while the others keep calling tools.
Observation tokens are in ``tokens`` with ``loss_mask`` 0 and ``logprobs`` 0, so the PPO loss never
trains on tool output; the policy tokens carry the sampler's fp32 policy log-probs (the
``old_logprobs`` of design.md "Rollout batch"). ``n_calls`` is the ``N_call`` of ParetoPO's
``r_tool`` (seed 000, Eq. 4).

Tool stops that are several tokens are detected with candidate ids and a host-side check (see
``mojax.rollout.stops`` for the rule and its cost). Tools run while the device is idle (decode
and tool execution alternate); tools of one call run in parallel on the host.

Shape legend: P prompts, G samples per prompt, B = P*G rows (prompt-major, row ``p * G + g``),
R response slots, S cache slots, To observation bucket.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from mojax.models.qwen import DEFAULT_LOGICAL_AXIS_RULES
from mojax.rollout import stops as stops_lib
from mojax.rollout.tools.pool import ToolPool
from mojax.rollout.tools.result import ToolResult
from mojax.sampling import api as sampling
from mojax.sampling import buckets
from mojax.sampling.state import LENGTH, STOP

#: Per-row ``finish_reason`` values: ``stop`` (an eos / end-of-turn id), ``length`` (a turn used
#: its ``max_new_tokens`` or the response its ``max_response_len``), ``max_turns`` / ``max_tool_calls``
#: (the row asked for a tool call past the limit; the call is not run), ``budget`` (no room left in
#: the response buffer or the KV cache for the observation and further decoding).
FINISH_REASONS = ("stop", "length", "max_turns", "max_tool_calls", "budget")

TRUNCATION_MARK = " ...[truncated]"


@dataclasses.dataclass(frozen=True)
class Turn:
    """One model turn of one row and the tool call that ended it (if any).

    Attributes:
      index: 0-based turn of the row.
      start, end: response slots ``[start, end)`` of the policy tokens of the turn.
      ended_by: ``"tool"`` (a confirmed tool stop), ``"stop"``, ``"length"``, ``"budget"``.
      call: the parsed tool input (None when there was no call or it was malformed).
      malformed: the turn stopped on the tool stop but ``parse_tool_call`` found no call.
      executed: the tool ran (or the malformed-call error was shown) and the observation was
        appended.
      observation: the observation appended after the turn, decoded from its tokens (what the
        model saw; "" if none).
      tool_output: the tool's full text (``ToolResult.observation``) before formatting and
        truncation.
      obs_tokens: its number of tokens.
      obs_truncated: the observation was cut to ``max_obs_tokens``.
      exit_reason, error, timed_out, output_truncated, duration_s: from the ``ToolResult``.
      false_stops: candidate stops in this turn that the host rejected (multi-token stops only).
    """

    index: int
    start: int
    end: int
    ended_by: str
    call: str | None = None
    malformed: bool = False
    executed: bool = False
    observation: str = ""
    tool_output: str = ""
    obs_tokens: int = 0
    obs_truncated: bool = False
    exit_reason: str | None = None
    error: str | None = None
    timed_out: bool = False
    output_truncated: bool = False
    duration_s: float = 0.0
    false_stops: int = 0


@dataclasses.dataclass
class RolloutResult:
    """Everything a multi-turn rollout returns (host numpy arrays; rows prompt-major).

    Attributes:
      tokens: int32 [B, R] response tokens (policy and observation tokens), ``pad_id`` after
        ``lengths``.
      logprobs: fp32 [B, R] policy log-probs of the sampled tokens (0 on observations, padding).
      loss_mask: bool [B, R] True only on policy-generated tokens.
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

    def finish_codes(self) -> np.ndarray:
        """int32 [B] indices into ``FINISH_REASONS``."""
        return np.asarray([FINISH_REASONS.index(r) for r in self.finish_reason], np.int32)

    def metrics(self, prefix: str = "rollout") -> dict[str, float]:
        """Scalars for the metrics writer: mean calls / length, finish-reason fractions, counts."""
        b = max(len(self.finish_reason), 1)
        out = {
            f"{prefix}/n_calls/mean": float(np.mean(self.n_calls)) if self.n_calls.size else 0.0,
            f"{prefix}/length/mean": float(np.mean(self.lengths)) if self.lengths.size else 0.0,
        }
        counts = collections.Counter(self.finish_reason)
        out.update({f"{prefix}/finish/{r}": counts[r] / b for r in FINISH_REASONS})
        out.update({f"{prefix}/{k}": float(v) for k, v in sorted(self.counters.items())})
        return out


def _tool_fn(tool) -> Callable[[str], ToolResult] | None:
    if tool is None:
        return None
    run = getattr(tool, "run", None)
    if callable(run):
        return run
    if callable(tool):
        return tool
    raise ValueError(f"tool must be callable (text -> ToolResult) or have .run, got {tool!r}")


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


def encode_observation(tokenizer, task, text: str, max_tokens: int) -> tuple[list[int], bool]:
    """Token ids of ``task.format_observation(text)``, at most ``max_tokens`` (and if it was cut).

    A long result is shortened inside the observation's own markup (``<output>…</output>`` stays
    well-formed): its head and tail are kept around ``TRUNCATION_MARK`` (a traceback's last line
    says what went wrong), as many characters as fit, found by bisection (O(log len) encodes). A
    hard token cut is the last resort (markup longer than ``max_tokens``).
    """

    def encode(body: str) -> list[int]:
        return list(tokenizer.encode(task.format_observation(body)))

    def shortened(k: int) -> str:  # k characters of text: ceil(k/2) from the head, the rest tail
        head, tail = (k + 1) // 2, k // 2
        return text[:head] + TRUNCATION_MARK + (text[len(text) - tail :] if tail else "")

    ids = encode(text)
    if len(ids) <= max_tokens:
        return ids, False
    lo, hi = 0, len(text)  # shortened(lo) fits (or lo == 0); shortened(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(encode(shortened(mid))) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return encode(shortened(lo))[:max_tokens], True


def decode_ids(tokenizer, ids) -> str:
    """``tokenizer.decode`` that skips ids the tokenizer does not have (a model's padded vocab
    rows, e.g. Qwen's 151936 logits over 151665 tokens, can be sampled by an untrained model)."""
    n = int(tokenizer.vocab_size)
    return tokenizer.decode([int(i) for i in ids if 0 <= int(i) < n])


def malformed_message(stop_text: str) -> str:
    """The observation a malformed call gets (the model learns why nothing ran)."""
    return f"Error: malformed tool call before {stop_text}"


def rollout(
    model,
    tokenizer,
    task,
    prompts_ids: Sequence[Sequence[int]],
    *,
    key: jax.Array,
    num_samples: int = 1,
    max_new_tokens: int,
    max_response_len: int | None = None,
    max_turns: int = 4,
    max_tool_calls: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    tool: Any = None,
    pool: ToolPool | None = None,
    stop_token_ids: Sequence[int] | None = None,
    mesh=None,
    rules=DEFAULT_LOGICAL_AXIS_RULES,
    max_obs_tokens: int = 256,
    max_total_len: int | None = None,
    tool_stop: str | None = None,
    stop_mode: str = "auto",
    stop_spec: stops_lib.StopSpec | None = None,
    count_malformed: bool = True,
    stateful: bool = False,
    tool_timeout_s: float | None = 60.0,
    pad_id: int | None = None,
    min_prompt_bucket: int = 16,
    min_obs_bucket: int = 8,
    false_stop_bucket: int = 1,
    cache_dtype=None,
) -> RolloutResult:
    """Samples ``num_samples`` multi-turn responses per prompt, running tools between turns.

    Args:
      model: a ``QwenModel`` (anything the sampler accepts).
      tokenizer: the ``mojax.models.tokenizer`` interface (encode / decode / eos_token_id).
      task: a ``mojax.tasks`` task with ``tool_stop``, ``parse_tool_call`` and
        ``format_observation`` (``tool_stop=None`` gives single-turn sampling; with
        ``max_turns=1`` or ``max_tool_calls=0`` the tool stop still ends a row).
      prompts_ids: P token lists (the chat-templated prompts, unpadded).
      key: PRNG key; the rollout is a deterministic function of it (and of the tool outputs).
      num_samples: G.
      max_new_tokens: budget of each model turn.
      max_response_len: R (default ``max_turns * max_new_tokens + (max_turns - 1) *
        max_obs_tokens``): policy and observation tokens of a row.
      max_turns: model turns per row (so at most ``max_turns - 1`` tool calls are answered).
      max_tool_calls: answered calls per row (default ``max_turns - 1``).
      temperature, top_p, top_k: sampling (``temperature=0`` is greedy); logprobs are always the
        policy log-probs at temperature 1 (the PPO ``old_logprobs``).
      tool: (needed when calls can be answered) ``text -> ToolResult`` callable or an object with ``.run`` (Calculator, PythonSandbox,
        BM25Retriever, RetrievalClient); with ``stateful=True`` an object with ``.session()``
        (one ``PythonSession`` per row, later cells see earlier ones, as ToRL).
      pool: a ``ToolPool`` to run calls in (default: a private pool of ``min(8, B)`` threads).
      stop_token_ids: end-of-response ids (default ``(tokenizer.eos_token_id,)``; add e.g.
        ``<|im_end|>`` for chat models).
      mesh, rules: sharding of the sampler (see ``mojax.sampling.generate``).
      max_obs_tokens: observation tokens per call; longer observations are truncated (counted).
      max_total_len: S cache slots (default: enough for ``max_turns`` full turns and
        observations, plus ``max_new_tokens`` of slack for multi-token stop fallbacks).
      tool_stop: overrides ``task.tool_stop``.
      stop_mode: ``"auto"`` / ``"token"`` / ``"text"`` (``mojax.rollout.stops.tool_stop_spec``).
      stop_spec: a precomputed ``StopSpec`` (skips scanning the vocabulary each call).
      count_malformed: count malformed calls (shown an error observation) in ``n_calls``.
      tool_timeout_s: the pool's per-call deadline (a backstop; tools have their own limits).
      pad_id: written after each row's end (default the tokenizer's pad id, else 0).
      min_prompt_bucket, cache_dtype: as in ``mojax.sampling.generate``.
      min_obs_bucket: observation appends are padded to ``max(min_obs_bucket, next_pow2(len))``
        cache slots; each distinct bucket compiles the continue program once, so
        ``min_obs_bucket = max_obs_tokens`` gives a single program at the cost of cache slots.
      false_stop_bucket: the bucket of an append where every resumed row is a rejected
        candidate (no observation): 1 slot is cheapest, ``min_obs_bucket`` avoids a compile.

    Returns:
      ``RolloutResult``.

    Raises:
      ValueError naming the argument for bad settings (budgets < 1, no eos id, a task with a
      tool stop but no ``tool``, prompt ids outside the model's vocabulary, ...).
    """
    for name, value in (
        ("num_samples", num_samples),
        ("max_new_tokens", max_new_tokens),
        ("max_turns", max_turns),
        ("max_obs_tokens", max_obs_tokens),
    ):
        if not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    max_tool_calls = max_turns - 1 if max_tool_calls is None else int(max_tool_calls)
    if max_tool_calls < 0:
        raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
    if stop_token_ids is None:
        if tokenizer.eos_token_id is None:
            raise ValueError("stop_token_ids: the tokenizer has no eos_token_id; pass the ids")
        stop_token_ids = (int(tokenizer.eos_token_id),)
    eos = {int(i) for i in stop_token_ids}
    stop_text = task.tool_stop if tool_stop is None else tool_stop
    # with max_turns == 1 (or max_tool_calls == 0) the tool stop still ends a row ("max_turns" /
    # "max_tool_calls"): the model never writes past a call it cannot get an answer to
    multi_turn = stop_text is not None and max_turns > 1 and max_tool_calls > 0
    spec = None
    if stop_text is not None:
        spec = stop_spec or stops_lib.tool_stop_spec(
            tokenizer, stop_text, mode=stop_mode, exclude=tuple(eos)
        )
    run_fn = _tool_fn(tool)
    if multi_turn and run_fn is None:
        raise ValueError(f"tool: task {getattr(task, 'name', task)!r} stops at {stop_text!r}")
    if stateful and not callable(getattr(tool, "session", None)):
        raise ValueError("stateful=True needs a tool with .session() (e.g. PythonSandbox)")

    prompts, prompt_lengths = _pad_prompts(prompts_ids)
    p, g = prompts.shape[0], int(num_samples)
    b = p * g
    tb = buckets.bucket_length(int(prompt_lengths.max()), min_prompt_bucket)
    obs_bucket = buckets.bucket_length(max_obs_tokens, min_obs_bucket)
    r = int(max_response_len or max_turns * max_new_tokens + (max_turns - 1) * max_obs_tokens)
    if r < 1:
        raise ValueError(f"max_response_len must be >= 1, got {max_response_len}")
    slack = 0 if spec is None or spec.exact else max_new_tokens
    s = int(max_total_len or tb + max_turns * max_new_tokens + (max_turns - 1) * obs_bucket + slack)
    if pad_id is None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tool_ids = set(spec.token_ids) if spec is not None else set()
    sample_kw = dict(temperature=temperature, top_p=top_p, top_k=top_k)

    out = sampling.generate(
        model,
        prompts,
        key=key,
        max_new_tokens=max_new_tokens,
        num_samples=g,
        stop_token_ids=[int(i) for i in stops_lib.stop_ids_array(spec, sorted(eos))],
        prompt_lengths=prompt_lengths,
        pad_id=int(pad_id),
        max_response_len=r,
        max_total_len=s,
        cache_dtype=cache_dtype,
        min_prompt_bucket=min_prompt_bucket,
        mesh=mesh,
        rules=rules,
        **sample_kw,
    )

    counters: collections.Counter = collections.Counter(decode_calls=1)
    final: list[str | None] = [None] * b
    turns: list[list[Turn]] = [[] for _ in range(b)]
    n_calls = np.zeros((b,), np.int32)
    turn_start = np.zeros((b,), np.int64)  # response slot where the current turn began
    turn_used = np.zeros((b,), np.int64)  # policy tokens of the current turn so far
    call_start = np.zeros((b,), np.int64)  # response length when the last decode call began
    false_stops = np.zeros((b,), np.int64)  # rejected candidates in the current turn
    sessions = [tool.session() for _ in range(b)] if stateful else None
    own_pool = pool is None and multi_turn
    if own_pool:
        pool = ToolPool(max_workers=min(8, b), timeout_s=tool_timeout_s)

    def close_turn(row: int, end: int, ended_by: str, **fields) -> None:
        turns[row].append(
            Turn(
                index=len(turns[row]),
                start=int(turn_start[row]),
                end=int(end),
                ended_by=ended_by,
                false_stops=int(false_stops[row]),
                **fields,
            )
        )

    try:
        while True:
            toks = np.asarray(out.tokens)
            lens = np.asarray(out.lengths).astype(np.int64)
            reasons = np.asarray(out.finish_reason)
            tool_rows, false_rows, texts = [], [], {}
            for row in range(b):
                if final[row] is not None:
                    continue
                n = int(lens[row])
                turn_used[row] += n - call_start[row]
                last = int(toks[row, n - 1]) if n else -1
                if reasons[row] == STOP and last in tool_ids and last not in eos:
                    text = decode_ids(tokenizer, toks[row, turn_start[row] : n])
                    if spec.confirm(text):
                        tool_rows.append(row)
                        texts[row] = text
                        continue
                    counters["false_stops"] += 1
                    false_stops[row] += 1
                    if turn_used[row] < max_new_tokens and n + 1 <= r:
                        false_rows.append(row)
                        continue
                    final[row] = "length"  # the turn's tokens or the response buffer are used up
                elif reasons[row] == STOP:
                    final[row] = "stop"
                elif reasons[row] == LENGTH:
                    full = n >= r or turn_used[row] >= max_new_tokens
                    final[row] = "length" if full else "budget"  # else the cache ran out
                else:  # not reachable: the sampler returns with every row done
                    final[row] = "budget"
                close_turn(row, n, final[row])

            # tool calls past the limits are not run; the others are parsed and run in parallel
            calls: list[tuple[int, str | None]] = []
            for row in tool_rows:
                n = int(lens[row])
                if len(turns[row]) + 1 >= max_turns:
                    final[row] = "max_turns"
                elif n_calls[row] >= max_tool_calls:
                    final[row] = "max_tool_calls"
                else:
                    try:
                        call = task.parse_tool_call(texts[row])
                    except Exception:  # noqa: BLE001 - a parser bug must not end the rollout
                        counters["parse_exceptions"] += 1
                        call = None
                    calls.append((row, call))
                    continue
                close_turn(row, n, final[row])
            fns = [
                (sessions[row].run if sessions else run_fn, (call,))
                for row, call in calls
                if call is not None
            ]
            results = iter(pool.run(fns) if fns else [])

            obs = {}
            for row, call in calls:
                n = int(lens[row])
                if call is None:
                    counters["malformed"] += 1
                    message = malformed_message(spec.text)  # shown as is (no error line)
                    result = ToolResult(output=message, error=message, exit_reason="error")
                    exit_reason = "malformed"
                else:
                    result = next(results)
                    exit_reason = result.exit_reason
                    counters["tool_calls_run"] += 1
                    counters[f"exit/{exit_reason}"] += 1
                    counters["tool_errors"] += result.error is not None
                    counters["timeouts"] += bool(result.timed_out)
                    counters["output_truncated"] += bool(result.truncated)
                ids, cut = encode_observation(tokenizer, task, result.observation, max_obs_tokens)
                counters["obs_truncated"] += cut
                fields = dict(
                    call=call,
                    malformed=call is None,
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
                if n + len(ids) + 1 > r:  # no room for the observation and one more token
                    final[row] = "budget"
                    close_turn(row, n, "budget", executed=False, **fields)
                    continue
                obs[row] = (ids, fields)

            resume_rows = sorted(list(obs) + false_rows)
            if not resume_rows:
                break
            width = max([len(obs[row][0]) for row in obs] + [0])
            min_bucket = min_obs_bucket if width else false_stop_bucket
            to = buckets.bucket_length(width, min_bucket)
            end = int(np.asarray(out.state.cache.end)[0])
            if end + to + 1 > s:  # the cache cannot take another append: these rows end here
                for row in resume_rows:
                    final[row] = "budget"
                    extra = obs[row][1] if row in obs else {}
                    close_turn(row, int(lens[row]), "budget", **extra)
                counters["cache_exhausted"] += 1
                break

            obs_tokens = np.zeros((b, max(width, 1)), np.int32)
            obs_lengths = np.zeros((b,), np.int32)
            resume = np.zeros((b,), bool)
            budget = np.full((b,), max_new_tokens, np.int32)
            for row in resume_rows:
                resume[row] = True
                n = int(lens[row])
                if row in obs:
                    ids, fields = obs[row]
                    obs_tokens[row, : len(ids)] = ids
                    obs_lengths[row] = len(ids)
                    close_turn(row, n, "tool", executed=True, **fields)
                    n_calls[row] += bool(fields["call"] is not None or count_malformed)
                    counters["tool_calls"] += 1
                    turn_start[row] = n + len(ids)
                    turn_used[row] = 0
                    false_stops[row] = 0
                else:  # a rejected candidate: continue the same turn with what is left of it
                    budget[row] = max_new_tokens - turn_used[row]
                call_start[row] = n + obs_lengths[row]
            out = sampling.append_and_continue(
                model,
                out.state,
                obs_tokens,
                obs_lengths,
                resume,
                max_new_tokens=budget,
                min_obs_bucket=min_bucket,
                mesh=mesh,
                rules=rules,
                **sample_kw,
            )
            counters["decode_calls"] += 1
    finally:
        if own_pool:
            pool.close()

    tokens = np.asarray(out.tokens)
    lengths = np.asarray(out.lengths).astype(np.int32)
    return RolloutResult(
        tokens=tokens,
        logprobs=np.asarray(out.logprobs, np.float32),
        loss_mask=np.asarray(out.loss_mask, bool),
        lengths=lengths,
        n_calls=n_calls,
        finish_reason=[str(f) for f in final],
        texts=[decode_ids(tokenizer, tokens[i, : lengths[i]]) for i in range(b)],
        turns=turns,
        counters={k: int(v) for k, v in counters.items()},
        num_samples=g,
        stop=spec,
    )
