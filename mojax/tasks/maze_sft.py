"""SFT demonstrations for VPO's maze (VPO App. A.1): routes from the BFS solver.

Each maze has three demonstration routes, all within its budget by the generator's construction
(``mojax.tasks.maze`` steps 4 and 6):

* ``direct``: a shortest lava-free route S → E;
* ``via_gold``: shortest legs S → gold corner → E (lava-free legs where they exist);
* ``via_diamond``: the same through the diamond corner.

The corners are reached, so the items placed around them are partly collected: the three routes
score differently on (completion, gold, diamond, avoid_lava), which is the spread a set of answers
can cover. A single-answer demonstration (``<answer>…</answer>``) is one route drawn uniformly; a
multi-answer one (``<route_1>…</route_S>``) holds ``S`` different routes in a random order (kinds
repeat only when ``S > 3``). The demos are a deterministic function of (mazes, seed, S).

**One warm start for every maze method.** The warm start teaches both output formats: each maze
gives a single-answer demo after the single-route prompt and an ``S``-route demo after the
``S``-route prompt (``S = task.num_answers``, or 2 for single-answer configs), and the self-built
vocabulary is trained on both prompt layouts (:func:`corpus_prompts`). A single-answer baseline
(GRPO, Max@k) and a set method (VPO, Multi-RLVR) with the same ``S`` and seed therefore build the
same vocabulary and the same warm start, so one SFT checkpoint per seed serves all of them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from mojax.tasks import maze as maze_lib

__all__ = [
    "ROUTE_KINDS",
    "demo_routes",
    "maze_demonstration",
    "maze_demonstrations",
    "set_size",
    "corpus_prompts",
    "demo_pairs",
]

ROUTE_KINDS = ("direct", "via_gold", "via_diamond")


def _route(maze: maze_lib.Maze, *waypoints) -> list[str]:
    route = maze_lib.route_through(maze, *waypoints, avoid_lava=True)
    if route is None or len(route) > maze.budget:  # a leg has no lava-free path: allow lava
        route = maze_lib.route_through(maze, *waypoints)
    if route is None or len(route) > maze.budget:
        raise ValueError(f"maze seed {maze.seed}: no route through {waypoints} within the budget")
    return route


def demo_routes(maze: maze_lib.Maze) -> dict[str, list[str]]:
    """``{kind: moves}`` for the three ``ROUTE_KINDS``."""
    return {
        "direct": _route(maze),
        "via_gold": _route(maze, maze.gold_corner),
        "via_diamond": _route(maze, maze.diamond_corner),
    }


def maze_demonstration(maze: maze_lib.Maze, num_answers: int, rng: random.Random) -> str:
    """The response text of one demo: ``<answer>`` (``num_answers`` 0) or ``S`` route blocks."""
    routes = demo_routes(maze)
    if not num_answers:
        return "<answer>" + " ".join(routes[rng.choice(ROUTE_KINDS)]) + "</answer>"
    kinds: list[str] = []
    while len(kinds) < num_answers:
        kinds += rng.sample(ROUTE_KINDS, len(ROUTE_KINDS))
    return "\n".join(
        f"<route_{i}>{' '.join(routes[k])}</route_{i}>"
        for i, k in enumerate(kinds[:num_answers], start=1)
    )


def maze_demonstrations(mazes: Sequence[maze_lib.Maze], num_answers: int, seed: int) -> list[str]:
    """One response per maze (``num_answers``: 0 = single answer, else S routes)."""
    rng = random.Random(seed)
    return [maze_demonstration(m, int(num_answers), rng) for m in mazes]


def set_size(num_answers: int) -> int:
    """``S`` of the multi-route layout a maze config's vocabulary and warm start use."""
    return int(num_answers) or 2


def corpus_prompts(task, examples, render, num_answers: int) -> list[str]:
    """The prompt texts a maze vocabulary is trained on: every example's single-route prompt and
    its ``set_size(num_answers)``-route prompt, rendered by ``render``'s chat template."""
    s = set_size(num_answers)
    return [p for ex in examples for p in (task.build_prompt(ex, render),
                                           task.build_prompt(ex, render, num_answers=s))]  # fmt: skip


def demo_pairs(task, examples, render, num_answers: int, seed: int) -> list[tuple[str, str]]:
    """``(prompt, response)`` for SFT: per example, the single-answer demo after the single-route
    prompt, then the ``S``-route demo after the ``S``-route prompt (``S = set_size``)."""
    s = set_size(num_answers)
    mazes = [ex.target for ex in examples]
    single = maze_demonstrations(mazes, 0, seed)
    multi = maze_demonstrations(mazes, s, seed + 1)
    out = []
    for ex, one, many in zip(examples, single, multi):
        out.append((task.build_prompt(ex, render), one))
        out.append((task.build_prompt(ex, render, num_answers=s), many))
    return out
