"""Task names: the built-in tasks by name, and any ``Task`` subclass by import path.

``config.task.name`` is a built-in name (``TASKS``) or ``"package.module:ClassName"``; both resolve to
a class here and take the same path from then on (``docs/custom_task.md``). A plain dict, no
mutable registry; classes are imported on first use.
"""

from __future__ import annotations

from typing import Any

from mojax.tasks.framework.base import Task

_TASK_CLASSES = {  # config.task.name -> (module, class) in mojax.tasks
    "calculator": ("calculator", "CalculatorTask"),
    "toolrl": ("toolrl", "ToolRLTask"),
    "math": ("math", "MathTask"),
    "qa": ("qa", "QATask"),
    "musique": ("musique", "MuSiQueTask"),
    "maze": ("maze_task", "MazeTask"),
    "bandit": ("bandit", "RouteBanditTask"),
}
TASKS = tuple(_TASK_CLASSES)


def task_class(name: str) -> type[Task]:
    """The ``Task`` subclass of ``config.task.name``: a built-in name (``TASKS``) or an import
    path ``"package.module:ClassName"``.

    Raises ``ValueError`` naming ``config.task.name`` when the name is unknown, the module does not
    import, the attribute is missing or it is not a ``Task`` subclass.
    """
    import importlib

    if name in _TASK_CLASSES:
        module, cls = _TASK_CLASSES[name]
        return getattr(importlib.import_module(f"mojax.tasks.{module}"), cls)
    if ":" not in name:
        raise ValueError(
            f"config.task.name={name!r} is not one of {list(TASKS)} nor an import path "
            "'package.module:ClassName'"
        )
    from mojax.tasks.framework.extra_rewards import resolve

    cls = resolve(name, "config.task.name")
    attr = name.partition(":")[2]
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(
            f"config.task.name={name!r}: {attr!r} is not a subclass of mojax.tasks.framework.base.Task"
        )
    return cls


def build_task(spec: Any) -> Task:
    """The task object of ``config.task`` (``mojax.spec.sections.TaskSpec``): constructor arguments
    from ``spec.kwargs``, with the objectives of ``spec.extra_rewards`` appended
    (``mojax.tasks.framework.extra_rewards``)."""
    from mojax.tasks.framework import extra_rewards

    kwargs = dict(spec.kwargs)
    cls = task_class(spec.name)
    added = extra_rewards.from_config(spec.extra_rewards or None)
    try:
        task = extra_rewards.with_extra_rewards(cls, added)(**kwargs)
    except TypeError as e:
        raise ValueError(f"config.task.kwargs {kwargs} do not fit {cls.__name__}: {e}") from e
    extra_rewards.check_names(task)
    return task
