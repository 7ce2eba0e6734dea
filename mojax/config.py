"""Config checking helpers: unknown keys, wrong types and impossible combinations fail before compiling.

Configs are ``ml_collections.ConfigDict`` objects built by ``configs/<method>.py:get_config(arg)`` and
locked, so a typo in ``--config.ppo.clip_hihg=0.3`` already fails in ``config_flags`` with the key named.
This module holds the machinery for the checks a lock cannot express (allowed values, ranges, keyword
arguments, cross-field rules) and for the spec dataclasses that read a config: :func:`option` declares a
field with its config key and help text (``--config.mode=show`` prints it), :func:`section_from_config`
reads every field of a spec from its key. The rules themselves live in the frozen specs of
:mod:`mojax.spec` (and the sections their owners declare), and :func:`mojax.spec.validate` runs
them all. This module imports nothing from ``mojax``. Every failure is a :class:`ConfigError` whose
message names the key (dotted path) and what is allowed; all failures of a config are reported
together.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type, out of range or inconsistent with another.

    ``errors`` lists every problem (one line each, starting with the ``config.`` key).
    """

    def __init__(self, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = list(errors) if errors is not None else [message]

    @classmethod
    def of(cls, errors: list[str]) -> ConfigError:
        lines = "\n  ".join(errors)
        return cls(f"invalid config ({len(errors)} problem(s)):\n  {lines}", errors)


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
        finite: bool = False,
    ) -> Any:
        """The numeric value at ``path`` must lie in the given (half-)open or closed interval
        (and, with ``finite``, be neither infinite nor NaN)."""
        value = self.typed(path, (int, float))
        if value is None or isinstance(value, bool):
            return value
        if finite and not math.isfinite(value):
            self.fail(path, f"{value!r} is not a finite number")
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
            raise ConfigError.of(self.errors)


def spec_checker(section: str, spec: Any) -> Checker:
    """A :class:`Checker` over a spec dataclass's fields, naming them ``config.<section>.<field>``."""
    return Checker({section: {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}})


def dataclass_from_config(cls: type, cfg: Any, section: str) -> Any:
    """``cls(**cfg)`` for a ConfigDict / mapping; unknown keys raise naming ``section`` and the
    dataclass fields (e.g. ``unknown ppo key(s) ['clip_hihg']; allowed: [...]``)."""
    d = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {section} key(s) {unknown}; allowed: {sorted(known)}")
    return cls(**d)


def option(default: Any = dataclasses.MISSING, *, help: str) -> Any:
    """A spec dataclass field read from config key ``<SECTION>.<field name>`` (the field's path in
    the run spec is its config key) whose ``help`` is the one-line description ``--config.mode=show``
    prints. ``default`` is the key's one declared default (``mojax.defaults`` builds the base config
    from it); a mapping default is copied for each instance. A field without one is keyword-only
    (it may follow fields with defaults) and its value comes from the recipe (``mojax.defaults``)."""
    if isinstance(default, Mapping):
        frozen = copy.deepcopy(dict(default))
        return dataclasses.field(
            default_factory=lambda: copy.deepcopy(frozen), metadata={"help": help}
        )
    kw_only = default is dataclasses.MISSING
    return dataclasses.field(default=default, metadata={"help": help}, kw_only=kw_only)


def field_key(cls: type, field: dataclasses.Field) -> str:
    """The dotted config key a spec field reads: ``SECTION.name`` (``name`` at the top level)."""
    section = getattr(cls, "SECTION", "")
    return f"{section}.{field.name}" if section else field.name


def option_fields(cls: type) -> list[dataclasses.Field]:
    """The :func:`option` fields of the spec class ``cls`` (those read from a config key)."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def field_default(field: dataclasses.Field) -> Any:
    """The declared default of an :func:`option` field (a fresh copy of a mapping), else
    ``dataclasses.MISSING``."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def field_help(cls: type) -> dict[str, str]:
    """``{config key: help}`` of every :func:`option` field of the spec class ``cls``."""
    return {field_key(cls, f): f.metadata["help"] for f in option_fields(cls)}


def field_defaults(cls: type) -> dict[str, Any]:
    """``{config key: default}`` of every :func:`option` field of ``cls`` that declares one."""
    out = {}
    for f in option_fields(cls):
        default = field_default(f)
        if default is not dataclasses.MISSING:
            out[field_key(cls, f)] = default
    return out


def lookup(config: Any, key: str) -> Any:
    """The value at dotted ``key`` of a ConfigDict / mapping (``KeyError`` naming the key)."""
    node = config
    for part in key.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError):
            raise KeyError(f"config.{key}: missing (required key)") from None
    return to_dict(node)


def section_from_config(cls: type, config: Any, **extra: Any) -> Any:
    """``cls`` with every :func:`option` field read from its config key; ``extra`` gives the others
    (derived values). A missing key is a ``KeyError`` naming it."""
    values = {
        f.name: lookup(config, field_key(cls, f)) for f in option_fields(cls) if f.name not in extra
    }
    return cls(**values, **extra)


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
