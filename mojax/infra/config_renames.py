"""Config keys that moved, and the upgrade of a ``config.json`` written before they did.

A key is renamed once, here. An older workdir's ``config.json`` is read with its moved keys under
their new names (``upgrade``: ``mojax.infra.workdir.read_saved_config`` for resume,
``mojax.infra.logbook.read_config`` for export and eval), so it still resumes, and a ``workdir``
difference names the new key. A command line or config file that sets an old key is refused with
the new key named (``hint``; ``mojax.main``).

Renames:

* the engine owns its settings (2026-12-07): ``rollout.engine`` -> ``sampler.engine``; the continuous
  engine's ``rollout.{slots, kv_cache, page_size, num_pages, prefill_prompts, refill_slots}`` ->
  ``continuous.*`` (``mojax.sampling.continuous.config``).
"""

from __future__ import annotations

import copy
from typing import Any

#: old dotted config key -> new dotted config key
RENAMED: dict[str, str] = {
    "rollout.engine": "sampler.engine",
    **{
        f"rollout.{k}": f"continuous.{k}"
        for k in ("slots", "kv_cache", "page_size", "num_pages", "prefill_prompts", "refill_slots")
    },
}


def upgrade(tree: dict[str, Any]) -> dict[str, Any]:
    """A copy of a ``config.json`` tree with every old key of :data:`RENAMED` moved to its new key
    (a tree holding both keeps the new one's value; a tree holding neither is returned as is)."""
    out = copy.deepcopy(tree)
    for old, new in RENAMED.items():
        parent = _node(out, old.split(".")[:-1])
        leaf = old.rpartition(".")[2]
        if parent is None or leaf not in parent:
            continue
        value = parent.pop(leaf)
        target = out
        for part in new.split(".")[:-1]:
            target = target.setdefault(part, {})
        target.setdefault(new.rpartition(".")[2], value)
    return out


def _node(tree: dict, path: list[str]) -> dict | None:
    for part in path:
        tree = tree.get(part) if isinstance(tree, dict) else None
        if tree is None:
            return None
    return tree if isinstance(tree, dict) else None


def hint(key: str) -> str | None:
    """``"it is config.<new> now"`` for an old key (``"rollout.slots"`` or ``"config.rollout.slots"``,
    with or without leading dashes), else None."""
    bare = key.lstrip("-").removeprefix("config.").split("=", 1)[0]
    new = RENAMED.get(bare)
    return None if new is None else f"config.{bare} was renamed: it is config.{new} now"
