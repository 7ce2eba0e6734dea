"""The typed run spec: one frozen object built once from a run config, validated before anything runs.

``validate(config)`` (what ``mojax.rl.trainer.run`` calls, once) reads the ``ml_collections`` config of
``configs/<method>.py`` into a :class:`RunSpec`: one frozen section per concern
(``mojax.spec.sections``), the learner's ``PPOConfig`` / ``OptimizerConfig``, and the config sections
the advantage methods declare (``Method.sections``). Each field carries its config key and help
text (``mojax.config.option``; ``--config.mode=show`` prints them); each section checks its own
fields, and :func:`run_errors` the rules that span sections (the task's declared objectives, the
method's inputs, the mesh against the devices and the model). Every error names its ``config.`` key
and the allowed values; all of a config's errors are reported together, before anything is built
or compiled. Everything after validation reads the spec, never the config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from mojax import advantages as adv_lib
from mojax import sharding
from mojax.config import (
    Checker,
    ConfigError,
    dataclass_from_config,
    field_defaults,
    field_help,
    option,
    section_from_config,
    to_dict,
)
from mojax.learner import CorrectionConfig, OptimizerConfig, PPOConfig
from mojax.spec import sections as S
from mojax.spec.rules import run_errors
from mojax.tasks.framework import registry

MODES = ("train", "eval", "show")  # show: print the resolved config with its help and exit
RESUME_MODES = ("", "force", "new")
MAX_SEED = 2**32 - 1


@dataclasses.dataclass(frozen=True)
class AdvantageSpec:
    """``config.estimator`` + ``config.advantage``: the method and its keywords, and the config
    sections the methods declare (``sections[name]``)."""

    SECTION: ClassVar[str] = ""
    estimator: str = option(help="a name of mojax.advantages.METHODS", key="estimator")
    kwargs: dict = option(help="the estimator's keyword arguments", key="advantage")
    sections: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        c = Checker({"estimator": self.estimator, "advantage": self.kwargs})
        est = c.choice("estimator", sorted(adv_lib.METHODS))
        if est in adv_lib.METHODS:
            method = adv_lib.METHODS[est]
            c.kwargs_for("advantage", method.fn, skip=method.data_args)
        for name, section in self.sections.items():
            owner = _section_owner(name)
            if getattr(section, "enabled", False) and est != owner:
                c.fail("estimator", f"{name}.enabled needs estimator {owner!r} (got {est!r})")
        c.raise_if_any()

    @property
    def method(self) -> adv_lib.Method:
        return adv_lib.METHODS[self.estimator]

    @property
    def fn(self) -> Callable[..., Any]:
        return self.method.fn

    def enabled_sections(self) -> list[str]:
        return [n for n, s in self.sections.items() if getattr(s, "enabled", False)]


def _section_owner(name: str) -> str:
    """The method that declares config section ``name``."""
    return next(m.name for m in adv_lib.METHODS.values() if name in _names(m.sections))


def _names(section_classes) -> list[str]:
    return [cls.SECTION for cls in section_classes]


def method_sections() -> dict[str, type]:
    """Every config section an advantage method declares, by name."""
    return {cls.SECTION: cls for m in adv_lib.METHODS.values() for cls in m.sections}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything a run reads from its config, validated (see the module docstring)."""

    SECTION: ClassVar[str] = ""
    seed: int = option(help="seed of every random stream of the run (data, init, sampling)")
    steps: int = option(help="RL steps (rollout batch -> advantages -> PPO update(s))")
    mode: str = option(help='"train" | "eval" (a checkpoint on a held-out split) | "show"')
    dry_run: bool = option(help="compile the steps abstractly and print memory per device")
    checkpoint_every: int = option(help="checkpoint every N RL steps (and at the end)")
    keep_checkpoints: int = option(help="RL checkpoints kept")
    eval_every: int = option(help="held-out evaluation every N RL steps (and at the end)")
    transcripts_per_step: int = option(help="sampled transcripts written per step")
    resume: str = option(help='rerunning a workdir: "" (same config only) | "force" | "new"')
    preemption_grace_s: float = option(
        30.0, help="seconds between the scheduler's SIGTERM and SIGKILL (mojax.infra.preemption)"
    )
    model: S.ModelSpec = None
    tokenizer: S.TokenizerSpec = None
    task: S.TaskSpec = None
    rollout: S.RolloutSpec = None
    reward: S.RewardSpec = None
    advantage: AdvantageSpec = None
    ppo: PPOConfig = None
    rollout_correction: CorrectionConfig = None
    optimizer: OptimizerConfig = None
    sft: S.SFTSpec = None
    eval: S.EvalSpec = None
    judge: S.JudgeSpec = None
    wandb: S.WandbSpec = None
    mesh: S.MeshSpec = None
    lora: S.LoraSpec = None
    packing: S.PackingSpec = None
    resolved: dict = dataclasses.field(default_factory=dict)  # the config's values (config.json)

    def __post_init__(self):
        c = Checker({})
        if self.mode not in MODES:
            c.fail("mode", f"{self.mode!r} is not allowed; allowed values: {list(MODES)}")
        if self.resume not in RESUME_MODES:
            c.fail(
                "resume", f"{self.resume!r} is not allowed; allowed values: {list(RESUME_MODES)}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            c.fail("seed", f"expected int, got {type(self.seed).__name__} {self.seed!r}")
        elif not 0 <= self.seed <= MAX_SEED:
            c.fail("seed", f"{self.seed} is out of range [0, {MAX_SEED}] (numpy's seed range)")
        if self.steps < 0:
            c.fail("steps", f"{self.steps} is out of range [0, inf)")
        if not (isinstance(self.preemption_grace_s, int | float) and self.preemption_grace_s > 0):
            c.fail("preemption_grace_s", f"{self.preemption_grace_s!r} must be a number > 0")
        for key in ("checkpoint_every", "eval_every", "keep_checkpoints"):
            if getattr(self, key) < 1:
                c.fail(key, f"{getattr(self, key)} is out of range [1, inf)")
        c.raise_if_any()

    @property
    def rules(self) -> tuple:
        """The logical axis rules of the run's mesh."""
        return sharding.check_rules(self.mesh.logical_axis_rules)

    def build_task(self):
        """The task object of ``config.task`` (no data loaded)."""
        return registry.build_task(self.task)


# config section builders: name -> (config -> section)
_SECTIONS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("model", lambda c: section_from_config(S.ModelSpec, c)),
    ("tokenizer", lambda c: section_from_config(S.TokenizerSpec, c)),
    ("task", lambda c: section_from_config(S.TaskSpec, c)),
    ("rollout", lambda c: section_from_config(S.RolloutSpec, c)),
    (
        "reward",
        lambda c: section_from_config(
            S.RewardSpec, c, max_response_len=int(c.rollout.max_response_len)
        ),
    ),
    (
        "advantage",
        lambda c: section_from_config(
            AdvantageSpec,
            c,
            sections={n: section_from_config(cls, c) for n, cls in method_sections().items()},
        ),
    ),
    ("ppo", lambda c: dataclass_from_config(PPOConfig, c.ppo, "ppo")),
    (
        "rollout_correction",
        lambda c: dataclass_from_config(
            CorrectionConfig, c.rollout_correction, "rollout_correction"
        ),
    ),
    ("optimizer", lambda c: dataclass_from_config(OptimizerConfig, c.optimizer, "optimizer")),
    ("sft", lambda c: section_from_config(S.SFTSpec, c)),
    ("lora", lambda c: section_from_config(S.LoraSpec, c)),
    ("packing", lambda c: section_from_config(S.PackingSpec, c)),
    ("eval", lambda c: section_from_config(S.EvalSpec, c)),
    ("judge", lambda c: section_from_config(S.JudgeSpec, c)),
    ("wandb", lambda c: section_from_config(S.WandbSpec, c)),
    (
        "mesh",
        lambda c: section_from_config(
            S.MeshSpec, c, logical_axis_rules=_optional(c, "logical_axis_rules")
        ),
    ),
)


def _optional(config: Any, key: str) -> Any:
    value = config.get(key) if hasattr(config, "get") else None
    return tuple(tuple(r) for r in value) if value else ()


def _spec_classes() -> tuple[type, ...]:
    return (
        RunSpec,
        AdvantageSpec,
        S.ModelSpec,
        S.TokenizerSpec,
        S.TaskSpec,
        S.RolloutSpec,
        S.RewardSpec,
        PPOConfig,
        CorrectionConfig,
        OptimizerConfig,
        S.SFTSpec,
        S.EvalSpec,
        S.JudgeSpec,
        S.WandbSpec,
        S.MeshSpec,
        S.LoraSpec,
        S.PackingSpec,
        *method_sections().values(),
    )


def help_texts() -> dict[str, str]:
    """``{config key: help}`` of every spec field (what ``--config.mode=show`` prints)."""
    out: dict[str, str] = {}
    for cls in _spec_classes():
        out |= field_help(cls)
    return out


def key_defaults() -> dict[str, Any]:
    """``{config key: default}`` of the spec fields that declare one: what a key means when a
    workdir's ``config.json``, written before the key existed, lacks it (``mojax.infra.workdir``). A key
    added to the config declares its default in its spec field (``option(default, help=...)``)."""
    out: dict[str, Any] = {}
    for cls in _spec_classes():
        out |= field_defaults(cls)
    return out


def validate(config: Any, num_devices: int | str | None = "auto") -> RunSpec:
    """Validates a run config before anything is built; returns its :class:`RunSpec`.

    ``num_devices``: the devices the run's mesh spans; ``"auto"`` = ``jax.device_count()`` (all
    processes); None skips the checks that need it (a sweep validating its points on a login node).

    Raises:
      ConfigError: listing every problem, each naming its ``config.`` key and the allowed values.
    """
    errors: list[str] = []
    parts = {}
    for name, build in _SECTIONS:
        try:
            parts[name] = build(config)
        except ConfigError as e:
            errors += e.errors
        except (ValueError, TypeError, KeyError) as e:
            errors.append(str(e).strip("'\"") if isinstance(e, KeyError) else f"config.{name}: {e}")
    spec = None
    if not errors:
        try:
            spec = section_from_config(RunSpec, config, **parts, resolved=to_dict(config))
        except ConfigError as e:
            errors += e.errors
    if spec is not None:
        errors += run_errors(spec, num_devices)
    if errors:
        raise ConfigError.of(errors)
    return spec
