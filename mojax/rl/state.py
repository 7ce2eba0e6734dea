"""The host-side state a checkpoint restores: ``HostState``, the prompt iterator and the in-flight rollouts.

``HostState``: everything on the host that a checkpoint must restore, in one object.

An RL run has two kinds of state: the device-side ``TrainState`` (params, optimizer, RNG) and this
host-side record, which every checkpoint stores next to it as JSON (``to_json`` / ``from_json``):

* ``step``: RL steps done;
* ``data``: the training prompt iterator's position (epoch, position, seed);
* ``reward_state``: the reward sources' carried state (``mojax.rewards``), JSON data by source name
  and split: ``reward_state[<source>][<split>]``, e.g. the tool-efficiency source's ``N_optimal``
  tables of the training and validation splits;
* ``method``: the state the advantage method carries across steps, as plain JSON data, or None
  (its hooks read and return it: e.g. a running peak or an archive);
* ``reward_stats``: scored / invalid counts with reasons, kept apart per split (``train``,
  ``validation``, ``eval``);
* ``pending``: only in a checkpoint saved on a signal after a step's update and before its
  after-step phases (the method's after-step hook, evaluation, logging) were done: the step's
  metrics and transcript rows so far. A resumed run does those phases first
  (``mojax.rl.trainer``); any other checkpoint has no ``pending``.
* ``inflight``: the rollouts generated ahead of their update with ``rollout.staleness >= 1``
  (``mojax.rl.state``, JSON data; empty otherwise).

Multi-host: every process holds an identical copy (it is derived from all-gathered data only);
process 0 writes it, every process reads it back.

**The prompt iterator** (``PromptIterator``) of an RL run of an RL run: deterministic epochs, state a checkpoint saves and restores.

Each epoch visits every example once in an order drawn from ``(seed, epoch)``; the iterator's whole
state is ``(epoch, position)``, so a resumed run draws exactly the prompts the uninterrupted run
would have drawn.

**In-flight rollouts** (``InFlight``): rollouts generated ahead of their update (``rollout.staleness = k``), as checkpointable JSON data.

With ``k >= 1`` the step that finishes RL step ``t`` has already generated the rollouts of steps
``t + 1 .. t + k`` (``mojax.rl.async_loop``). They live in ``HostState.inflight`` (so a checkpoint
saves them and a resumed run consumes them as the uninterrupted run does), one :class:`InFlight`
each, encoded by :func:`encode` into plain JSON (arrays as base64 with dtype and shape: exact):

* ``step``: the RL step it is for; ``version``: the RL step whose weights generated it (the
  behaviour policy; ``step - version <= k``);
* ``episodes``: what the update and the logs read of ``mojax.rl.episodes.Episodes``: the example
  ids (looked up in the training split on decoding), prompt ids, the rollout's tokens / log-probs /
  masks / lengths / tool calls / finish reasons / texts / counters, rewards and validity (sets for
  multi-answer tasks), the DAPO keep decision, the per-objective validity mask, the prompts' goal
  weights and the metrics (a record written before the mask is read with
  ``mojax.rewards.registry.legacy_objective_valid``);
* ``host``: the host state its collection left behind (data position, the reward sources' training
  state, the training split's reward stats), applied when the step consumes it.

Every record carries ``schema`` (:data:`SCHEMA`) and ``sha256``, a checksum over the canonical JSON
of the rest (:func:`seal`). Before a step consumes the queue, :func:`valid_prefix` checks each record
in order: the schema, the checksum, that it decodes (every key there, base64 that decodes, arrays of
their dtype and shape), its shapes (``B = len(example_ids) * num_samples`` rows, lengths within the
``[B, L]`` buffer, ``num_samples`` equal to the config's ``rollout.num_samples``) and its place in
the schedule (``step`` = the step it is queued for; ``0 <= step - version <= rollout.staleness``;
``version`` no later than the current step). The first record that fails is moved aside to
``<workdir>/inflight.corrupt`` (``inflight.corrupt-1``, ... if taken), with one warning naming the
file and the reason; it and the records after it (built on its host state) are dropped, and the
step generates them again with the weights it resumed with (as after a signal,
``mojax.rl.async_loop``).

Every process holds the same in-flight rollouts (the rollout and its rewards are all-gathered), so
every process reaches the same verdict; process 0 alone writes the moved-aside file.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax import distributed
from mojax.advantages import to_json_tree
from mojax.infra.checkpoint import encode_host_state
from mojax.infra.jsonl import write_durable
from mojax.rewards.registry import LEGACY_EPISODE_KEYS, legacy_objective_valid, migrate_host_dict
from mojax.rl.episodes import Episodes
from mojax.tasks.framework.types import RewardStats

SPLITS = ("train", "validation", "eval")


@dataclasses.dataclass
class HostState:
    """The host side of an RL run (see the module docstring)."""

    step: int = 0
    data: dict[str, int] = dataclasses.field(default_factory=dict)
    reward_state: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    method: Any = None
    reward_stats: dict[str, RewardStats] = dataclasses.field(
        default_factory=lambda: {s: RewardStats() for s in SPLITS}
    )
    pending: dict[str, Any] | None = None
    inflight: list = dataclasses.field(default_factory=list)

    def with_own_stats(self) -> HostState:
        """This state with fresh copies of its reward stats. Scoring counts into the stats it is
        given in place, so a phase that scores (a rollout, a validation, an evaluation) works on
        the copy this returns: a signal that stops the phase midway leaves the caller's host state
        as it was, and the checkpoint it saves counts nothing twice when the phase is redone."""
        stats = {
            k: RewardStats.from_state_dict(v.state_dict()) for k, v in self.reward_stats.items()
        }
        return dataclasses.replace(self, reward_stats=stats)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "step": int(self.step),
            "data": dict(self.data),
            "reward_state": json.loads(json.dumps(self.reward_state)),
            "method": to_json_tree(self.method),
            "reward_stats": {k: v.state_dict() for k, v in self.reward_stats.items()},
            "inflight": list(self.inflight),
        }
        if self.pending is not None:
            out["pending"] = self.pending
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostState:
        d = migrate_host_dict(d)  # a checkpoint written before the reward sources
        missing = {"step", "data", "reward_state", "reward_stats"} - set(d)
        if missing:
            raise ValueError(
                f"checkpoint host state lacks {sorted(missing)}: it was written by an "
                "incompatible mojax version; start a new workdir"
            )
        return cls(
            step=int(d["step"]),
            data=dict(d["data"]),
            reward_state={k: dict(v) for k, v in d["reward_state"].items()},
            method=_method_state(d),
            reward_stats={k: RewardStats.from_state_dict(v) for k, v in d["reward_stats"].items()},
            pending=d.get("pending"),
            inflight=list(d.get("inflight", [])),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HostState:
        return cls.from_dict(json.loads(text))


def _method_state(d: dict[str, Any]) -> Any:
    """The method state of a host-state dict (``method``; checkpoints of earlier versions kept it as
    ``stage1`` for the two-stage method and ``estimator`` for the others)."""
    if "method" in d:
        return d["method"]
    return d.get("stage1") if d.get("stage1") is not None else d.get("estimator")


# The prompt iterator.


@dataclasses.dataclass
class PromptIterator:
    """Batches of ``batch_size`` examples, reshuffled each epoch (host state: epoch, position)."""

    examples: Sequence[Any]
    batch_size: int
    seed: int = 0
    epoch: int = 0
    position: int = 0

    def __post_init__(self):
        if not len(self.examples):
            raise ValueError("examples: the task loaded no training examples")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    def _order(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([int(self.seed), int(epoch)])
        return rng.permutation(len(self.examples))

    def next(self, n: int | None = None) -> list[Any]:
        """The next ``n`` (default ``batch_size``) examples, crossing epoch boundaries as needed."""
        n = self.batch_size if n is None else int(n)
        out = []
        while len(out) < n:
            order = self._order(self.epoch)
            take = min(n - len(out), len(order) - self.position)
            out += [self.examples[i] for i in order[self.position : self.position + take]]
            self.position += take
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": int(self.epoch), "position": int(self.position), "seed": int(self.seed)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["seed"]) != int(self.seed):
            raise ValueError(
                f"data iterator state has seed {state['seed']} but the config seed is {self.seed}"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


# In-flight rollouts (rollout.staleness >= 1).

#: The version of an in-flight record's layout (1: the records before ``schema`` and ``sha256``).
SCHEMA = 2
CORRUPT_FILE = "inflight.corrupt"
_log = logging.getLogger(__name__)


class InFlightError(ValueError):
    """An in-flight rollout record fails its schema, checksum or validation (the message says
    which)."""


_ROLLOUT_ARRAYS = ("tokens", "logprobs", "loss_mask", "lengths", "n_calls")
_OPTIONAL = ("set_rewards", "set_valid", "kept", "objective_valid", "goal_weights")


@dataclasses.dataclass
class InFlight:
    """One rollout generated ahead of its update (see the module docstring)."""

    step: int
    version: int
    episodes: Episodes
    host: dict[str, Any]  # {"data", "reward_state", "train_stats"}: state dicts


@dataclasses.dataclass
class _Rollout:
    """The fields of ``mojax.rollout.RolloutResult`` an update reads (``turns`` and ``stop`` are
    the rollout driver's and are not kept)."""

    tokens: np.ndarray
    logprobs: np.ndarray
    loss_mask: np.ndarray
    lengths: np.ndarray
    n_calls: np.ndarray
    finish_reason: list[str]
    texts: list[str]
    counters: dict[str, int]
    num_samples: int
    turns: list = dataclasses.field(default_factory=list)
    stop: Any = None


def _array(x: Any) -> dict[str, Any]:
    a = np.ascontiguousarray(np.asarray(x))
    return {"dtype": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a).decode()}


def _scalar(v: Any) -> Any:
    """A metric as a Python number of its kind (numpy scalars are not JSON)."""
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    return float(v) if isinstance(v, np.floating) else v


def _unarray(d: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(d["b64"], validate=True)
    return np.frombuffer(raw, np.dtype(d["dtype"])).reshape(d["shape"]).copy()


def encode(item: InFlight) -> dict[str, Any]:
    """JSON data of ``item`` (exact: :func:`decode` gives back equal arrays, lists and floats)."""
    eps, r = item.episodes, item.episodes.rollout
    rollout = {k: _array(getattr(r, k)) for k in _ROLLOUT_ARRAYS}
    rollout.update(
        finish_reason=[str(x) for x in r.finish_reason],
        texts=list(r.texts),
        counters={str(k): int(v) for k, v in (getattr(r, "counters", None) or {}).items()},
    )
    out = {
        "step": int(item.step),
        "version": int(item.version),
        "host": item.host,
        "example_ids": [str(ex.id) for ex in eps.examples],
        "prompt_ids": [[int(t) for t in ids] for ids in eps.prompt_ids],
        "num_samples": int(eps.num_samples),
        "rollout": rollout,
        "rewards": _array(eps.rewards),
        "valid": _array(eps.valid),
        "metrics": {str(k): _scalar(v) for k, v in eps.metrics.items()},
    }
    for k in _OPTIONAL:
        v = getattr(eps, k)
        out[k] = None if v is None else _array(v)
    return seal(out)


def _digest(d: dict[str, Any]) -> str:
    body = {k: v for k, v in d.items() if k != "sha256"}
    text = json.dumps(encode_host_state(body), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def seal(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with ``schema`` = :data:`SCHEMA` and its checksum ``sha256`` (set in place)."""
    d["schema"] = SCHEMA
    d["sha256"] = _digest(d)
    return d


@dataclasses.dataclass(frozen=True)
class Expect:
    """Where a record belongs: RL ``step`` it is queued for, the ``current`` step, the config's
    ``staleness`` and ``num_samples``."""

    step: int
    current: int
    staleness: int
    num_samples: int


def decode(d: Any, examples_by_id: dict[str, Any], expect: Expect | None = None) -> InFlight:
    """The :class:`InFlight` of :func:`encode`'s data; ``examples_by_id`` maps the training split's
    example ids to its examples.

    Raises:
      InFlightError: the record fails its schema, its checksum, decoding (naming the key), its
        shapes, or ``expect`` (module docstring); or names an example id the training split does
        not have (a checkpoint of another task or data).
    """
    if not isinstance(d, dict):
        raise InFlightError(f"not a JSON object but {type(d).__name__}")
    if d.get("schema") != SCHEMA:
        raise InFlightError(
            f"schema {d.get('schema', 1)!r} (written by an older mojax); this one reads {SCHEMA}"
        )
    if d.get("sha256") != _digest(d):
        raise InFlightError("checksum mismatch: its contents changed after it was written")
    try:
        item = _build(d, examples_by_id)
    except InFlightError:
        raise
    except KeyError as e:
        raise InFlightError(f"key {e} is missing") from None
    except (ValueError, TypeError, AttributeError, binascii.Error) as e:
        raise InFlightError(f"does not decode ({type(e).__name__}: {e})") from None
    problem = _shape_problem(item.episodes) or (expect and _place_problem(item, expect))
    if problem:
        raise InFlightError(problem)
    return item


def _shape_problem(eps: Episodes) -> str | None:
    """What is inconsistent in a decoded record's shapes, or None."""
    r, p, g = eps.rollout, len(eps.examples), eps.num_samples
    b = p * g
    if len(eps.prompt_ids) != p or g < 1 or r.tokens.ndim != 2 or r.tokens.shape[0] != b:
        return f"tokens {r.tokens.shape} do not hold {p} prompts x num_samples {g} rows"
    width = r.tokens.shape[1]
    if r.logprobs.shape != r.tokens.shape or r.loss_mask.shape != r.tokens.shape:
        return f"logprobs {r.logprobs.shape} / loss_mask {r.loss_mask.shape} != {r.tokens.shape}"
    if r.lengths.shape != (b,) or r.n_calls.shape != (b,):
        return f"lengths {r.lengths.shape} / n_calls {r.n_calls.shape} are not [{b}]"
    if r.lengths.min(initial=0) < 0 or r.lengths.max(initial=0) > width:
        return f"lengths {r.lengths.min()}..{r.lengths.max()} lie outside the buffer of {width}"
    if len(r.finish_reason) != b or len(r.texts) != b:
        return f"{len(r.finish_reason)} finish reasons / {len(r.texts)} texts for {b} rows"
    lead = {"rewards": (p, g), "valid": (p, g), "set_rewards": (p, g), "set_valid": (p, g)}
    lead.update(objective_valid=(p, g), kept=(p,), goal_weights=(p,))
    for name, want in lead.items():
        a = getattr(eps, name)
        if a is not None and tuple(a.shape[: len(want)]) != want:
            return f"{name} has shape {a.shape}, not {want}..."
    return None


def _place_problem(item: InFlight, e: Expect) -> str | None:
    """Where a record does not fit the schedule or the config, or None."""
    if item.episodes.num_samples != e.num_samples:
        return f"num_samples {item.episodes.num_samples}, the config's is {e.num_samples}"
    if item.step != e.step:
        return f"it is for RL step {item.step} where step {e.step} is due"
    lag = item.step - item.version
    if not (0 <= lag <= e.staleness and item.version <= e.current):
        return (
            f"step {item.step} / version {item.version} do not fit staleness {e.staleness} "
            f"at step {e.current} (0 <= step - version <= staleness, version <= the step)"
        )
    return None


def valid_prefix(queue: list, examples_by_id: dict[str, Any], expect, workdir: str) -> list:
    """The records of ``queue`` up to the first that fails :func:`decode` (``expect(j)``: the
    :class:`Expect` of record ``j``); that one is moved aside (module docstring) and logged."""
    for j, d in enumerate(queue):
        try:
            decode(d, examples_by_id, expect(j))
        except InFlightError as e:
            aside = _move_aside(d, workdir)
            _log.warning(
                "in-flight rollout %d of the restored checkpoint is damaged: %s; moved aside to %s"
                " and generated again (%d later in-flight rollout(s) dropped with it)",
                j, e, aside, len(queue) - j - 1,
            )  # fmt: skip
            return queue[:j]
    return queue


def _move_aside(d: Any, workdir: str) -> str:
    """Writes record ``d`` to the first free ``<workdir>/inflight.corrupt[-n]`` (process 0)."""
    base = os.path.join(workdir or ".", CORRUPT_FILE)
    path, n = base, 0
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    if distributed.is_leader():
        write_durable(path, json.dumps(encode_host_state(d)) + "\n")
    return path


def _build(d: dict[str, Any], examples_by_id: dict[str, Any]) -> InFlight:
    """The :class:`InFlight` of a record (raises whatever a missing key or a bad value raises)."""
    missing = [i for i in d["example_ids"] if i not in examples_by_id]
    if missing:
        raise InFlightError(
            f"example ids {missing[:5]} are not in the training split (the checkpoint was "
            "written for other data)"
        )
    r = d["rollout"]
    rollout = _Rollout(
        **{k: _unarray(r[k]) for k in _ROLLOUT_ARRAYS},
        finish_reason=list(r["finish_reason"]),
        texts=list(r["texts"]),
        counters=dict(r["counters"]),
        num_samples=int(d["num_samples"]),
    )
    opt = {k: None if d.get(k) is None else _unarray(d[k]) for k in _OPTIONAL}
    if opt["objective_valid"] is None:  # a record written before the per-objective mask
        old = {k: _unarray(d[k]) for k in LEGACY_EPISODE_KEYS if d.get(k) is not None}
        opt["objective_valid"] = legacy_objective_valid(old, _unarray(d["rewards"]).shape[-1])
    eps = Episodes(
        [examples_by_id[i] for i in d["example_ids"]],
        [list(ids) for ids in d["prompt_ids"]],
        int(d["num_samples"]),
        rollout,
        _unarray(d["rewards"]),
        _unarray(d["valid"]),
        dict(d["metrics"]),
        **opt,
    )
    return InFlight(int(d["step"]), int(d["version"]), eps, dict(d["host"]))
