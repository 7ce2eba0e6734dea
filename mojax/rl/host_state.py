"""``HostState``: everything on the host that a checkpoint must restore, in one object.

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
  (``mojax.rl.interrupts``); any other checkpoint has no ``pending``.
* ``inflight``: the rollouts generated ahead of their update with ``rollout.staleness >= 1``
  (``mojax.rl.inflight``, JSON data; empty otherwise).

Multi-host: every process holds an identical copy (it is derived from all-gathered data only);
process 0 writes it, every process reads it back.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mojax.advantages import to_json_tree
from mojax.rewards.registry import migrate_host_dict
from mojax.tasks.types import RewardStats

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
