"""The typed run spec: frozen dataclasses built once from a run config, each validating itself.

``RunSpec.from_config(config)`` reads the ``ml_collections`` config of ``configs/<method>.py`` into
one frozen object per concern (``RolloutSpec``, ``RewardSpec``, ``AdvantageSpec``, ``PPOSpec``,
``OptimizerSpec``, ``SFTSpec``, ``EvalSpec``, ``MeshSpec``, plus the model and task settings). Each
spec checks its own fields in ``__post_init__``; every error names its ``config.`` key and the allowed
values, and ``from_config`` reports the errors of all specs together, before anything is built or
compiled. Each rule lives in exactly one place: here, or in the dataclass that owns it
(``PPOSpec`` = :class:`mojax.learner.step.PPOConfig`, ``OptimizerSpec`` =
:class:`mojax.learner.state.OptimizerConfig`).

``mojax.config`` (the error type and the checking helpers) imports nothing from ``mojax``; this module
is where config meets the estimators, the Pareto machinery and the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from mojax import advantages as adv_lib
from mojax import models, pareto, sharding
from mojax.config import Checker, ConfigError, dataclass_from_config, keyword_names, to_dict
from mojax.learner.ppo import PPOConfig as PPOSpec
from mojax.learner.state import OptimizerConfig as OptimizerSpec
from mojax.rl.builders import TASKS, build_model_config, task_class
from mojax.rl.spec_rules import combination_errors
from mojax.sampling.processors import DRAWS

DTYPES = ("float32", "bfloat16", "float16")
SET_ESTIMATORS = ("vpo", "multi_rlvr")  # estimators of multi-answer sets [P, G, S, M]
MODES = ("train", "eval", "show")  # show: print the resolved config with its help and exit
SANDBOX_MODES = (
    "bwrap",
    "auto",
    "unsafe_fallback",
    "fallback",
)  # mojax.rollout.tools.PythonSandbox
STAGE1_ESTIMATORS = ("grpo", "dr_grpo")  # ParetoPO Stage 1: the estimators that take reward_scale
_DATA_ARGS = ("rewards", "valid", "set_rewards", "set_valid", "key", "state", "reason_valid")


def _checker(section: str, spec: Any) -> Checker:
    """A :class:`Checker` over a spec's fields, naming them ``config.<section>.<field>``."""
    return Checker({section: {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}})


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """``config.model``: the policy's variant or checkpoint and its execution dtypes."""

    variant: str
    checkpoint: str
    dtype: str
    param_dtype: str
    cache_dtype: str
    remat: str
    overrides: dict

    def __post_init__(self):
        c = _checker("model", self)
        c.choice("model.dtype", DTYPES)
        c.choice("model.param_dtype", DTYPES)
        c.choice("model.cache_dtype", ("",) + DTYPES)
        c.choice("model.remat", ["none", "full", "dots"])
        fields = {f.name for f in dataclasses.fields(models.QwenConfig)}
        for key in self.overrides:
            if key not in fields:
                c.fail(
                    f"model.overrides.{key}", f"not a QwenConfig field; fields: {sorted(fields)}"
                )
        if not self.checkpoint:
            c.choice("model.variant", sorted(models.VARIANTS))
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """``config.task`` (+ ``config.tokenizer``): which task, its data and answers per completion."""

    name: str
    num_answers: int
    num_eval: int
    tokenizer_path: str
    has_checkpoint: bool
    goal_conditioned: bool = False  # goal-conditioned GRPO: w ~ Dir(1) in the prompt (goal.py)

    def __post_init__(self):
        c = _checker("task", self)
        if ":" not in self.name:  # built-in tasks; "package.module:Class" imports a custom one
            c.choice("task.name", TASKS)
        else:
            try:
                task_class(self.name)
            except ValueError as e:
                detail = str(e).removeprefix(f"config.task.name={self.name!r}: ")
                c.fail("task.name", f"{self.name!r}: {detail}")
        c.in_range("task.num_answers", 0)
        c.in_range("task.num_eval", 1)
        c.require(
            self.tokenizer_path != "" or self.has_checkpoint,
            "tokenizer.path",
            "'' (the checkpoint's tokenizer) needs model.checkpoint; use 'build' or a path",
        )
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """``config.rollout`` + DAPO dynamic sampling: how one step's episodes are collected.

    ``P = prompts_per_step`` groups of ``G = num_samples`` rollouts; each turn decodes at most
    ``max_new_tokens``; all turns and tool observations together fit ``max_response_len``.
    """

    prompts_per_step: int
    num_samples: int
    max_new_tokens: int
    max_response_len: int
    max_turns: int
    max_tool_calls: int
    max_prompt_len: int
    temperature: float
    top_p: float
    top_k: int
    draw: str  # "gumbel" | "inverse_cdf" (mojax.sampling.processors)
    tool_timeout_s: float
    tool_workers: int
    retrieval_url: str
    sandbox: str  # the math task's Python tool: "bwrap" (fails closed) | "unsafe_fallback"
    dynamic_sampling: bool  # DAPO: drop groups where no objective varies, refill
    max_refill_rounds: int

    def __post_init__(self):
        c = _checker("rollout", self)
        for key in ("prompts_per_step", "num_samples", "max_new_tokens", "max_response_len"):
            c.in_range(f"rollout.{key}", 1)
        for key in ("max_turns", "tool_workers"):
            c.in_range(f"rollout.{key}", 1)
        c.in_range("rollout.max_tool_calls", 0)
        c.in_range("rollout.max_prompt_len", 0)
        c.in_range("rollout.temperature", 0.0)
        c.in_range("rollout.top_p", 0.0, 1.0, low_inclusive=False)
        c.in_range("rollout.top_k", 0)
        c.choice("rollout.draw", DRAWS)
        c.in_range("rollout.tool_timeout_s", 0.0, low_inclusive=False)
        c.choice("rollout.sandbox", SANDBOX_MODES)
        c.require(
            self.max_response_len >= self.max_new_tokens,
            "rollout.max_response_len",
            "must be >= rollout.max_new_tokens (it holds every turn and observation)",
        )
        if self.max_refill_rounds < 0:
            c.fail("dapo.max_refill_rounds", f"{self.max_refill_rounds} is out of range [0, inf)")
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class RewardSpec:
    """``config.tool_reward`` + DAPO overlong shaping: how responses become reward vectors."""

    tool_alpha: float  # r_tool = exp(-alpha |N_call - N_opt|) (ParetoPO Eq. 4)
    no_success: str
    overlong_buffer: int  # DAPO soft overlong punishment (0 = off)
    overlong_penalty: float
    max_response_len: int

    def __post_init__(self):
        c = _checker("tool_reward", self)
        if self.no_success not in pareto.NO_SUCCESS_MODES:
            c.fail(
                "tool_reward.no_success",
                f"{self.no_success!r} is not allowed; allowed values: {list(pareto.NO_SUCCESS_MODES)}",
            )
        if self.tool_alpha < 0:
            c.fail("tool_reward.alpha", f"{self.tool_alpha!r} is out of range [0, inf)")
        if not 0 <= self.overlong_buffer <= self.max_response_len:
            c.fail(
                "dapo.overlong_buffer",
                f"{self.overlong_buffer} must be in [0, rollout.max_response_len]",
            )
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class ParetoPOSpec:
    """``config.paretopo``: ParetoPO's Stage 1 (HV-guided scalarization) then Stage 2."""

    enabled: bool
    stage1_steps: int
    stage1_estimator: str
    weights: tuple
    mode: str
    gamma: float
    reference: str
    validate_every: int
    dynamic_weighting: bool = True
    pareto_ranking: bool = True

    def __post_init__(self):
        c = _checker("paretopo", self)
        if self.enabled:
            c.choice("paretopo.mode", pareto.STAGE1_MODES)
            c.choice("paretopo.reference", ["initial", "zeros"])
            c.choice("paretopo.stage1_estimator", STAGE1_ESTIMATORS)
            c.in_range("paretopo.stage1_steps", -1)  # -1: one epoch of the training split
            c.in_range("paretopo.gamma", 0.0, 1.0, high_inclusive=False)
            c.in_range("paretopo.validate_every", 1)
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class AdvantageSpec:
    """``config.estimator`` + ``config.advantage``: the advantage transform and its keywords."""

    estimator: str
    kwargs: dict
    num_answers: int
    task_name: str
    task_kwargs: dict
    paretopo: ParetoPOSpec

    def __post_init__(self):
        c = Checker({"estimator": self.estimator, "advantage": self.kwargs, "task": {}})
        est = c.choice("estimator", sorted(adv_lib.ESTIMATORS))
        if est in adv_lib.ESTIMATORS:
            c.kwargs_for("advantage", adv_lib.ESTIMATORS[est], skip=_DATA_ARGS)
            sets = self.num_answers > 0
            need = "needs task.num_answers > 0 (multi-answer sets)"
            if est not in SET_ESTIMATORS:
                need = "needs task.num_answers = 0 (single answers)"
            c.require(sets == (est in SET_ESTIMATORS), "task.num_answers", f"{est!r} {need}")
            if est == "awpo":
                c.require(
                    self.task_name == "toolrl" and self.task_kwargs.get("mode") == "awpo",
                    "task",
                    "estimator 'awpo' needs (R_out, R_reason): task.name='toolrl' with "
                    "task.kwargs.mode='awpo'",
                )
        c.require(
            not self.paretopo.enabled or est == "pareto_rank",
            "estimator",
            "ParetoPO (paretopo.enabled) uses 'pareto_rank' in Stage 2",
        )
        c.raise_if_any()

    @property
    def fn(self) -> Callable[..., Any]:
        return adv_lib.ESTIMATORS[self.estimator]

    @property
    def takes_sets(self) -> bool:
        return self.estimator in SET_ESTIMATORS

    def takes(self, name: str) -> bool:
        """Whether the estimator accepts keyword ``name`` (``key``, ``state``)."""
        return name in keyword_names(self.fn)


@dataclasses.dataclass(frozen=True)
class SFTSpec:
    """``config.sft``: the supervised warm start before RL (0 steps = none)."""

    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int

    def __post_init__(self):
        c = _checker("sft", self)
        c.in_range("sft.steps", 0)
        c.in_range("sft.batch_size", 1)
        c.in_range("sft.learning_rate", 0.0)
        c.in_range("sft.warmup_steps", 0)
        c.raise_if_any()

    def optimizer(self) -> OptimizerSpec:
        """Cosine decay over the warm start, no weight decay."""
        return OptimizerSpec(
            learning_rate=self.learning_rate,
            schedule="cosine",
            warmup_steps=self.warmup_steps,
            total_steps=max(self.steps, self.warmup_steps + 1),
            weight_decay=0.0,
        )


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """``config.eval``: held-out evaluation (``N = num_samples`` per problem)."""

    num_samples: int
    temperature: float
    ks: tuple
    checkpoint: str
    split: str

    def __post_init__(self):
        c = _checker("eval", self)
        c.in_range("eval.num_samples", 1)
        c.in_range("eval.temperature", 0.0)
        c.choice("eval.split", ["validation", "test"])
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """``config.mesh``: device mesh axes (``-1`` = the remaining devices); :meth:`errors` checks
    them against the devices and the model once the other sections are valid."""

    data: int
    fsdp: int
    tensor: int

    def __post_init__(self):
        c = _checker("mesh", self)
        for axis in ("data", "fsdp", "tensor"):
            v = c.typed(f"mesh.{axis}", int)
            if isinstance(v, int) and not isinstance(v, bool) and v < 1 and v != -1:
                c.fail(f"mesh.{axis}", f"{v} must be a positive int or -1 (the remaining devices)")
        c.raise_if_any()

    def errors(self, config: Any, num_devices: int | str | None) -> list[str]:
        """``mojax.sharding.mesh_errors``: the mesh against ``num_devices`` and the model (variant +
        overrides or the checkpoint's config.json; a self-built vocabulary is checked once built)."""
        try:
            model, rules = build_model_config(config, None), sharding.logical_axis_rules(config)
        except Exception:  # noqa: BLE001 - a missing checkpoint is reported when the run builds it
            model = rules = None
        build = config.tokenizer.path == "build" and not config.model.checkpoint
        skip = ("vocab",) if build and "vocab_size" not in config.model.overrides else ()
        return sharding.mesh_errors(dataclasses.asdict(self), num_devices, model, rules, skip=skip)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything a run reads from its config, validated (see the module docstring)."""

    seed: int
    steps: int
    mode: str
    dry_run: bool
    checkpoint_every: int
    eval_every: int
    keep_checkpoints: int
    transcripts_per_step: int
    model: ModelSpec
    task: TaskSpec
    rollout: RolloutSpec
    reward: RewardSpec
    advantage: AdvantageSpec
    ppo: PPOSpec
    optimizer: OptimizerSpec
    sft: SFTSpec
    eval: EvalSpec
    mesh: MeshSpec

    def __post_init__(self):
        c = Checker({})
        if self.mode not in MODES:
            c.fail("mode", f"{self.mode!r} is not allowed; allowed values: {list(MODES)}")
        if self.steps < 0:
            c.fail("steps", f"{self.steps} is out of range [0, inf)")
        for key in ("checkpoint_every", "eval_every", "keep_checkpoints"):
            if getattr(self, key) < 1:
                c.fail(key, f"{getattr(self, key)} is out of range [1, inf)")
        rows = self.rollout.prompts_per_step * self.rollout.num_samples
        div = self.ppo.num_minibatches * self.ppo.num_microbatches
        c.require(
            rows % div == 0,
            "ppo.num_minibatches",
            f"B = prompts_per_step * num_samples = {rows} must be divisible by "
            f"num_minibatches * num_microbatches = {div}",
        )
        c.raise_if_any()

    @classmethod
    def from_config(cls, config: Any, num_devices: int | str | None = "auto") -> RunSpec:
        """Builds and validates every spec; raises one :class:`ConfigError` listing all problems."""
        errors: list[str] = []
        parts = {}
        for name, build in _SECTIONS:
            try:
                parts[name] = build(config, parts)
            except ConfigError as e:
                errors += e.errors
            except (ValueError, TypeError, KeyError) as e:
                errors.append(f"config.{name}: {e}")
        if not errors:
            errors += combination_errors(config)
            errors += parts["mesh"].errors(config, num_devices)
        if errors:
            raise ConfigError.of(errors)
        try:
            return cls(**_run_keys(config), **parts)
        except ConfigError as e:
            raise ConfigError.of(e.errors) from None


def _run_keys(config) -> dict[str, Any]:
    keys = ("seed", "steps", "mode", "dry_run", "checkpoint_every", "eval_every")
    out = {k: config[k] for k in keys}
    out["keep_checkpoints"] = config.keep_checkpoints
    out["transcripts_per_step"] = config.transcripts_per_step
    return out


def _fields(section, cls, **extra) -> Any:
    names = {f.name for f in dataclasses.fields(cls)} - set(extra)
    return cls(**{n: to_dict(section[n]) for n in names}, **extra)


def _rollout(config, _) -> RolloutSpec:
    r = to_dict(config.rollout)
    r.pop("retrieval_url", None)
    return RolloutSpec(
        **r,
        retrieval_url=config.rollout.retrieval_url,
        dynamic_sampling=bool(config.dapo.dynamic_sampling),
        max_refill_rounds=int(config.dapo.max_refill_rounds),
    )


def _advantage(config, parts) -> AdvantageSpec:
    p = dict(to_dict(config.paretopo))
    p["weights"] = tuple(p["weights"])
    return AdvantageSpec(
        estimator=config.estimator,
        kwargs=dict(to_dict(config.advantage)),
        num_answers=int(config.task.num_answers),
        task_name=config.task.name,
        task_kwargs=dict(to_dict(config.task.kwargs)),
        paretopo=ParetoPOSpec(**p),
    )


_SECTIONS: tuple[tuple[str, Callable[[Any, dict], Any]], ...] = (
    ("model", lambda c, _: _fields(c.model, ModelSpec, overrides=dict(to_dict(c.model.overrides)))),
    (
        "task",
        lambda c, _: TaskSpec(
            name=c.task.name,
            num_answers=c.task.num_answers,
            num_eval=c.task.num_eval,
            tokenizer_path=c.tokenizer.path,
            has_checkpoint=bool(c.model.checkpoint),
            goal_conditioned=bool(c.task.get("goal_conditioned", False)),
        ),
    ),
    ("rollout", _rollout),
    (
        "reward",
        lambda c, _: RewardSpec(
            tool_alpha=float(c.tool_reward.alpha),
            no_success=c.tool_reward.no_success,
            overlong_buffer=int(c.dapo.overlong_buffer),
            overlong_penalty=float(c.dapo.overlong_penalty),
            max_response_len=int(c.rollout.max_response_len),
        ),
    ),
    ("advantage", _advantage),
    ("ppo", lambda c, _: dataclass_from_config(PPOSpec, c.ppo, "ppo")),
    ("optimizer", lambda c, _: dataclass_from_config(OptimizerSpec, c.optimizer, "optimizer")),
    ("sft", lambda c, _: _fields(c.sft, SFTSpec)),
    ("eval", lambda c, _: EvalSpec(**{**to_dict(c.eval), "ks": tuple(c.eval.ks)})),
    ("mesh", lambda c, _: _fields(c.mesh, MeshSpec)),
)


def validate(config: Any, num_devices: int | str | None = "auto") -> RunSpec:
    """Validates a run config before anything is built; returns its :class:`RunSpec`.

    ``num_devices``: the devices the run's mesh spans; ``"auto"`` = ``jax.device_count()`` (all
    processes); None skips the checks that need it (a sweep validating its points on a login node).

    Raises:
      ConfigError: listing every problem, each naming its ``config.`` key and the allowed values.
    """
    return RunSpec.from_config(config, num_devices)
