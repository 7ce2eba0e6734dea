"""Goal-conditioned prompts: a target scalarization ``w`` written into the prompt.

The Goal-Conditioned GRPO baseline of VPO (Vector Policy Optimization, arXiv:2605.22817, Sec. 5 and
App. E.5) conditions the policy on ``w`` and trains it on ``w . r``. Per training example ``w`` is
drawn from ``Dir(1, ..., 1)`` and this block is appended to the prompt (App. E.5)::

    Your objective weights (higher = more important to optimize):

    - {desc_1}: {w_1:.2f}
    - ...

    Maximize your weighted score.

``desc_i`` are the task's ``objective_descriptions`` when it declares them, else its objective
names. Evaluation and validation condition on the task's canonical ``w* = task.scalar_weights``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "draw_goal_weights",
    "goal_descriptions",
    "goal_messages",
    "goal_suffix",
]


def goal_suffix(names: Sequence[str], w) -> str:
    """The App. E.5 goal-conditioning block for objective descriptions ``names`` and weights ``w [M]``."""
    w = np.asarray(w, np.float64).reshape(-1)
    if len(names) != w.shape[0]:
        raise ValueError(f"goal weights have {w.shape[0]} entries; objectives are {list(names)}")
    lines = "\n".join(f"- {n}: {x:.2f}" for n, x in zip(names, w))
    return (
        "Your objective weights (higher = more important to optimize):\n\n"
        f"{lines}\n\nMaximize your weighted score."
    )


def goal_descriptions(task) -> tuple[str, ...]:
    """``desc_i``: the task's ``objective_descriptions`` if it has them, else its objective names."""
    desc = tuple(getattr(task, "objective_descriptions", ()) or ())
    return desc if len(desc) == task.num_objectives else tuple(task.objective_names)


def goal_messages(task, example, w, num_answers: int | None = None) -> list[dict[str, str]]:
    """The task's chat messages with the goal suffix appended to the last user message."""
    msgs = task.messages(example, num_answers=num_answers)
    users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
    if not users:
        raise ValueError(f"example {example.id!r}: no user message to append the goal weights to")
    i = users[-1]
    suffix = goal_suffix(goal_descriptions(task), w)
    msgs[i] = {**msgs[i], "content": f"{msgs[i]['content']}\n\n{suffix}"}
    return msgs


def draw_goal_weights(seed: int, step: int, round_: int, n: int, m: int) -> np.ndarray:
    """float32 ``[n, m]`` rows ~ ``Dir(1, ..., 1)`` from ``default_rng([seed, step, round_])``.

    A pure function of ``(seed, step, round_)``, so a resumed run redraws the same weights.
    """
    rng = np.random.default_rng([int(seed), int(step), int(round_)])
    return rng.dirichlet(np.ones(int(m)), size=int(n)).astype(np.float32)
