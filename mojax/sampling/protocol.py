"""The sampler protocol: all that the rollout and the loop know of a generation engine.

``mojax.rollout`` and ``mojax.rl`` import this module of ``mojax.sampling`` and no other
(``tests/unit/test_structure.py``). An engine is a module (or a folder) under ``mojax/sampling/`` with a
``build`` function and one line in ``SAMPLERS``; ``sampler.engine`` picks it (``build``). The
module may declare its own config section (``CONFIG``: a dataclass whose ``SECTION`` is its
``config.<name>`` key, e.g. ``config.continuous``; ``engine_sections``), which the run spec reads
into ``spec.engines[<name>]`` and hands to its functions as ``options`` (None for an engine
without one), and what the run spec's rules ask of it: ``SPLITS_ROWS`` (its rows lie over the
mesh's batch axes, ``splits_rows``), ``config_errors``, ``memory_report`` and ``describe``::

    sampler = protocol.build(engine, model_config, rollout, options, mesh, rules)  # rl/builders
    sampler.update_weights(params)                         # after each update
    session = sampler.open(requests, sampling)             # a rollout's rows, queued
    while session.busy or tools_running:
        finished = session.step(more_coming=tools_running) # rows whose decode ended (row order)
        ...settle them, run their tool calls...            # view(): host tokens / lengths / codes
        ok = session.fits(rows, [len(obs) ...])            # the engine's room for each append
        session.requeue(rows[ok], observations, budgets)   # they decode on
    out = session.output()                                 # tokens / logprobs / loss_mask [B, R]

Rows are opaque to the driver: it names them by row id (prompt-major, ``p * G + g``) and reads
their host buffers (``Progress``); no cache, slot or bucket crosses the protocol. Each engine sizes
its own cache from the rollout's ``Limits`` (``cache_slots`` is the shared rule; the bucket floors
of a static-shape engine come with them), checks its own settings and mesh when it is built, and
reports its memory to the dry run (``memory_report``).

Several processes: a session decodes the rows its ``layout`` names (the continuous engine: this
process's own block of prompt groups, ``mojax.distributed.own_groups``; the static engine: the rows
its devices hold); its ``view`` and ``output`` hold every row, filled in for those rows; the
rollout all-gathers once at the end.

One driver runs every engine (``mojax.rollout.continuous_agent``). A session's ``rounds`` says how
it takes requeued rows: the static engine (``mojax.sampling.static.session``) decodes in rounds on
one shared KV cache and takes a whole round at once; the continuous engine takes each row as its
observation is ready, while the others decode on.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from mojax.config import option, spec_checker
from mojax.sampling.buckets import bucket_length
from mojax.sampling.processors import DRAWS, SamplingParams
from mojax.sampling.state import FINISH_REASONS, LENGTH, RUNNING, STOP, SamplingOutput

__all__ = [
    "DRAWS",
    "FINISH_REASONS",
    "LENGTH",
    "Limits",
    "Progress",
    "RUNNING",
    "Requests",
    "SAMPLERS",
    "STOP",
    "Sampler",
    "SamplerSpec",
    "SamplingOutput",
    "Session",
    "bucket_length",
    "build",
    "cache_slots",
    "check_sampling",
    "engine_sections",
    "engines",
    "in_graph",
    "memory_report",
    "options",
    "round_sampler",
    "splits_rows",
]

#: ``sampler.engine`` -> ``"module:function"`` of the engine's ``build(model_config, rollout,
#: options, mesh, rules) -> Sampler`` (imported when built). A new engine is one line here.
SAMPLERS: dict[str, Any] = {
    "static": "mojax.sampling.static.engine:build",
    "continuous": "mojax.sampling.continuous.engine:build",
}


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """``config.sampler``: which generation engine samples the rollouts (a ``SAMPLERS`` key; its own
    options are its section, ``engine_sections``)."""

    SECTION: ClassVar[str] = "sampler"
    engine: str = option(
        "static",
        help='"static" (every row of a decode call runs until its longest row ends) | '
        '"continuous" (continuous.slots decode slots refilled as rows end; one engine per process)',
    )

    def __post_init__(self):
        c = spec_checker("sampler", self)
        c.choice("sampler.engine", engines())
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a rollout may add to a row, from which an engine sizes its cache (``cache_slots``).

    Attributes:
      turns: model turns per row; turn_tokens: policy tokens per turn.
      obs_tokens: tokens of one observation (appended between turns).
      min_obs_bucket: floor of an observation append's bucket (a static-shape engine pads each
        append to ``bucket_length(obs_tokens, min_obs_bucket)``).
      stop_slack: extra tokens for rejected multi-token stop candidates.
      pause_slots: extra slots of the empty appends between decode segments.
      max_total_len: cache slots set outright (None: the rule of ``cache_slots``).
      segment: most tokens a row decodes before its engine's step returns (0: a whole turn; the
        static engine pauses such rows and resumes them itself, bounding a step's latency).
      false_stop_bucket: cache slots of an empty append (a static-shape engine's resume of a
        paused row or a rejected stop candidate).
    """

    turns: int
    turn_tokens: int
    obs_tokens: int
    min_obs_bucket: int = 8
    stop_slack: int = 0
    pause_slots: int = 0
    max_total_len: int | None = None
    segment: int = 0
    false_stop_bucket: int = 1


def cache_slots(prompt_bucket: int, limits: Limits) -> int:
    """Cache slots of a row whose prompt pads to ``prompt_bucket``: ``limits.max_total_len``
    when set, else room for every turn, every observation bucket and the slack."""
    if limits.max_total_len is not None:
        return int(limits.max_total_len)
    obs_bucket = bucket_length(limits.obs_tokens, limits.min_obs_bucket)
    turns = limits.turns * limits.turn_tokens + (limits.turns - 1) * obs_bucket
    return prompt_bucket + turns + limits.stop_slack + limits.pause_slots


@dataclasses.dataclass(frozen=True)
class Requests:
    """The rows of one rollout: P prompts, G samples each (rows prompt-major).

    Attributes:
      prompt_tokens: int32 [P, Tp] right-padded; prompt_lengths: int [P] real tokens.
      key: the PRNG key (each row draws from (key, row id, response position)).
      num_samples: G. max_new_tokens: the first turn's token budget.
      stop_token_ids: the ids a row stops on (eos ids, then tool stop ids).
      max_response_len: R, a row's response slots (turns and observations).
      limits: what the rollout may append (the engine sizes its cache from them).
      pad_id: written after a row's end. cache_dtype: k/v dtype (None: the compute dtype).
      min_prompt_bucket: floor of the prompt bucket.
    """

    prompt_tokens: np.ndarray
    prompt_lengths: np.ndarray
    key: Any
    num_samples: int
    max_new_tokens: int
    stop_token_ids: Sequence[int]
    max_response_len: int
    limits: Limits
    pad_id: int = 0
    cache_dtype: Any = None
    min_prompt_bucket: int = 16

    @property
    def prompt_bucket(self) -> int:
        """The bucket the prompts pad to (``bucket_length`` of the longest)."""
        return bucket_length(int(np.max(self.prompt_lengths)), self.min_prompt_bucket)


@dataclasses.dataclass(frozen=True)
class Progress:
    """Host buffers of a session's rows (the rows this process decodes filled in).

    Attributes:
      tokens: int32 [B, R] response tokens; lengths: int [B] used response slots;
      finish_reason: int32 [B] codes of ``FINISH_REASONS`` (``RUNNING`` while queued or decoding).
    """

    tokens: np.ndarray
    lengths: np.ndarray
    finish_reason: np.ndarray


class Session(Protocol):
    """One rollout's rows in an engine (module docstring).

    Attributes:
      rounds: the engine takes requeued rows a whole round at a time (the static engine: the
        driver requeues once every call of the round has its result, and steps in lockstep on
        every process); False: one by one, as their observations are ready.
      layout: the ``mojax.distributed.RowLayout`` of the rows: which ones this process decodes,
        reads and runs the tools of.
    """

    rounds: bool
    layout: Any

    @property
    def busy(self) -> bool:
        """Rows are queued or decoding: ``step`` makes progress."""
        ...

    def step(self, more_coming: bool = False) -> np.ndarray:
        """Decodes a while; returns the rows whose decode ended (row order). ``more_coming``: rows
        will be requeued later (tool calls running)."""
        ...

    def requeue(self, rows, obs, max_new) -> None:
        """Queues ended ``rows`` again, each with appended (loss-masked) tokens ``obs[k]`` and a
        budget of ``max_new[k]`` new tokens."""
        ...

    def fits(self, rows, appended) -> np.ndarray:
        """bool per row: ``appended[k]`` more tokens and one more step fit row ``rows[k]``'s
        room in the engine's cache (the driver ends the others with ``budget``; the engine
        counts them, ``cache_exhausted``). Asked before every ``requeue``, on every process,
        ``rows`` possibly empty (a ``rounds`` engine agrees its verdict across processes)."""
        ...

    def view(self) -> Progress:
        """The rows' host buffers now."""
        ...

    def output(self) -> SamplingOutput:
        """The rows' tokens, log-probs, loss mask, lengths and finish codes."""
        ...

    def counters(self) -> dict[str, int]:
        """The engine's schedule counters for the rollout (e.g. ``segments``)."""
        ...


class Sampler(Protocol):
    """A generation engine (module docstring)."""

    def update_weights(self, params: Any) -> None: ...

    def open(self, requests: Requests, sampling: Mapping[str, Any]) -> Session: ...


def engines() -> tuple[str, ...]:
    """The ``sampler.engine`` values (``SAMPLERS``' keys)."""
    return tuple(SAMPLERS)


def engine_sections() -> dict[str, type]:
    """``{section name: class}`` of the engines' own config sections (each module's ``CONFIG``),
    read into ``spec.engines`` whichever engine runs (``mojax.spec``)."""
    out = {}
    for engine in engines():
        cls = _entry(engine, "CONFIG")
        if cls is not None:
            out[cls.SECTION] = cls
    return out


def options(engine: str, sections: Mapping[str, Any]) -> Any:
    """The ``engine``'s own section among the run spec's engine ``sections`` (None: it has none)."""
    cls = _entry(engine, "CONFIG")
    return None if cls is None else sections[cls.SECTION]


def _entry(engine: str, attr: str):
    """The engine module's ``attr`` (``SAMPLERS[engine]``: ``"module:function"``, a ``build``
    callable, or an object holding the module's names); a clear error for an unknown engine."""
    entry = SAMPLERS.get(engine)
    if entry is None:
        raise ValueError(f"config.sampler.engine={engine!r} is not one of {engines()}")
    if not isinstance(entry, str):  # a build function, or an object with the module's names
        if attr == "build" and not hasattr(entry, "build"):
            return entry
        return getattr(entry, attr, None)
    module, name = entry.split(":")
    return getattr(importlib.import_module(module), name if attr == "build" else attr, None)


def splits_rows(engine: str) -> bool:
    """Whether the ``engine`` lays a rollout's rows over the mesh's batch axes, so that
    ``B = prompts_per_step x num_samples`` must be a multiple of the devices on them (its module's
    ``SPLITS_ROWS``; an engine that does not say is assumed to)."""
    flag = _entry(engine, "SPLITS_ROWS")
    return True if flag is None else bool(flag)


def build(engine: str, model_config, rollout, options, mesh, rules) -> Sampler:
    """The ``engine``'s sampler for the model config, the ``config.rollout`` section, the engine's
    own section ``options`` (checked by the engine; None for an engine without one) and the run's
    mesh / logical axis rules."""
    return _entry(engine, "build")(model_config, rollout, options, mesh, rules)


def memory_report(
    engine: str, spec, options, mesh, rules, state, model_config, prompt_len, out
) -> tuple[int, int]:
    """``(held, transient)``: the ``engine``'s bytes per device held between steps beyond the
    train state and those of a rollout, as its module's ``memory_report`` compiles them
    abstractly (``mojax.sampling.memory``; ``out`` gets the parts); ``(0, 0)`` for an engine
    without one."""
    report = _entry(engine, "memory_report")
    if report is None:
        return 0, 0
    return report(spec, options, mesh, rules, state, model_config, prompt_len, out)


def config_errors(
    engine: str, rollout, options, rules, sizes: Mapping[str, int] | None
) -> list[tuple[str, str]]:
    """``[(config key, message)]``: what the ``engine`` cannot run of the ``config.rollout``
    section and its own ``options`` on a mesh of ``sizes`` (axis -> devices; None: no devices
    known, only the rules that need none) with the logical axis ``rules``, as its module's
    ``config_errors`` says (checked with the run spec, before anything is built); none for an
    engine without one."""
    rule = _entry(engine, "config_errors")
    return [] if rule is None else list(rule(rollout, options, rules, sizes))


def describe(engine: str, rollout, options) -> str | None:
    """The engine's one-line description for the dry run (its module's ``describe``), or None."""
    fn = _entry(engine, "describe")
    return None if fn is None else fn(rollout, options)


def in_graph(model, mesh=None, rules=None) -> Sampler:
    """The static engine over an existing ``QwenModel`` (its class kept; the static module's
    ``of_model``): what a rollout samples with when it is given a model."""
    return _entry("static", "of_model")(model, mesh, rules)


def round_sampler(sampler) -> Sampler:
    """A sampler of the static engine's calls (``generate``, ``append_and_continue``,
    ``row_sharding``; e.g. a wrapper around the in-graph sampler) as a ``Sampler``: its sessions
    are the static engine's rounds over those calls (the static module's ``round_sampler``)."""
    return _entry("static", "round_sampler")(sampler)


def check_sampling(temperature, top_k, top_p, draw) -> None:
    """The engines' rule for the sampling settings (a ``ValueError`` naming the bad one)."""
    SamplingParams(temperature, top_k, top_p, draw=draw)
