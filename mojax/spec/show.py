"""``--config.mode=show``: every key of a resolved config, its value and its one-line help.

The help of a key is the ``help`` metadata of the spec field that reads it
(``mojax.spec.help_texts``): the run-level keys, every section, the learner's ``ppo`` /
``optimizer`` and the sections the advantage methods declare. Keys inside a mapping-valued field
(``advantage.<keyword>``, ``model.overrides.<field>``, ``task.kwargs.<name>``) get their field's help.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mojax.spec import help_texts

__all__ = ["flatten", "help_for", "show"]


def help_for(key: str, helps: Mapping[str, str]) -> str:
    """The help of ``key``: its own, else that of the nearest enclosing key."""
    while key:
        if key in helps:
            return helps[key]
        key = key.rpartition(".")[0]
    return ""


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key → leaf value of a (nested) ``ConfigDict`` / mapping; an empty section is one
    leaf ``{}``."""
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        elif isinstance(value, Mapping):
            out[path] = {}
        else:
            out[path] = value
    return out


def show(config: Any) -> str:
    """One line per leaf key of ``config``, sorted: ``key = value  # help``."""
    helps = help_texts()
    rows = [(k, repr(v), help_for(k, helps)) for k, v in sorted(flatten(config).items())]
    width = max((len(k) + len(v) + 3 for k, v, _ in rows), default=0)
    lines = []
    for key, value, text in rows:
        line = f"{key} = {value}"
        lines.append(f"{line:<{width}}  # {text}" if text else line)
    return "\n".join(lines) + "\n"
