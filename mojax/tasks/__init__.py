"""Tasks, datasets and reward functions (``docs/architecture.md``, "Data contracts").

Each task loads examples from the public formats, builds prompts through a tokenizer's chat
template, declares its objectives (name, theoretical min/max, success) and scores responses into
``rewards float32 [N, M]`` + ``valid bool [N]`` (VPO sets: ``[N, S, M]`` + ``[N, S]``) without ever
crashing on model output. Submodules are imported on first use (no import-time side effects).
"""

import importlib

from mojax.tasks.framework.base import Task
from mojax.tasks.framework.registry import TASKS, build_task, task_class
from mojax.tasks.framework.splits import Splits
from mojax.tasks.framework.types import (
    Example,
    Objective,
    RewardStats,
    ScoreBatch,
    SetScoreBatch,
    clean_response,
)

_SUBMODULES = (
    "calculator",
    "data",
    "math",
    "maze",
    "maze_task",
    "multi_answer",
    "musique",
    "qa",
    "toolrl",
)
_FRAMEWORK = {"data": "framework.data", "multi_answer": "framework.multi_answer"}
_LAZY = {
    "ToolRLTask": "toolrl",
    "MathTask": "math",
    "QATask": "qa",
    "MuSiQueTask": "musique",
    "MazeTask": "maze_task",
    "CalculatorTask": "calculator",
}

__all__ = [
    "TASKS",
    "Example",
    "Objective",
    "RewardStats",
    "ScoreBatch",
    "SetScoreBatch",
    "Splits",
    "Task",
    "build_task",
    "clean_response",
    "task_class",
    *_LAZY,
]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"mojax.tasks.{_FRAMEWORK.get(name, name)}")
    if name in _LAZY:
        return getattr(importlib.import_module(f"mojax.tasks.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'mojax.tasks' has no attribute {name!r}")
