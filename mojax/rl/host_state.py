"""``HostState``: everything on the host that a checkpoint must restore, in one object.

An RL run has two kinds of state: the device-side ``TrainState`` (params, optimizer, RNG) and this
host-side record, which every checkpoint stores next to it as JSON (``to_json`` / ``from_json``):

* ``step``: RL steps done;
* ``data``: the training prompt iterator's position (epoch, position, seed);
* ``tracker`` / ``val_tracker``: ParetoPO's ``N_optimal`` tables (fewest tool calls of a success per
  prompt; ParetoPO, arXiv:2606.16111, Eq. 4) for the training and validation splits;
* ``stage1``: ParetoPO's Stage-1 state (archive, reference, ΔHV̄, r_pareto), or None;
* ``estimator``: the state an advantage transform carries across steps (``AdvantageOutput.state``,
  e.g. AWPO's running peak ``R_max``), as plain JSON data, or None;
* ``reward_stats``: scored / invalid counts with reasons, kept apart per split (``train``,
  ``validation``, ``eval``).

Multi-host: every process holds an identical copy (it is derived from all-gathered data only);
process 0 writes it, every process reads it back.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax
import numpy as np

from mojax.pareto import NOptimalTracker, Stage1State
from mojax.tasks.base import RewardStats

SPLITS = ("train", "validation", "eval")


@dataclasses.dataclass
class HostState:
    """The host side of an RL run (see the module docstring)."""

    step: int = 0
    data: dict[str, int] = dataclasses.field(default_factory=dict)
    tracker: NOptimalTracker = dataclasses.field(default_factory=NOptimalTracker)
    val_tracker: NOptimalTracker = dataclasses.field(default_factory=NOptimalTracker)
    stage1: Stage1State | None = None
    estimator: Any = None
    reward_stats: dict[str, RewardStats] = dataclasses.field(
        default_factory=lambda: {s: RewardStats() for s in SPLITS}
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": int(self.step),
            "data": dict(self.data),
            "tracker": self.tracker.to_state(),
            "val_tracker": self.val_tracker.to_state(),
            "stage1": None if self.stage1 is None else self.stage1.to_state(),
            "estimator": to_json_tree(self.estimator),
            "reward_stats": {k: v.state_dict() for k, v in self.reward_stats.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostState:
        missing = {"step", "data", "tracker", "val_tracker", "reward_stats"} - set(d)
        if missing:
            raise ValueError(
                f"checkpoint host state lacks {sorted(missing)}: it was written by an "
                "incompatible mojax version; start a new workdir"
            )
        return cls(
            step=int(d["step"]),
            data=dict(d["data"]),
            tracker=NOptimalTracker.from_state(d["tracker"]),
            val_tracker=NOptimalTracker.from_state(d["val_tracker"]),
            stage1=None if d.get("stage1") is None else Stage1State.from_state(d["stage1"]),
            estimator=d.get("estimator"),
            reward_stats={k: RewardStats.from_state_dict(v) for k, v in d["reward_stats"].items()},
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HostState:
        return cls.from_dict(json.loads(text))


def to_json_tree(tree: Any) -> Any:
    """A pytree of arrays / scalars as nested lists, dicts and Python numbers (JSON-safe)."""
    if tree is None:
        return None
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x)).tolist(), tree)
