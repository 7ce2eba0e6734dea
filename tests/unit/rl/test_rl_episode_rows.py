"""Dynamic sampling's row bookkeeping: selecting and concatenating episode groups keeps every
per-row rollout field aligned with its group (checked against a plain loop)."""

import dataclasses

import numpy as np

from mojax.rl.episodes import Episodes
from mojax.rl.episodes import concat as _concat
from mojax.rl.episodes import select as _select


@dataclasses.dataclass
class FakeRollout:
    tokens: np.ndarray
    texts: list
    finish_reason: list
    num_samples: int  # not per-row: left alone


def _eps(first_prompt, p=3, g=2):
    b = p * g
    ids = np.arange(first_prompt * g, first_prompt * g + b)
    roll = FakeRollout(
        ids[:, None] * np.ones((1, 4), int), [f"t{i}" for i in ids], [f"r{i}" for i in ids], g
    )
    rewards = ids.reshape(p, g, 1).astype(np.float32)
    return Episodes(
        [f"ex{first_prompt + i}" for i in range(p)],
        [[first_prompt + i] for i in range(p)],
        g,
        roll,
        rewards,
        np.ones((p, g), bool),
        {"m": 1.0},
    )


def test_select_and_concat_keep_rows_with_their_groups():
    both = _concat(_eps(0), _eps(3))
    assert both.examples == [f"ex{i}" for i in range(6)]
    picked = _select(both, np.array([4, 1]))
    assert picked.examples == ["ex4", "ex1"] and picked.prompt_ids == [[4], [1]]
    want_rows = [8, 9, 2, 3]
    np.testing.assert_array_equal(picked.rollout.tokens[:, 0], want_rows)
    assert picked.rollout.texts == [f"t{i}" for i in want_rows]
    assert picked.rollout.finish_reason == [f"r{i}" for i in want_rows]
    np.testing.assert_array_equal(picked.rewards.reshape(-1), want_rows)
    assert picked.rollout.num_samples == 2
