"""``RolloutConfig`` (the run config's ``rollout`` section) and ``RolloutSpec``: the fixed settings of
a multi-turn rollout, built and checked once.

Everything a rollout needs that does not change from one batch to the next -- token budgets,
turn and call limits, observation limits, the sampling parameters, and the tokenizer-derived stop
ids (the end-of-response ids and the tool stop's ``StopSpec``, whose vocabulary scan is the
expensive part) -- lives in one frozen dataclass. Build it once with ``RolloutSpec.create``
(it needs the tokenizer and the task) and pass it to every ``mojax.rollout.run_rollout`` call;
``spec.replace(temperature=0.0)`` gives a greedy copy without rescanning the vocabulary.

``__post_init__`` checks every setting; an error names the field and, where there is one, its
``config.`` key (``config.rollout.max_new_tokens``, ...).

Shape words used by the rollout modules: B = P*G rows (legend of ``mojax``); a row's response
buffer has ``max_response_len`` *response slots* (policy and observation tokens); the KV cache has
``max_total_len`` *cache slots* (prompt bucket, one slot per decode step, the appended buckets).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any, ClassVar

from mojax.config import field_key, option, option_fields, spec_checker
from mojax.rollout import stops as stops_lib
from mojax.sampling import protocol
from mojax.sampling.protocol import DRAWS, LENGTH, STOP
from mojax.sampling.protocol import FINISH_REASONS as SAMPLER_FINISH_REASONS

#: Per-row ``finish_reason`` of a rollout. The first two are the sampler's own (its
#: ``FINISH_REASONS`` minus ``running``): ``stop`` (an eos / end-of-turn id), ``length`` (a turn
#: used its ``max_new_tokens`` or the response its ``max_response_len``). The rollout adds
#: ``max_turns`` / ``max_tool_calls`` (the row asked for a tool call past the limit; the call is not
#: run) and ``budget`` (no room left in the response buffer or the KV cache for the observation and
#: further decoding).
FINISH_REASONS = (
    SAMPLER_FINISH_REASONS[STOP],
    SAMPLER_FINISH_REASONS[LENGTH],
    "max_turns",
    "max_tool_calls",
    "budget",
)

#: The longest ``tool_timeout_s`` a rollout accepts: one hour. A call's deadline holds its whole
#: RL step (the rollout waits for its slowest call), and it sizes what the tool sets from it: the
#: Python sandbox's RLIMIT_CPU is ``ceil(timeout_s) + 1`` CPU-seconds (``math.ceil(inf)`` raises
#: OverflowError) and the pool's waits must stay below ``threading.TIMEOUT_MAX`` (~9.2e9 s). A
#: call that needs longer than an hour is a hung call for RL, not a tool call.
MAX_TOOL_TIMEOUT_S = 3600.0

SANDBOX_MODES = (
    "bwrap",
    "auto",
    "unsafe_fallback",
    "fallback",
)  # mojax.rollout.tools.PythonSandbox


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """``config.rollout``: how one step's episodes are collected (the run spec's section; the
    driver's fixed settings, :class:`RolloutSpec`, are built from it once per run).

    ``P = prompts_per_step`` groups of ``G = num_samples`` rollouts; each turn decodes at most
    ``max_new_tokens``; all turns and tool observations together fit ``max_response_len``.
    """

    SECTION: ClassVar[str] = "rollout"
    prompts_per_step: int = option(16, help="P: prompt groups per RL step")
    num_samples: int = option(8, help="G: samples per prompt")
    max_prompt_len: int = option(0, help="0 = measured from the data (dry runs assume 1024)")
    max_new_tokens: int = option(24, help="new tokens per turn")
    max_response_len: int = option(48, help="R: all turns and observations together")
    max_turns: int = option(3, help="decode turns (tool calls + 1)")
    max_tool_calls: int = option(2, help="tool calls per response")
    temperature: float = option(1.0, help="sampling temperature (0 = greedy)")
    top_p: float = option(1.0, help="nucleus sampling mass (1 = off)")
    top_k: int = option(0, help="top-k sampling (0 = off)")
    draw: str = option(
        "gumbel", help='"gumbel" | "inverse_cdf": how a token is drawn (same distribution)'
    )
    tool_timeout_s: float = option(
        10.0,
        help="deadline of one tool call, seconds in (0, 3600] (mojax.rollout.spec.MAX_TOOL_TIMEOUT_S)",
    )
    tool_workers: int = option(4, help="threads running tool calls")
    sandbox: str = option(
        "bwrap", help='math\'s Python tool: "bwrap" (fails closed) | "unsafe_fallback"'
    )
    retrieval_url: str = option("", help='Search-R1 retrieval server (qa); "" = BM25 over the data')
    decode_segment: int = option(
        0, help="decode in calls of at most N tokens (0 = a turn per call); bounds signal latency"
    )
    staleness: int = option(
        0,
        help="k: generation for step t + k runs during step t's update, with weights k updates "
        "old at most (0 = synchronous; mojax.rl.async_loop)",
    )

    def __post_init__(self):
        c = spec_checker("rollout", self)
        for key in ("prompts_per_step", "num_samples", "max_new_tokens", "max_response_len"):
            c.in_range(f"rollout.{key}", 1)
        for key in ("max_turns", "tool_workers"):
            c.in_range(f"rollout.{key}", 1)
        c.in_range("rollout.max_tool_calls", 0)
        c.in_range("rollout.max_prompt_len", 0)
        c.in_range("rollout.staleness", 0)
        c.in_range("rollout.temperature", 0.0)
        c.in_range("rollout.top_p", 0.0, 1.0, low_inclusive=False)
        c.in_range("rollout.top_k", 0)
        c.choice("rollout.draw", DRAWS)
        t = c.typed("rollout.tool_timeout_s", (int, float))
        if (
            isinstance(t, int | float)
            and not isinstance(t, bool)
            and not 0 < t <= MAX_TOOL_TIMEOUT_S
        ):
            c.fail(
                "rollout.tool_timeout_s",
                f"{t!r} is not allowed; allowed values: a finite number of seconds in "
                f"(0, {MAX_TOOL_TIMEOUT_S:g}] (one call's deadline holds its whole step; the sandbox's "
                "CPU rlimit is ceil(timeout) + 1 s; mojax.rollout.spec.MAX_TOOL_TIMEOUT_S)",
            )
        c.choice("rollout.sandbox", SANDBOX_MODES)
        c.require(
            self.max_response_len >= self.max_new_tokens,
            "rollout.max_response_len",
            "must be >= rollout.max_new_tokens (it holds every turn and observation)",
        )
        c.in_range("rollout.decode_segment", 0)
        c.raise_if_any()


# the driver's fields read from another section than ``config.rollout`` (named in errors)
_OTHER_KEYS = {"cache_dtype": "config.model.cache_dtype"}


def _config_key(field: str) -> str | None:
    """The config key of a :class:`RolloutSpec` field: ``config.rollout.<field>`` when
    :class:`RolloutConfig` reads it, else ``_OTHER_KEYS``'s (None: set by the run, not the config)."""
    if field in {f.name for f in option_fields(RolloutConfig)}:
        return f"config.{field_key(RolloutConfig, RolloutConfig.__dataclass_fields__[field])}"
    return _OTHER_KEYS.get(field)


def _name(field: str) -> str:
    key = _config_key(field)
    return f"RolloutSpec.{field}" + (f" ({key})" if key else "")


def _check_int(field: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{_name(field)} must be an int >= {low}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """Fixed settings of a multi-turn rollout (see the module docstring).

    Attributes:
      max_new_tokens: policy tokens of one model turn.
      max_response_len: response slots of a row (all turns and observations together).
      max_turns: model turns per row (so at most ``max_turns - 1`` answered calls).
      max_tool_calls: answered calls per row.
      max_obs_tokens: tokens of one observation; longer ones are shortened (counted).
      max_total_len: cache slots; ``None``: the engine sizes its cache per call from the prompt
        bucket and ``limits`` (``protocol.cache_slots``).
      temperature, top_p, top_k: sampling (``temperature=0`` is greedy); the recorded log-probs
        are always the policy log-probs at temperature 1.
      draw: "gumbel" / "inverse_cdf", how each token is drawn (``mojax.sampling.processors``).
      eos_ids: end-of-response ids (an eos / ``<|im_end|>``): a stop on one ends the row.
      stop: the ``StopSpec`` of the task's tool stop (None: single-turn sampling).
      pad_id: written after each row's end.
      count_malformed: malformed calls (shown an error observation) count in ``n_calls``.
      stateful: one ``tool.session()`` per row (later cells see earlier ones, as ToRL).
      tool_timeout_s: deadline of a call in the rollout's own pool (a backstop): finite, in
        ``(0, MAX_TOOL_TIMEOUT_S]``, or None.
      min_prompt_bucket: prompts are padded to ``max(min_prompt_bucket, next_pow2(len))``.
      min_obs_bucket: observation appends are padded to ``max(min_obs_bucket, next_pow2(len))``
        cache slots (each distinct bucket compiles the continue program once).
      false_stop_bucket: cache slots of an append with no observation (every resumed row is a
        rejected stop candidate, or paused at a decode segment's end).
      cache_dtype: k/v storage dtype (e.g. ``"bfloat16"``; None: the model's compute dtype).
      decode_segment: 0 = a decode call runs until every row has stopped; ``n > 0`` = decode in
        segments of at most ``n`` tokens per row, so the host sees tool stops while other rows
        are still decoding (see ``overlap_tools``). A row paused at a segment's end resumes at
        once at the same decode step (the same random draw as unsegmented), but each resume
        writes ``false_stop_bucket`` empty cache slots: the log-probs can differ from the
        unsegmented rollout's in float rounding (attention sums over another slot layout), and
        so could a token where that flips a near tie; ``limits`` adds room for the slots. (The
        static engine's segments, ``mojax.sampling.static.session``.)
      overlap_tools: with ``decode_segment > 0``, start a row's tool call at the end of the segment
        it stopped in, while the other rows decode on (False: run the round's calls once every row
        has stopped, the serial schedule). The observations are appended at the same point either
        way, so both give the same tokens and log-probs.
    """

    max_new_tokens: int
    max_response_len: int
    max_turns: int = 4
    max_tool_calls: int = 3
    max_obs_tokens: int = 256
    max_total_len: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    draw: str = "gumbel"
    eos_ids: tuple[int, ...] = ()
    stop: stops_lib.StopSpec | None = None
    pad_id: int = 0
    count_malformed: bool = True
    stateful: bool = False
    tool_timeout_s: float | None = 60.0
    min_prompt_bucket: int = 16
    min_obs_bucket: int = 8
    false_stop_bucket: int = 1
    cache_dtype: Any = None
    decode_segment: int = 0
    overlap_tools: bool = True

    def __post_init__(self):
        for field in ("max_new_tokens", "max_response_len", "max_turns", "max_obs_tokens"):
            _check_int(field, getattr(self, field), 1)
        for field in ("min_prompt_bucket", "min_obs_bucket", "false_stop_bucket"):
            _check_int(field, getattr(self, field), 1)
        _check_int("max_tool_calls", self.max_tool_calls, 0)
        _check_int("decode_segment", self.decode_segment, 0)
        if self.max_total_len is not None:
            _check_int("max_total_len", self.max_total_len, 1)
        if not self.eos_ids or not all(isinstance(i, numbers.Integral) for i in self.eos_ids):
            raise ValueError(f"{_name('eos_ids')} must be a non-empty tuple of ids: {self.eos_ids}")
        t = self.tool_timeout_s
        if t is not None and not (isinstance(t, numbers.Real) and 0 < t <= MAX_TOOL_TIMEOUT_S):
            raise ValueError(
                f"{_name('tool_timeout_s')} must be a finite number of seconds in "
                f"(0, {MAX_TOOL_TIMEOUT_S:g}] (MAX_TOOL_TIMEOUT_S) or None, got {t!r}"
            )
        try:  # the sampler's own rule, checked here once instead of at the first decode
            protocol.check_sampling(self.temperature, self.top_k, self.top_p, self.draw)
        except ValueError as e:
            keys = "config.rollout.temperature / top_p / top_k / draw"
            raise ValueError(f"RolloutSpec sampling settings ({keys}): {e}") from None

    @classmethod
    def create(
        cls,
        tokenizer,
        task,
        *,
        max_new_tokens: int,
        max_response_len: int | None = None,
        max_turns: int = 4,
        max_tool_calls: int | None = None,
        max_obs_tokens: int = 256,
        stop_token_ids: Sequence[int] | None = None,
        tool_stop: str | None = None,
        stop_mode: str = "auto",
        stop_spec: stops_lib.StopSpec | None = None,
        pad_id: int | None = None,
        **settings,
    ) -> RolloutSpec:
        """The spec for ``tokenizer`` and ``task``: resolves the defaults, scans for the stop ids.

        Args:
          tokenizer: the ``mojax.models.tokenizer`` interface (ids, ``eos_token_id``, pad id).
          task: a task with ``tool_stop`` (None: single-turn; with ``max_turns=1`` or
            ``max_tool_calls=0`` the tool stop still ends a row).
          max_response_len: default (also for 0) ``max_turns * max_new_tokens + (max_turns - 1) *
            max_obs_tokens``.
          max_tool_calls: default ``max_turns - 1``.
          stop_token_ids: end-of-response ids (default ``(tokenizer.eos_token_id,)``).
          tool_stop: overrides ``task.tool_stop``.
          stop_mode: ``"auto"`` / ``"token"`` / ``"text"`` (``stops.tool_stop_spec``).
          stop_spec: a precomputed ``StopSpec`` of the tool stop (skips the vocabulary scan).
          pad_id: default the tokenizer's pad id, else 0.
          **settings: the other fields of ``RolloutSpec``.
        """
        for field, value in (("max_new_tokens", max_new_tokens), ("max_turns", max_turns)):
            _check_int(field, value, 1)  # before they size the defaults below
        _check_int("max_obs_tokens", max_obs_tokens, 1)
        if stop_token_ids is None:
            if tokenizer.eos_token_id is None:
                raise ValueError("stop_token_ids: the tokenizer has no eos_token_id; pass the ids")
            stop_token_ids = (tokenizer.eos_token_id,)
        eos = tuple(int(i) for i in stop_token_ids)
        text = task.tool_stop if tool_stop is None else tool_stop
        stop = None
        if text is not None:
            stop = stop_spec or stops_lib.tool_stop_spec(
                tokenizer, text, mode=stop_mode, exclude=eos
            )
        if pad_id is None:
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        default_len = max_turns * max_new_tokens + (max_turns - 1) * max_obs_tokens
        return cls(
            max_new_tokens=max_new_tokens,
            max_response_len=int(max_response_len or default_len),
            max_turns=max_turns,
            max_tool_calls=max_turns - 1 if max_tool_calls is None else int(max_tool_calls),
            max_obs_tokens=max_obs_tokens,
            eos_ids=eos,
            stop=stop,
            pad_id=int(pad_id),
            **settings,
        )

    def replace(self, **changes) -> RolloutSpec:
        """A copy with ``changes`` (checked again; the stop ids are kept, not rescanned)."""
        return dataclasses.replace(self, **changes)

    @property
    def multi_turn(self) -> bool:
        """Calls can be answered (with ``max_turns == 1`` or ``max_tool_calls == 0`` the tool
        stop still ends a row: the model never writes past a call it cannot get an answer to)."""
        return self.stop is not None and self.max_turns > 1 and self.max_tool_calls > 0

    @property
    def tool_ids(self) -> frozenset[int]:
        """The ids the sampler stops on for the tool stop (exact id or candidates)."""
        return frozenset(self.stop.token_ids) if self.stop is not None else frozenset()

    @property
    def sampler_stop_ids(self) -> list[int]:
        """The sampler's stop ids: the eos ids, then the tool stop ids."""
        return [int(i) for i in stops_lib.stop_ids_array(self.stop, sorted(set(self.eos_ids)))]

    @property
    def sampling(self) -> dict:
        """The sampling keywords of ``generate`` / ``append_and_continue``."""
        return dict(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, draw=self.draw
        )

    def limits(self) -> protocol.Limits:
        """What a rollout may add to a row (``protocol.Limits``), from which an engine sizes its
        cache: ``max_turns`` full turns and observation buckets, ``max_new_tokens`` of slack for
        rejected multi-token stop candidates, the empty appends between decode segments
        (``false_stop_bucket`` each), or ``max_total_len`` when set; and the decode segment."""
        slack = 0 if self.stop is None or self.stop.exact else self.max_new_tokens
        pauses = 0
        if self.decode_segment:
            per_turn = math.ceil(self.max_new_tokens / self.decode_segment) - 1
            pauses = self.max_turns * per_turn * self.false_stop_bucket
        return protocol.Limits(
            turns=self.max_turns,
            turn_tokens=self.max_new_tokens,
            obs_tokens=self.max_obs_tokens,
            min_obs_bucket=self.min_obs_bucket,
            stop_slack=slack,
            pause_slots=pauses,
            max_total_len=self.max_total_len,
            segment=self.decode_segment,
            false_stop_bucket=self.false_stop_bucket,
        )
