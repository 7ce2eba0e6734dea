"""Rewards added to an existing task by import path: ``config.task.extra_rewards``.

Each block of ``config.task.extra_rewards`` adds one objective to the task's reward vector::

    config.task.extra_rewards = {
        "r_short": {"fn": "my_pkg.rewards:brevity", "min": 0.0, "max": 1.0, "weight": 0.2,
                    "kwargs": {"max_chars": 64}},
    }

The block's key is the objective's name; ``fn`` is ``package.module:attr``, either a function
``fn(response, example, **kwargs) -> float`` or a class whose instances (built once with
``kwargs``) are called as ``instance(response, example)``; ``min`` / ``max`` are its theoretical
bounds (higher is better, like every objective); ``weight`` is its entry in the scalar ``w*``
(GRPO's training scalar, best@k; default 0: the scalar is unchanged). Added objectives come after
the task's own, in the order of their names (a ``ConfigDict`` sorts its keys), so ``M`` grows by
one per block and every per-objective estimator (GDPO, SAW, ParetoPO, VPO) sees them; weight
vectors such as GDPO's ``advantage.weights`` need one entry per objective.

The task is extended by a subclass built here (``with_extra_rewards``): everything but
``objectives``, ``scalar_weights``, ``score`` and ``score_answer`` is the task's own (prompts,
tools, loading), and an exception or an out-of-bound value of an added reward marks the sample
invalid through ``Task.score_safe``, like the task's own reward code.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from mojax.tasks.framework.base import Objective, Task

__all__ = ["ExtraReward", "config_errors", "from_config", "resolve", "with_extra_rewards"]

KEY = "config.task.extra_rewards"
FIELDS = ("fn", "min", "max", "weight", "kwargs")


@dataclasses.dataclass(frozen=True)
class ExtraReward:
    """One added objective: ``objective`` (name, bounds), its scalar ``weight`` and the reward
    callable ``fn(response, example) -> float`` (keyword arguments already bound)."""

    objective: Objective
    weight: float
    fn: Callable[[Any, Any], float]

    def __call__(self, response: Any, example: Any) -> float:
        return float(self.fn(response, example))


def resolve(path: str, key: str) -> Any:
    """The object at ``"package.module:attr"``; ``ValueError`` naming ``key`` when the path is
    malformed, the module does not import or the attribute is missing."""
    if not isinstance(path, str) or ":" not in path:
        raise ValueError(f"{key}={path!r}: expected an import path 'package.module:attr'")
    module_name, _, attr = path.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure is a config error
        raise ValueError(
            f"{key}={path!r}: cannot import module {module_name!r}: {type(e).__name__}: {e}"
        ) from e
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"{key}={path!r}: module {module_name!r} has no {attr!r}")
    if not callable(obj):
        raise ValueError(f"{key}={path!r}: {attr!r} is not callable")
    return obj


def _plain(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def _one(name: str, block: Any) -> ExtraReward:
    """The ``ExtraReward`` of one block; ``ValueError`` naming ``config.task.extra_rewards.<name>``."""
    key = f"{KEY}.{name}"
    if not isinstance(block, Mapping):
        block = _plain(block)
    if not isinstance(block, Mapping):
        raise ValueError(f"{key}: expected a block {{'fn': 'package.module:attr', ...}}")
    unknown = sorted(set(block) - set(FIELDS))
    if unknown:
        raise ValueError(f"{key}: unknown field(s) {unknown}; fields: {list(FIELDS)}")
    if "fn" not in block:
        raise ValueError(f"{key}.fn: missing (an import path 'package.module:attr')")
    obj = resolve(block["fn"], f"{key}.fn")
    kwargs = dict(_plain(block.get("kwargs")) or {})
    if isinstance(obj, type):
        try:
            fn = obj(**kwargs)
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"{key}.kwargs: {obj.__name__}(**{kwargs}) failed: {e}") from e
    else:
        fn = _bind(obj, kwargs) if kwargs else obj
    try:
        objective = Objective(name, float(block.get("min", 0.0)), float(block.get("max", 1.0)))
        weight = float(block.get("weight", 0.0))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{key}: min / max / weight: {e}") from e
    return ExtraReward(objective, weight, fn)


def _bind(fn: Callable, kwargs: dict) -> Callable:
    def bound(response, example):
        return fn(response, example, **kwargs)

    return bound


def from_config(blocks: Any) -> tuple[ExtraReward, ...]:
    """The added rewards of ``config.task.extra_rewards`` (a mapping name -> block), in the order
    of their names; ``ValueError`` naming the key of the first bad block."""
    blocks = _plain(blocks) or {}
    if not isinstance(blocks, Mapping):
        raise ValueError(f"{KEY}: expected a mapping {{objective name: block}}; got {blocks!r}")
    return tuple(_one(str(name), blocks[name]) for name in sorted(blocks))


def config_errors(blocks: Any) -> list[str]:
    """Config errors of ``config.task.extra_rewards`` (each naming its key); [] when valid."""
    errors = []
    blocks = _plain(blocks) or {}
    if not isinstance(blocks, Mapping):
        return [f"{KEY}: expected a mapping {{objective name: block}}; got {blocks!r}"]
    for name in sorted(blocks):
        try:
            _one(str(name), blocks[name])
        except ValueError as e:
            errors.append(str(e))
    return errors


class _WithExtraRewards:
    """Mixin placed before the task's class: appends the added objectives, weights and rewards."""

    _extra_rewards: tuple[ExtraReward, ...] = ()
    _base_class: type = Task

    @property
    def objectives(self) -> tuple[Objective, ...]:
        base = self.__dict__.get("_base_objectives")
        base = super().objectives if base is None else base
        return tuple(base) + tuple(r.objective for r in self._extra_rewards)

    @objectives.setter
    def objectives(self, value) -> None:  # a task that sets its objectives in __init__
        self.__dict__["_base_objectives"] = tuple(value)

    @property
    def scalar_weights(self) -> tuple[float, ...]:
        base = self.__dict__.get("_base_scalar_weights")
        base = super().scalar_weights if base is None else base
        return tuple(base) + tuple(r.weight for r in self._extra_rewards)

    @scalar_weights.setter
    def scalar_weights(self, value) -> None:
        self.__dict__["_base_scalar_weights"] = tuple(value)

    def _append(self, base: Any, response: Any, example: Any) -> np.ndarray:
        base = np.asarray(base, np.float32).reshape(-1)
        extra = np.array([r(response, example) for r in self._extra_rewards], np.float32)
        return np.concatenate([base, extra])

    def score(self, response, example) -> np.ndarray:
        return self._append(super().score(response, example), response, example)

    def score_answer(self, answer, example) -> np.ndarray:
        if self._base_class.score_answer is Task.score_answer:  # default: score, extras included
            return self.score(answer, example)
        return self._append(super().score_answer(answer, example), answer, example)


def with_extra_rewards(cls: type[Task], rewards: tuple[ExtraReward, ...]) -> type[Task]:
    """A subclass of ``cls`` whose instances score the added ``rewards`` after the task's own
    objectives (``cls`` itself when there are none)."""
    if not rewards:
        return cls
    attrs = {
        "_extra_rewards": tuple(rewards),
        "_base_class": cls,
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
    }
    return type(cls.__name__, (_WithExtraRewards, cls), attrs)


def check_names(task: Task) -> None:
    """``ValueError`` naming the block whose objective name the task already declares."""
    names = task.objective_names
    for k, name in enumerate(names):
        if name in names[:k]:
            raise ValueError(
                f"{KEY}.{name}: task {task.name!r} already has an objective {name!r}; "
                f"objectives: {list(names)}"
            )
