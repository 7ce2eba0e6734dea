"""The prompt iterator of an RL run: deterministic epochs, state a checkpoint saves and restores.

Each epoch visits every example once in an order drawn from ``(seed, epoch)``; the iterator's whole
state is ``(epoch, position)``, so a resumed run draws exactly the prompts the uninterrupted run
would have drawn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np


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
