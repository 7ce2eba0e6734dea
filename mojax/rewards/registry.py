"""The reward sources by the objective they fill, how a run builds them, and their state in the
host state.

``SOURCES`` maps an external objective's name to its source class. :func:`build_sources` builds the
sources a task's external objectives need from the run's settings; an advantage method declares
the sources it reads (``Method.reward_sources``) and :func:`build_sources` refuses a run whose task
gives it neither the source nor its objective. A source's carried state lives in
``HostState.reward_state[<source name>][<split>]`` (JSON data; ``train`` and ``validation`` are
carried across steps, evaluation starts fresh each time): :func:`split_states` and
:func:`with_split_states` read and write one split's states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mojax.rewards.judge import JudgeSource
from mojax.rewards.source import RewardSource
from mojax.rewards.tool_efficiency import ToolEfficiency, n_opt_errors
from mojax.tasks.framework.base import Task

SOURCES: dict[str, type[RewardSource]] = {
    cls.objective: cls for cls in (ToolEfficiency, JudgeSource)
}


def missing_source_error(task: Task, objective: str) -> str:
    """The error of a batch whose external ``objective`` has no source."""
    cls = SOURCES.get(objective)
    known = f" ({cls.name}: {cls.description})" if cls is not None else ""
    return (
        f"task {task.name!r} has the external objective {objective!r} but no reward source fills "
        f"it{known}"
    )


def build_sources(
    task: Task,
    *,
    reward_spec: Any = None,
    judge: Any = None,
    judge_budget: Any = None,
    method: str = "",
    method_sources: Sequence[str] = (),
) -> tuple[RewardSource, ...]:
    """The sources of ``task``'s external objectives: ``r_tool`` from ``reward_spec``
    (``config.tool_reward``), ``r_reason`` from ``judge`` (None: no judge, so none) within
    ``judge_budget``. ``method_sources``: the sources the advantage ``method`` declares; each must be
    built here or its objective scored by the task itself, else ``ValueError``."""
    out: list[RewardSource] = []
    for name in task.external_objectives:
        if name == ToolEfficiency.objective and reward_spec is not None:
            out.append(ToolEfficiency.from_spec(reward_spec))
        elif name == JudgeSource.objective and judge is not None:
            out.append(JudgeSource(judge, judge_budget))
    built = {s.name for s in out}
    own = set(task.objective_names) - set(task.external_objectives)
    by_name = {cls.name: cls for cls in SOURCES.values()}
    for name in method_sources:
        cls = by_name.get(name)
        if cls is None:
            raise ValueError(f"estimator {method!r} declares an unknown reward source {name!r}")
        if name not in built and cls.objective not in own:
            raise ValueError(
                f"estimator {method!r} needs the reward source {name!r} ({cls.description}): "
                f"task {task.name!r} declares no {cls.objective!r} objective it can fill"
            )
    return tuple(out)


def option_errors(task: Task, options: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Config errors of reward-source options (``{config key: {option: value}}``) for ``task``: a
    fixed ``n_opt`` needs the task's rule (:func:`mojax.rewards.tool_efficiency.n_opt_errors`)."""
    errors = []
    for key, opts in options.items():
        if "n_opt" in opts:
            errors += n_opt_errors(task, key, opts["n_opt"])
    return errors


def with_options(
    sources: Sequence[RewardSource], options: Mapping[str, Any] | None
) -> tuple[RewardSource, ...]:
    """``sources`` with one rollout's options (e.g. ``n_opt``) applied to those that have them."""
    if not options:
        return tuple(sources)
    return tuple(s.with_options(options) for s in sources)


def split_states(reward_state: Mapping[str, Any], split: str) -> dict[str, Any]:
    """``{source name: state}`` of one split."""
    return {name: s[split] for name, s in reward_state.items() if split in s}


def with_split_states(
    reward_state: Mapping[str, Any], split: str, states: Mapping[str, Any]
) -> dict[str, Any]:
    """``reward_state`` with one split's states replaced by ``states`` (a new dict; a source absent
    from ``states`` loses its state of ``split``)."""
    out = {name: {k: v for k, v in s.items() if k != split} for name, s in reward_state.items()}
    for name, state in states.items():
        out.setdefault(name, {})[split] = state
    return {name: s for name, s in out.items() if s}


# the keys of the host state (and of an in-flight rollout's host fields) written before the reward
# sources: the tool-efficiency source's N_optimal tables of the training and validation splits
_LEGACY_TABLES = {"tracker": "train", "val_tracker": "validation"}


def migrate_host_dict(d: Mapping[str, Any]) -> dict[str, Any]:
    """A host-state dict (``HostState.to_dict``, or an in-flight rollout's host fields) in the
    current layout: an older one's ``tracker`` / ``val_tracker`` become ``reward_state[
    "tool_efficiency"]["train" / "validation"]`` (empty tables are dropped: a source without state
    starts from an empty one). A current dict, or one with neither old key, is returned as is."""
    if "reward_state" in d or not set(_LEGACY_TABLES) & set(d):
        return dict(d)
    out = {k: v for k, v in d.items() if k not in _LEGACY_TABLES}
    tables = {
        split: d[k] for k, split in _LEGACY_TABLES.items() if (d.get(k) or {}).get("prompt_ids")
    }
    out["reward_state"] = {ToolEfficiency.name: tables} if tables else {}
    return out


# an in-flight rollout's per-sample arrays written before the per-objective validity mask: the
# judge's validity of the reasoning objective, bool [P, G]
LEGACY_EPISODE_KEYS = ("reason_valid",)


def legacy_objective_valid(arrays: Mapping[str, np.ndarray], num_objectives: int):
    """The per-objective validity mask ``[P, G, M]`` of an older in-flight rollout's arrays (None
    when it has none): its judge validity ``[P, G]`` applied to every objective. Only a method that
    declared the judge's mask reads it (``Method.validity_inputs``), and it reads that column."""
    old = arrays.get("reason_valid")
    if old is None:
        return None
    return np.repeat(np.asarray(old, bool)[..., None], num_objectives, axis=-1)
