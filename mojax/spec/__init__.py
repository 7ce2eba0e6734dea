"""The typed run spec: one frozen object built once from a run config, validated before anything runs.

``validate(config)`` (what ``mojax.rl.trainer.run`` calls, once) reads the ``ml_collections`` config of
``configs/<method>.py`` into a :class:`RunSpec`: one frozen section per concern
(``mojax.spec.sections``), the learner's ``PPOConfig`` / ``OptimizerConfig``, and the config sections
the advantage methods declare (``Method.sections``). It is the one config schema (:func:`schema`):
each field declares its default, type and help once (``mojax.config.option``; ``mojax.defaults``
builds the base config from them, ``--config.mode=show`` prints the help), and a field's path in the
spec is its config key (``spec.dapo.overlong_buffer`` reads ``config.dapo.overlong_buffer``; a
method's section ``config.<name>`` is ``spec.sections[<name>]``). Each section checks its own
fields, and :func:`run_errors` the rules that span sections (the task's declared objectives, the
method's inputs, the mesh against the devices and the model). Every error names its ``config.`` key
and the allowed values; all of a config's errors are reported together, before anything is built
or compiled. Everything after validation reads the spec, never the config.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from mojax import advantages as adv_lib
from mojax import sharding
from mojax.config import (
    Checker,
    ConfigError,
    dataclass_from_config,
    field_defaults,
    field_help,
    lookup,
    option,
    section_from_config,
    to_dict,
)
from mojax.learner import CorrectionConfig, OptimizerConfig, PPOConfig
from mojax.sampling import protocol
from mojax.spec import sections as S
from mojax.spec.rules import run_errors
from mojax.tasks.framework import registry

MODES = ("train", "eval", "show")  # show: print the resolved config with its help and exit
RESUME_MODES = ("", "force", "new")
MAX_SEED = 2**32 - 1


def advantage_errors(estimator: Any, kwargs: Any, sections: dict) -> list[str]:
    """``config.estimator`` must name a method of ``mojax.advantages.METHODS``, ``config.advantage``
    hold only its keyword arguments, and an enabled method section belong to that estimator."""
    c = Checker({"estimator": estimator, "advantage": kwargs})
    est = c.choice("estimator", sorted(adv_lib.METHODS))
    if est in adv_lib.METHODS:
        method = adv_lib.METHODS[est]
        c.kwargs_for("advantage", method.fn, skip=method.data_args)
    for name, section in sections.items():
        owner = _section_owner(name)
        if getattr(section, "enabled", False) and est != owner:
            c.fail("estimator", f"{name}.enabled needs estimator {owner!r} (got {est!r})")
    return c.errors


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
    seed: int = option(0, help="seed of every random stream of the run (data, init, sampling)")
    steps: int = option(40, help="RL steps (rollout batch -> advantages -> PPO update(s))")
    mode: str = option("train", help='"train" | "eval" (a checkpoint on a held-out split) | "show"')
    dry_run: bool = option(False, help="compile the steps abstractly and print memory per device")
    checkpoint_every: int = option(10, help="checkpoint every N RL steps (and at the end)")
    keep_checkpoints: int = option(2, help="RL checkpoints kept")
    eval_every: int = option(10, help="held-out evaluation every N RL steps (and at the end)")
    transcripts_per_step: int = option(4, help="sampled transcripts written per step")
    resume: str = option("", help='rerunning a workdir: "" (same config only) | "force" | "new"')
    preemption_grace_s: float = option(
        30.0, help="seconds between the scheduler's SIGTERM and SIGKILL (mojax.infra.preemption)"
    )
    model: S.ModelSpec = None
    tokenizer: S.TokenizerSpec = None
    task: S.TaskSpec = None
    rollout: S.RolloutConfig = None
    sampler: S.SamplerSpec = None
    engines: dict = dataclasses.field(default_factory=dict)  # the engines' own sections, by name
    # no default: every config names its method (the embedded run's is mojax.defaults.RECIPE's)
    estimator: str = option(help="a name of mojax.advantages.METHODS")
    advantage: dict = option({}, help="the estimator's keyword arguments")
    sections: dict = dataclasses.field(default_factory=dict)  # the methods' sections, by name
    tool_reward: S.ToolRewardSpec = None
    dapo: S.DapoSpec = None
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
        c.errors += advantage_errors(self.estimator, self.advantage, self.sections)
        c.raise_if_any()

    @property
    def method(self) -> adv_lib.Method:
        """The advantage method ``config.estimator`` names."""
        return adv_lib.METHODS[self.estimator]

    @property
    def engine_options(self) -> Any:
        """The section of the engine ``sampler.engine`` names (``spec.engines``; None: it has
        none), what ``mojax.sampling.protocol``'s calls take as ``options``."""
        return protocol.options(self.sampler.engine, self.engines)

    def enabled_sections(self) -> list[str]:
        """The names of the method sections that are on (``<section>.enabled``)."""
        return [n for n, s in self.sections.items() if getattr(s, "enabled", False)]

    @property
    def rules(self) -> tuple:
        """The logical axis rules of the run's mesh."""
        return sharding.check_rules(self.mesh.logical_axis_rules)

    def build_task(self):
        """The task object of ``config.task`` (no data loaded)."""
        return registry.build_task(self.task)


def section_classes() -> dict[str, type]:
    """The run spec's sections by name: ``RunSpec.<name>`` is the section of ``config.<name>``
    (each class's ``SECTION``), so a field's path in the spec is its config key."""
    return {
        "model": S.ModelSpec,
        "tokenizer": S.TokenizerSpec,
        "task": S.TaskSpec,
        "rollout": S.RolloutConfig,
        "sampler": S.SamplerSpec,
        "tool_reward": S.ToolRewardSpec,
        "dapo": S.DapoSpec,
        "ppo": PPOConfig,
        "rollout_correction": CorrectionConfig,
        "optimizer": OptimizerConfig,
        "sft": S.SFTSpec,
        "eval": S.EvalSpec,
        "judge": S.JudgeSpec,
        "wandb": S.WandbSpec,
        "mesh": S.MeshSpec,
        "lora": S.LoraSpec,
        "packing": S.PackingSpec,
    }


def schema() -> tuple[type, ...]:
    """Every spec class that reads config keys, in the config's order: ``RunSpec`` (the run-level
    keys), then each section in ``RunSpec``'s field order, the engines' own sections
    (``RunSpec.engines[name]``, config ``<name>.*``) after ``sampler``, the methods' sections
    (``RunSpec.sections[name]``, config ``<name>.*``) after ``advantage``. ``mojax.defaults`` builds the base config
    from it; ``--config.mode=show`` reads its help."""
    sections, out = section_classes(), [RunSpec]
    for f in dataclasses.fields(RunSpec):
        if f.name in sections:
            out.append(sections[f.name])
        elif f.name == "sections":
            out += method_sections().values()
        elif f.name == "engines":
            out += protocol.engine_sections().values()
    return tuple(out)


def _engine_sections(config: Any) -> dict[str, Any]:
    """Every engine's own section (``protocol.engine_sections``), whichever engine runs: a value
    set in another engine's section is refused by ``mojax.spec.rules``, not ignored."""
    return {n: section_from_config(cls, config) for n, cls in protocol.engine_sections().items()}


def _method_sections(config: Any) -> dict[str, Any]:
    return {n: section_from_config(cls, config) for n, cls in method_sections().items()}


def _advantage(config: Any, sections: dict) -> None:
    errors = advantage_errors(lookup(config, "estimator"), lookup(config, "advantage"), sections)
    if errors:
        raise ConfigError.of(errors)


def _build_section(name: str, cls: type, config: Any) -> Any:
    """``config.<name>`` read into ``cls`` (the learner's sections refuse unknown keys by name)."""
    if name in ("ppo", "rollout_correction", "optimizer"):
        return dataclass_from_config(cls, config[name], name)
    extra = {}
    if name == "dapo":
        extra["max_response_len"] = int(config.rollout.max_response_len)
    elif name == "mesh":
        extra["logical_axis_rules"] = _optional(config, "logical_axis_rules")
    return section_from_config(cls, config, **extra)


def _sections(config: Any) -> tuple[dict[str, Any], list[str]]:
    """Every section of ``config`` (name -> spec section) and the errors of those that failed."""
    errors: list[str] = []
    parts: dict[str, Any] = {}
    builders = [(n, lambda c, n=n, cls=cls: _build_section(n, cls, c)) for n, cls in
                section_classes().items()]  # fmt: skip
    at = [n for n, _ in builders].index("ppo")
    builders[at:at] = [
        ("engines", _engine_sections),
        ("sections", _method_sections),
        ("advantage", lambda c: _advantage(c, parts.get("sections", {}))),
    ]
    for name, build in builders:
        try:
            parts[name] = build(config)
        except ConfigError as e:
            errors += e.errors
        except (ValueError, TypeError, KeyError) as e:
            errors.append(str(e).strip("'\"") if isinstance(e, KeyError) else f"config.{name}: {e}")
    parts.pop("advantage", None)
    return parts, errors


def _optional(config: Any, key: str) -> Any:
    value = config.get(key) if hasattr(config, "get") else None
    return tuple(tuple(r) for r in value) if value else ()


def help_texts() -> dict[str, str]:
    """``{config key: help}`` of every spec field (what ``--config.mode=show`` prints)."""
    out: dict[str, str] = {}
    for cls in schema():
        out |= field_help(cls)
    return out


def key_defaults() -> dict[str, Any]:
    """``{config key: default}`` of every spec field: what a key means when a workdir's
    ``config.json``, written before the key existed, lacks it (``mojax.infra.workdir``). A key added to
    the config declares its default in its spec field (``option(default, help=...)``)."""
    out: dict[str, Any] = {}
    for cls in schema():
        out |= field_defaults(cls)
    return out


def validate(config: Any, num_devices: int | str | None = "auto") -> RunSpec:
    """Validates a run config before anything is built; returns its :class:`RunSpec`.

    ``num_devices``: the devices the run's mesh spans; ``"auto"`` = ``jax.device_count()`` (all
    processes); None skips the checks that need it (a sweep validating its points on a login node).

    Raises:
      ConfigError: listing every problem, each naming its ``config.`` key and the allowed values.
    """
    parts, errors = _sections(config)
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
