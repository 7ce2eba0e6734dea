"""The data types of tasks: objectives, examples, reward statistics and score batches.

An :class:`Objective` is one reward dimension (name, theoretical min/max, whether it defines
success, whether the trainer fills it); an :class:`Example` is one prompt with its gold data;
:class:`RewardStats` counts scored and invalid samples with their reasons; :class:`ScoreBatch` /
:class:`SetScoreBatch` are what a task's batch scorers return. Every objective is oriented **higher
is better**.

Shapes: ``N`` responses in a batch, ``S`` answers in a VPO set, ``M`` objectives.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "Objective",
    "Example",
    "RewardStats",
    "ScoreBatch",
    "SetScoreBatch",
    "clean_response",
]

# Special tokens a decoder may leave at the end of a response; stripped before parsing.
_TRAILING_SPECIALS = ("<|im_end|>", "<|endoftext|>", "</s>", "<eos>")


def clean_response(response: Any) -> str:
    """The assistant text with surrounding whitespace and trailing end-of-turn tokens removed.

    Non-string inputs (``None``, bytes) are converted rather than rejected: reward code must
    tolerate anything a rollout can hand it.
    """
    if response is None:
        return ""
    if isinstance(response, bytes):
        response = response.decode("utf-8", errors="replace")
    text = str(response).strip()
    changed = True
    while changed:
        changed = False
        for tok in _TRAILING_SPECIALS:
            if text.endswith(tok):
                text = text[: -len(tok)].rstrip()
                changed = True
    return text


@dataclasses.dataclass(frozen=True)
class Objective:
    """One reward dimension.

    Attributes:
      name: the objective's name (``reward/<name>/mean`` in metrics).
      min: theoretical minimum (SAW offsets and hypervolume normalisation use it).
      max: theoretical maximum.
      success: a sample is "successful" when every ``success`` objective reaches its ``max``
        (ParetoPO's ``N_optimal`` counts tool calls of successful trajectories only).
      external: filled by the trainer, not by :meth:`Task.score` (e.g. ``r_tool``).
    """

    name: str
    min: float
    max: float
    success: bool = False
    external: bool = False

    def __post_init__(self):
        if not (math.isfinite(self.min) and math.isfinite(self.max) and self.min < self.max):
            raise ValueError(
                f"objective {self.name!r}: need finite min < max; got {self.min}, {self.max}"
            )


@dataclasses.dataclass(frozen=True)
class Example:
    """One prompt with its gold data.

    Attributes:
      id: stable identifier (ParetoPO tracks ``N_optimal`` per id).
      messages: chat messages (``{"role", "content"}``) of the single-answer prompt.
      target: whatever the task's scorer compares against (gold string, alias list, maze, ...).
      meta: free-form extra fields kept from the source record.
    """

    id: str
    messages: tuple[Mapping[str, str], ...]
    target: Any
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RewardStats:
    """Counts of scored and invalid samples, with the reason of each invalid one.

    Host-side, plain data: ``state_dict()`` / ``from_state_dict()`` let a checkpoint keep it.
    """

    scored: int = 0
    invalid: int = 0
    reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def record(self, valid: bool, reason: str | None = None) -> None:
        self.scored += 1
        if not valid:
            self.invalid += 1
            self.reasons[reason or "unknown"] += 1

    def merge(self, other: RewardStats) -> RewardStats:
        out = RewardStats(self.scored + other.scored, self.invalid + other.invalid)
        out.reasons = self.reasons + other.reasons
        return out

    def as_metrics(self, prefix: str = "reward_invalid") -> dict[str, float]:
        """Flat scalars for metrics.jsonl: totals plus one key per reason."""
        out = {f"{prefix}/count": float(self.invalid), f"{prefix}/scored": float(self.scored)}
        for reason, n in sorted(self.reasons.items()):
            out[f"{prefix}/{reason}"] = float(n)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"scored": self.scored, "invalid": self.invalid, "reasons": dict(self.reasons)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> RewardStats:
        return cls(
            int(state["scored"]), int(state["invalid"]), collections.Counter(state["reasons"])
        )


@dataclasses.dataclass
class ScoreBatch:
    """``rewards float32 [N, M]`` (0 where invalid), ``valid bool [N]``, the stats of this call,
    and ``external``: names of objectives the caller still has to fill (e.g. ``("r_tool",)``)."""

    rewards: np.ndarray
    valid: np.ndarray
    stats: RewardStats
    external: tuple[str, ...]


@dataclasses.dataclass
class SetScoreBatch:
    """VPO sets: ``set_rewards float32 [N, S, M]``, ``set_valid bool [N, S]``, stats."""

    set_rewards: np.ndarray
    set_valid: np.ndarray
    stats: RewardStats
