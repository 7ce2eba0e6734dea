"""Rollouts generated ahead of their update (``rollout.staleness = k``), as checkpointable JSON data.

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

Every process holds the same in-flight rollouts (the rollout and its rewards are all-gathered).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import numpy as np

from mojax.rewards.registry import LEGACY_EPISODE_KEYS, legacy_objective_valid
from mojax.rl.episodes import Episodes

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
    raw = base64.b64decode(d["b64"])
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
    return out


def decode(d: dict[str, Any], examples_by_id: dict[str, Any]) -> InFlight:
    """The :class:`InFlight` of :func:`encode`'s data; ``examples_by_id`` maps the training split's
    example ids to its examples.

    Raises:
      KeyError naming an example id the training split does not have (a checkpoint of another
      task or data).
    """
    missing = [i for i in d["example_ids"] if i not in examples_by_id]
    if missing:
        raise KeyError(
            f"in-flight rollout of step {d['step']}: example ids {missing[:5]} are not in the "
            "training split (the checkpoint was written for other data)"
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
