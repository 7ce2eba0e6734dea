"""A run's examples (``Splits``) and the two default ways a task loads them.

* **From files** (``task.train_path``; ``task.eval_path`` for the test split and ``task.val_path``
  for validation, each carved from the training file when not given, disjoint):
  ``task.load(path)``.
* **Generated** (no ``train_path``, a task with ``load(split, num, seed=...)``): each split drawn by
  the task from its own stream.

``Task.load_splits`` picks one of them; generated built-in tasks (calculator, maze) override it.
``spec`` is the run's ``config.task`` section (``mojax.spec.sections.TaskSpec``).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any

from mojax.tasks.framework.types import Example


@dataclasses.dataclass
class Splits:
    """A run's examples; ``task``: the task object they were loaded for."""

    train: list[Example]
    validation: list[Example]
    test: list[Example]
    task: Any = None

    @property
    def all(self) -> list[Example]:
        return self.train + self.validation + self.test


def generates(task: Any) -> bool:
    """Whether ``task.load`` draws a split (``load(split, num, seed=...)``) rather than reading a
    file (``load(path)``)."""
    try:
        params = inspect.signature(task.load).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return "num" in params and "seed" in params


def default_splits(task: Any, spec: Any, seed: int) -> Splits:
    """Files when ``spec.train_path`` is set, else the task's own ``load(split, num, seed=...)``."""
    if spec.train_path:
        return file_splits(task, spec)
    if generates(task):
        return generated_splits(task, spec, seed)
    raise ValueError(
        f"config.task.train_path: task {spec.name!r} reads its data from a file (or implements "
        "load(split, num, seed=...) to generate it; docs/custom_task.md)"
    )


def validation_size(spec: Any) -> int:
    """Problems of the validation split: ``spec.num_validation``, or ``spec.num_eval`` when it is
    0 or absent (a task section, a ConfigDict or any object with those attributes)."""
    return int(getattr(spec, "num_validation", 0) or spec.num_eval)


def generated_splits(task: Any, spec: Any, seed: int) -> Splits:
    """Each split from the task's ``load(split, num, seed=seed)``."""
    out = {}
    for split, num in (
        ("train", int(spec.num_train)),
        ("validation", validation_size(spec)),
        ("test", int(spec.num_eval)),
    ):
        try:
            examples = list(task.load(split, num, seed=seed))
        except Exception as e:  # noqa: BLE001 - report which protocol call failed
            raise ValueError(
                f"config.task.name={spec.name!r}: load({split!r}, {num}, seed={seed}) failed "
                f"({type(e).__name__}: {e}); a task without task.train_path implements "
                "load(split, num, seed=...) -> list[Example] (docs/custom_task.md)"
            ) from e
        if not examples or not all(isinstance(x, Example) for x in examples):
            raise ValueError(
                f"config.task.name={spec.name!r}: load({split!r}, ...) must return a non-empty "
                "list of mojax.tasks.framework.base.Example"
            )
        out[split] = examples
    return Splits(out["train"], out["validation"], out["test"], task)


def file_splits(task: Any, spec: Any) -> Splits:
    """Training, validation and test examples from files; the three are disjoint.

    * test: the first ``num_eval`` examples of ``spec.eval_path``, or without it the last
      ``num_eval`` training examples;
    * validation (ParetoPO's ``v_t``, model selection): the first ``validation_size`` examples
      (``num_validation`` or ``num_eval``) of ``spec.val_path`` when set, else the last
      ``validation_size`` of the remaining training examples, so nothing is selected on the test set;
    * train: the rest. Without ``eval_path`` at most a third of the file goes to each held-out
      split.
    """
    n_eval = int(spec.num_eval)
    train = unique_ids(load_file(task, spec.train_path, "task.train_path"))
    held_out = 1 + (not spec.eval_path) - bool(spec.val_path)  # splits carved from train
    if len(train) < held_out + 1:
        raise ValueError(
            f"config.task.train_path: need >= {held_out + 1} examples to carve {held_out} held-out "
            f"split(s) from; got {len(train)}"
        )
    n = min(n_eval, len(train) // (held_out + 1))
    n_val = min(validation_size(spec), len(train) // (held_out + 1))
    if spec.eval_path:
        test = load_file(task, spec.eval_path, "task.eval_path")[:n_eval]
        test = unique_ids(test, taken={ex.id for ex in train}, prefix="eval:")
    else:
        train, test = train[:-n], train[-n:]
    if spec.val_path:
        validation = load_file(task, spec.val_path, "task.val_path")[: validation_size(spec)]
        taken = {ex.id for ex in train} | {ex.id for ex in test}
        validation = unique_ids(validation, taken=taken, prefix="val:")
    else:
        train, validation = train[:-n_val], train[-n_val:]
    return Splits(train, validation, test, task)


def unique_ids(
    examples: list[Example], taken: set[str] = frozenset(), prefix: str = ""
) -> list[Example]:
    """``examples`` with ids unique within the list and apart from ``taken`` (another split's).

    Files number their records themselves (``id`` fields; a train and an eval file both count
    0..N), and the id keys the per-prompt state (``N_optimal``). The first use of an id keeps it; a
    repeat becomes ``<id>#<k>`` (the k-th use); an id in ``taken`` gets ``prefix``. Files whose ids
    are unique already are returned unchanged."""
    out, seen = [], set(taken)
    for ex in examples:
        base = f"{prefix}{ex.id}" if ex.id in taken else ex.id
        new, k = base, 1
        while new in seen:
            k += 1
            new = f"{base}#{k}"
        seen.add(new)
        out.append(ex if new == ex.id else dataclasses.replace(ex, id=new))
    return out


def load_file(task: Any, path: str, key: str) -> list[Example]:
    """``task.load(path)``; a missing file is a ``FileNotFoundError`` naming ``config.<key>``."""
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"config.{key}: no file at {path!r}")
    return list(task.load(path))
