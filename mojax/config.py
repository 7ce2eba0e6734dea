"""Config validation: unknown keys, wrong types and impossible combinations fail before compiling.

Configs are ``ml_collections.ConfigDict`` objects built by ``configs/<method>.py:get_config(arg)`` and
locked, so a typo in ``--config.ppo.clip_hihg=0.3`` already fails in ``config_flags`` with the key named.
This module adds the checks a lock cannot express: allowed values, ranges, estimator keyword arguments and
cross-field combinations. Every failure is a :class:`ConfigError` whose message names the key (dotted
path) and what is allowed; all failures of a config are reported together.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type, out of range or inconsistent with another."""


@dataclasses.dataclass
class Checker:
    """Collects config errors so that one run reports all of them at once."""

    config: Any
    errors: list[str] = dataclasses.field(default_factory=list)

    def get(self, path: str) -> Any:
        """Value at a dotted ``path``; records an error (and returns None) if a key is missing."""
        node = self.config
        for part in path.split("."):
            try:
                node = node[part]
            except (KeyError, TypeError):
                self.errors.append(f"config.{path}: missing (required key)")
                return None
        return node

    def fail(self, path: str, message: str) -> None:
        self.errors.append(f"config.{path}: {message}")

    def choice(self, path: str, allowed: Iterable[Any]) -> Any:
        """The value at ``path`` must be one of ``allowed``."""
        value = self.get(path)
        allowed = list(allowed)
        if value is not None and value not in allowed:
            hint = _did_you_mean(value, allowed)
            self.fail(path, f"{value!r} is not allowed; allowed values: {allowed}{hint}")
        return value

    def typed(self, path: str, types: type | tuple[type, ...]) -> Any:
        value = self.get(path)
        if value is not None and (isinstance(value, bool) and bool not in _as_tuple(types)):
            self.fail(path, f"expected {_type_names(types)}, got bool {value!r}")
        elif value is not None and not isinstance(value, types):
            self.fail(path, f"expected {_type_names(types)}, got {type(value).__name__} {value!r}")
        return value

    def in_range(
        self,
        path: str,
        low: float | None = None,
        high: float | None = None,
        *,
        low_inclusive: bool = True,
        high_inclusive: bool = True,
    ) -> Any:
        """The numeric value at ``path`` must lie in the given (half-)open or closed interval."""
        value = self.typed(path, (int, float))
        if value is None or isinstance(value, bool):
            return value
        ok = True
        if low is not None:
            ok &= value >= low if low_inclusive else value > low
        if high is not None:
            ok &= value <= high if high_inclusive else value < high
        if not ok:
            lo = "(-inf" if low is None else f"{'[' if low_inclusive else '('}{low}"
            hi = "inf)" if high is None else f"{high}{']' if high_inclusive else ')'}"
            self.fail(path, f"{value!r} is out of range {lo}, {hi}")
        return value

    def kwargs_for(self, path: str, fn: Callable[..., Any], *, skip: Iterable[str] = ()) -> None:
        """Every key of the mapping at ``path`` must be a keyword argument of ``fn``."""
        kwargs = self.get(path)
        if kwargs is None:
            return
        allowed = keyword_names(fn, skip=skip)
        for key in dict(kwargs):
            if key not in allowed:
                hint = _did_you_mean(key, allowed)
                self.fail(
                    f"{path}.{key}",
                    f"unknown keyword of {fn.__name__}; allowed keys: {sorted(allowed)}{hint}",
                )

    def require(self, condition: bool, path: str, message: str) -> None:
        """A cross-field rule: records ``message`` against ``path`` when ``condition`` is False."""
        if not condition:
            self.fail(path, message)

    def raise_if_any(self) -> None:
        if self.errors:
            lines = "\n  ".join(self.errors)
            raise ConfigError(f"invalid config ({len(self.errors)} problem(s)):\n  {lines}")


def dataclass_from_config(cls: type, cfg: Any, section: str) -> Any:
    """``cls(**cfg)`` for a ConfigDict / mapping; unknown keys raise naming ``section`` and the
    dataclass fields (e.g. ``unknown ppo key(s) ['clip_hihg']; allowed: [...]``)."""
    d = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {section} key(s) {unknown}; allowed: {sorted(known)}")
    return cls(**d)


def keyword_names(fn: Callable[..., Any], *, skip: Iterable[str] = ()) -> set[str]:
    """Names that ``fn`` accepts as keyword arguments (excluding ``skip``)."""
    params = inspect.signature(fn).parameters.values()
    names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - set(
        skip
    )
    return names


def to_dict(config: Any) -> dict[str, Any]:
    """A plain (recursively converted) dict of a ConfigDict or mapping."""
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if isinstance(config, Mapping):
        return {k: to_dict(v) for k, v in config.items()}
    return config


def _did_you_mean(value: Any, allowed: list[Any]) -> str:
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in _as_tuple(types))


_DTYPES = ("float32", "bfloat16", "float16")
_TASKS = ("calculator", "toolrl", "math", "qa", "musique", "maze")
_SET_ESTIMATORS = ("vpo", "multi_rlvr")
_ESTIMATOR_DATA_ARGS = ("rewards", "valid", "set_rewards", "set_valid", "key")


def validate(config: Any) -> None:
    """Checks a run config (``mojax.defaults.base_config`` schema) before anything is built.

    Raises:
      ConfigError: listing every problem, each naming its key and the allowed values.
    """
    from mojax.advantages import ESTIMATORS
    from mojax.models import QwenConfig
    from mojax.pareto import NO_SUCCESS_MODES, STAGE1_MODES
    from mojax.rl.losses import AGGREGATIONS, KL_TYPES
    from mojax.rl.state import SCHEDULES

    c = Checker(config)
    c.choice("mode", ["train", "eval"])
    c.typed("dry_run", bool)
    c.typed("seed", int)
    c.in_range("steps", 0)
    for key in ("checkpoint_every", "eval_every", "keep_checkpoints", "log_every"):
        c.in_range(key, 1)
    # model / tokenizer
    c.choice("model.dtype", _DTYPES)
    c.choice("model.param_dtype", _DTYPES)
    c.choice("model.cache_dtype", ("",) + _DTYPES)
    c.choice("model.remat", ["none", "full", "dots"])
    fields = {f.name for f in dataclasses.fields(QwenConfig)}
    for key in dict(c.get("model.overrides") or {}):
        if key not in fields:
            c.fail(f"model.overrides.{key}", f"not a QwenConfig field; fields: {sorted(fields)}")
    if not c.get("model.checkpoint"):
        from mojax.models import VARIANTS

        c.choice("model.variant", sorted(VARIANTS))
    c.require(
        c.get("tokenizer.path") != "" or bool(c.get("model.checkpoint")),
        "tokenizer.path",
        "'' (the checkpoint's tokenizer) needs model.checkpoint; use 'build' or a path",
    )
    # task / rollout
    task = c.choice("task.name", _TASKS)
    c.in_range("task.num_answers", 0)
    c.in_range("task.num_eval", 1)
    for key in (
        "prompts_per_step",
        "num_samples",
        "max_new_tokens",
        "max_response_len",
        "max_turns",
        "tool_workers",
    ):
        c.in_range(f"rollout.{key}", 1)
    c.in_range("rollout.max_tool_calls", 0)
    c.in_range("rollout.max_prompt_len", 0)
    c.in_range("rollout.temperature", 0.0)
    c.in_range("rollout.top_p", 0.0, 1.0, low_inclusive=False)
    c.in_range("rollout.top_k", 0)
    c.in_range("rollout.tool_timeout_s", 0.0, low_inclusive=False)
    c.require(
        (c.get("rollout.max_response_len") or 0) >= (c.get("rollout.max_new_tokens") or 0),
        "rollout.max_response_len",
        "must be >= rollout.max_new_tokens (it holds every turn and observation)",
    )
    # estimator
    est = c.choice("estimator", sorted(ESTIMATORS))
    if est in ESTIMATORS:
        c.kwargs_for("advantage", ESTIMATORS[est], skip=_ESTIMATOR_DATA_ARGS)
        sets = (c.get("task.num_answers") or 0) > 0
        c.require(
            sets == (est in _SET_ESTIMATORS),
            "task.num_answers",
            f"estimator {est!r} needs {'task.num_answers > 0 (multi-answer sets)' if est in _SET_ESTIMATORS else 'task.num_answers = 0 (single answers)'}",
        )
        if est == "awpo":
            kw = dict(c.get("task.kwargs") or {})
            c.require(
                task == "toolrl" and kw.get("mode") == "awpo",
                "task",
                "estimator 'awpo' needs (R_out, R_reason): task.name='toolrl' with "
                "task.kwargs.mode='awpo'",
            )
    c.choice("tool_reward.no_success", NO_SUCCESS_MODES)
    c.in_range("tool_reward.alpha", 0.0)
    # ParetoPO
    if c.get("paretopo.enabled"):
        c.require(
            est == "pareto_rank",
            "estimator",
            "ParetoPO (paretopo.enabled) uses 'pareto_rank' in Stage 2",
        )
        c.choice("paretopo.mode", STAGE1_MODES)
        c.choice("paretopo.reference", ["initial", "zeros"])
        c.choice("paretopo.stage1_estimator", ["grpo", "dr_grpo"])
        c.in_range("paretopo.stage1_steps", 0)
        c.in_range("paretopo.gamma", 0.0, 1.0, high_inclusive=False)
        c.in_range("paretopo.validate_every", 1)
    # DAPO
    c.in_range("dapo.overlong_buffer", 0)
    c.in_range("dapo.max_refill_rounds", 0)
    c.require(
        (c.get("dapo.overlong_buffer") or 0) <= (c.get("rollout.max_response_len") or 0),
        "dapo.overlong_buffer",
        "must be <= rollout.max_response_len",
    )
    # PPO / optimizer
    c.choice("ppo.agg", AGGREGATIONS)
    c.choice("ppo.kl_type", KL_TYPES)
    c.in_range("ppo.clip_low", 0.0, 1.0, high_inclusive=False)
    c.in_range("ppo.clip_high", 0.0)
    for key in ("ppo_epochs", "num_minibatches", "num_microbatches"):
        c.in_range(f"ppo.{key}", 1)
    rows = (c.get("rollout.prompts_per_step") or 1) * (c.get("rollout.num_samples") or 1)
    div = (c.get("ppo.num_minibatches") or 1) * (c.get("ppo.num_microbatches") or 1)
    c.require(
        rows % div == 0,
        "ppo.num_minibatches",
        f"B = prompts_per_step * num_samples = {rows} must be divisible by num_minibatches * "
        f"num_microbatches = {div}",
    )
    c.choice("optimizer.schedule", SCHEDULES)
    c.in_range("optimizer.learning_rate", 0.0)
    # SFT / eval / judge / mesh
    c.in_range("sft.steps", 0)
    c.in_range("sft.batch_size", 1)
    c.in_range("eval.num_samples", 1)
    c.in_range("eval.temperature", 0.0)
    c.choice("eval.split", ["validation", "test"])
    c.choice("judge.kind", ["overlap", "http", "model"])
    for axis in ("data", "fsdp", "tensor"):
        v = c.typed(f"mesh.{axis}", int)
        if isinstance(v, int) and not isinstance(v, bool) and v < 1 and v != -1:
            c.fail(f"mesh.{axis}", f"{v} must be a positive int or -1 (the remaining devices)")
    c.raise_if_any()
