"""The maze as a task: VPO App. E.3 prompts (single- and multi-route) and the 4-D reward.

Single-answer responses put the moves in ``<answer>…</answer>`` (the last complete block counts); a
response without one, or with a non-move token in it, scores ``(0, 0, 0, 0)`` (E not reached) and
stays valid — a bad route is a legitimate zero. In multi-answer sets (``<route_i>`` blocks) such a
route is unparseable and its row is invalid (methods.md, VPO).
"""

from __future__ import annotations

import numpy as np

from mojax.tasks import maze as maze_lib
from mojax.tasks.framework.base import Example, Objective, Splits, Task, demo_row

__all__ = ["MazeTask", "single_prompt", "multi_prompt"]

_HEADER = "Navigate a 9x9 maze from S to E. Collect gold and diamonds, avoid lava.\n\nGrid:\n```\n"
_RULES = (
    "```\n\n"
    "- Move: UP, DOWN, LEFT, RIGHT. # is a wall -- you cannot enter it.\n"
    "- Do not leave the grid.\n"
    "- Collect: G (Gold), D (Diamond), B (Bonus) tiles by stepping on them.\n"
    "- Avoid: L (Lava) tiles. Stepping on lava costs you.\n"
    "- Visiting a B cell multiplies your other scores -- explore!\n"
    "- You MUST reach E. If you don't reach E, your score is zero everywhere.\n"
    "- Items only count if collected BEFORE you reach E (the trajectory ends at E).\n"
)
_EXAMPLE_ROUTES = (
    "RIGHT RIGHT RIGHT RIGHT DOWN DOWN DOWN DOWN",
    "DOWN DOWN DOWN DOWN RIGHT RIGHT RIGHT RIGHT",
    "RIGHT DOWN RIGHT DOWN RIGHT DOWN RIGHT DOWN",
)


def _counts(maze: maze_lib.Maze) -> str:
    return (
        f"This maze has {len(maze.gold)} Gold, {len(maze.diamonds)} Diamond, "
        f"{len(maze.lava)} Lava, and 1 Bonus tiles.\n"
    )


def single_prompt(maze: maze_lib.Maze) -> str:
    """VPO App. E.3 single-solution prompt (GRPO, MaxRL, GDPO, MaxAtK, RandomW)."""
    return (
        _HEADER
        + maze.render()
        + "\n"
        + _RULES
        + f"- You have {maze.budget} steps.\n\n"
        + _counts(maze)
        + "Output moves in `<answer>...</answer>` tags, e.g., `<answer>UP UP RIGHT</answer>`."
    )


def multi_prompt(maze: maze_lib.Maze, m: int) -> str:
    """VPO App. E.3 multi-solution rewrite with ``m`` routes (VPO, Multi-RLVR)."""
    tags = ", ".join(f"`<route_{i}>...</route_{i}>`" for i in range(1, m + 1))
    example = "\n".join(
        f"<route_{i}>{_EXAMPLE_ROUTES[(i - 1) % 3]}</route_{i}>" for i in range(1, m + 1)
    )
    return (
        _HEADER
        + maze.render()
        + "\n"
        + _RULES
        + f"- You have {maze.budget} steps per route.\n\n"
        + _counts(maze)
        + f"Reason briefly about the maze, then provide {m} genuinely different routes from S to "
        "E. Each route is a sequence of UP/DOWN/LEFT/RIGHT moves (space-separated). Wrap each "
        f"route in numbered tags ({tags}). Inside each tag put ONLY moves (no arrows, no "
        "coordinates, no prose); any reasoning goes outside the tags. Each route has its own "
        f"{maze.budget}-step budget and must reach E (score is zero if it doesn't).\n"
        f"Format example (m={m}):\n{example}"
    )


def _last_answer(text: str) -> str | None:
    end = text.rfind("</answer>")
    if end < 0:
        return None
    start = text.rfind("<answer>", 0, end)
    if start < 0:
        return None
    return text[start + len("<answer>") : end]


class MazeTask(Task):
    """VPO maze: objectives (completion, gold, diamond, avoid_lava) ∈ [0, 1], scalar = mean.

    Args:
      convex_bonus: the authors' code variant ``(1, clamp(m g²), clamp(m d²), clamp(m ℓ²))`` with
        ``m = 1.5`` after visiting the bonus tile (see :mod:`mojax.tasks.maze`); default False =
        the paper's linear reward, in which the bonus tile is a distractor.
    """

    name = "maze"
    answer_tag = "route"
    objectives = (
        Objective("completion", 0.0, 1.0, success=True),
        Objective("gold", 0.0, 1.0),
        Objective("diamond", 0.0, 1.0),
        Objective("avoid_lava", 0.0, 1.0),
    )
    scalar_weights = (0.25, 0.25, 0.25, 0.25)

    def __init__(self, convex_bonus: bool = False):
        self.convex_bonus = bool(convex_bonus)

    @staticmethod
    def load(split: str = "train", num: int | None = None) -> list[Example]:
        """Generated mazes of the split (train: seeds from 42, 1000; test: from 4242, 100)."""
        return [
            Example(f"maze/{split}/{m.seed}", ({"role": "user", "content": single_prompt(m)},), m)
            for m in maze_lib.generate_split(split, num)
        ]

    # ------------------------------------------------------------------ run plumbing
    def load_splits(self, spec, *, seed: int) -> Splits:
        """The generated train mazes and the test mazes (validation = test: the paper's held-out
        set is the test set)."""
        del seed
        test = self.load("test", int(spec.num_eval))
        return Splits(self.load("train", int(spec.num_train)), test, test, self)

    def has_demonstrations(self, sft) -> bool:
        return True

    def sft_rows(self, sft, tokenizer, train, *, seed: int, num_answers: int):
        """Two rows per maze: BFS-solver routes, single-answer and S-route (``maze_sft``)."""
        from mojax.tasks.maze_sft import demo_pairs

        eos = int(tokenizer.eos_token_id)
        pairs = demo_pairs(self, train[: sft.num_examples], tokenizer, num_answers, int(seed))
        return [demo_row(tokenizer, prompt, text, eos) for prompt, text in pairs]

    def vocab_corpus(self, splits, render, *, sft, seed: int, num_answers: int):
        """Every prompt in both layouts: one vocabulary for every maze method."""
        from mojax.tasks.maze_sft import corpus_prompts

        del sft, seed
        return corpus_prompts(self, splits.all, render, num_answers)

    def messages(self, example: Example, *, num_answers: int | None = None):
        if num_answers is None:
            return [dict(m) for m in example.messages]
        return [{"role": "user", "content": multi_prompt(example.target, int(num_answers))}]

    def parseable(self, answer: str, example: Example) -> bool:
        return maze_lib.parse_moves(answer) is not None

    def score(self, response: str, example: Example) -> np.ndarray:
        block = _last_answer("" if response is None else str(response))
        return self.score_answer("" if block is None else block, example)

    def score_answer(self, answer: str, example: Example) -> np.ndarray:
        """A ``<route_i>`` block (or the inside of ``<answer>``): bare moves."""
        moves = maze_lib.parse_moves(answer)
        return maze_lib.maze_reward(example.target, moves, convex_bonus=self.convex_bonus)
