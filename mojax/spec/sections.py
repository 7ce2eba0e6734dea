"""The sections of a run spec: one frozen dataclass per concern, each field with its default, type
and help text declared once (``mojax.config.option``; ``config.<SECTION>.<field>`` is its key), each
checking its own fields in ``__post_init__``.

``mojax.spec.RunSpec`` gathers them (with the learner's ``PPOConfig`` / ``OptimizerConfig``, the
reward sources' sections, ``mojax.rewards.sections``, the rollout's ``RolloutConfig``,
``mojax.rollout.spec``, and the sections the advantage methods declare). Every error names its
``config.`` key and the allowed values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from mojax import models
from mojax.config import option, spec_checker
from mojax.rewards.sections import DapoSpec, JudgeSpec, ToolRewardSpec  # noqa: F401 (sections)
from mojax.rollout.spec import RolloutConfig  # noqa: F401 (the run spec's rollout section)
from mojax.sampling.protocol import SamplerSpec  # noqa: F401 (the engine choice, config.sampler)

DTYPES = ("float32", "bfloat16", "float16")
WANDB_MODES = ("online", "offline", "disabled")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """``config.model``: the policy's variant or checkpoint and its execution dtypes."""

    SECTION: ClassVar[str] = "model"
    variant: str = option("tiny-qwen3", help="a mojax.models.VARIANTS name (random init) ...")
    overrides: dict = option({}, help="... with these QwenConfig fields replaced")
    checkpoint: str = option("", help="HF directory (safetensors + config.json); overrides variant")
    dtype: str = option("float32", help="compute dtype")
    param_dtype: str = option("float32", help="parameter storage dtype")
    cache_dtype: str = option(
        "", help='KV cache dtype ("" = compute dtype; "bfloat16" halves memory)'
    )
    remat: str = option(
        "none", help='"none" | "full" | "dots" (rematerialise each layer in the backward)'
    )

    def __post_init__(self):
        c = spec_checker("model", self)
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
class TokenizerSpec:
    """``config.tokenizer``: the policy's vocabulary."""

    SECTION: ClassVar[str] = "tokenizer"
    path: str = option(
        "build",
        help='"build": train the task\'s own sentencepiece; "": the checkpoint\'s; else a path',
    )
    vocab_size: int = option(96, help='pieces of the self-built vocabulary (path="build")')

    def __post_init__(self):
        c = spec_checker("tokenizer", self)
        c.in_range("tokenizer.vocab_size", 1)
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """``config.task``: which task, its data and answers per completion."""

    SECTION: ClassVar[str] = "task"
    name: str = option(
        "calculator", help="calculator | toolrl | math | qa | musique | maze | pkg.module:Class"
    )
    train_path: str = option("", help="data file for file-backed tasks")
    eval_path: str = option(
        "", help="test data file for file-backed tasks (else carved from train)"
    )
    val_path: str = option(
        "", help="validation data file (else carved from train, disjoint from test)"
    )
    num_train: int = option(4000, help="generated tasks (calculator, maze): training problems")
    num_eval: int = option(
        128, help="evaluation (test) problems; validation too, unless num_validation"
    )
    num_validation: int = option(
        0, help="validation problems (a method's validation vector); 0 = num_eval"
    )
    num_answers: int = option(
        0, help="S answers per completion (answer-set methods); 0 = single answer"
    )
    kwargs: dict = option({}, help="task constructor arguments (e.g. toolrl mode)")
    extra_rewards: dict = option(
        {}, help="objectives added by import path: {name: {fn, min, max, weight, kwargs}}"
    )
    goal_conditioned: bool = option(
        False,
        help="goal-conditioned training (arXiv:2605.22817 App. E.5): w ~ Dir(1) per training prompt, "
        "in the prompt",
    )
    mix: dict = option(help="generated problems' difficulty mix (calculator: easy, medium, hard)")

    def __post_init__(self):
        c = spec_checker("task", self)
        c.in_range("task.num_answers", 0)
        c.in_range("task.num_eval", 1)
        c.in_range("task.num_validation", 0)
        c.in_range("task.num_train", 1)
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class SFTSpec:
    """``config.sft``: the supervised warm start before RL (0 steps = none)."""

    SECTION: ClassVar[str] = "sft"
    steps: int = option(0, help="SFT warm-start steps before RL (0 = none)")
    batch_size: int = option(64, help="demonstrations per SFT step")
    num_examples: int = option(4000, help="demonstrations built from the training split at most")
    data_path: str = option(
        "", help="demonstrations file for file-backed tasks (e.g. rlla_sft.json)"
    )
    learning_rate: float = option(0.003, help="peak learning rate (cosine decay, no weight decay)")
    warmup_steps: int = option(20, help="linear warmup steps")
    behaviours: dict = option(
        help="calculator demonstrations: behaviour mix (always / never / when_hard call)"
    )
    think_rate: float = option(
        0.0, help="calculator demonstrations: the fraction that open with a <think> plan"
    )
    checkpoint_every: int = option(
        100, help="checkpoint the warm start every N steps (and at the end)"
    )

    def __post_init__(self):
        c = spec_checker("sft", self)
        c.in_range("sft.steps", 0)
        c.in_range("sft.batch_size", 1)
        c.in_range("sft.num_examples", 1)
        c.in_range("sft.learning_rate", 0.0, finite=True)
        c.in_range("sft.warmup_steps", 0)
        c.in_range("sft.think_rate", 0.0, 1.0)
        c.in_range("sft.checkpoint_every", 1)
        c.raise_if_any()

    def optimizer(self):
        """Cosine decay over the warm start, no weight decay."""
        from mojax.learner import OptimizerConfig

        return OptimizerConfig(
            learning_rate=self.learning_rate,
            schedule="cosine",
            warmup_steps=self.warmup_steps,
            total_steps=max(self.steps, self.warmup_steps + 1),
            weight_decay=0.0,
        )


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """``config.eval``: held-out evaluation (``N = num_samples`` per problem)."""

    SECTION: ClassVar[str] = "eval"
    num_samples: int = option(1, help="samples per problem (best@k / pass@k need k <= this)")
    temperature: float = option(0.0, help="0 = greedy")
    ks: tuple = option((1,), help="best@k / pass@k budgets (each k <= num_samples x answers)")
    batch_prompts: int = option(
        0,
        help="held-out problems per evaluation batch (rows = this x num_samples); 0 = all at once",
    )
    checkpoint: str = option(
        "", help='mode=eval: an HF dir, or "" = the workdir\'s latest checkpoint'
    )
    split: str = option("test", help='"test" | "validation"')

    def __post_init__(self):
        object.__setattr__(self, "ks", tuple(self.ks))
        c = spec_checker("eval", self)
        c.in_range("eval.num_samples", 1)
        c.in_range("eval.batch_prompts", 0)
        c.in_range("eval.temperature", 0.0)
        c.choice("eval.split", ["validation", "test"])
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class WandbSpec:
    """``config.wandb``: Weights & Biases logging (process 0)."""

    SECTION: ClassVar[str] = "wandb"
    enabled: bool = option(False, help="log to W&B besides metrics.jsonl and TensorBoard")
    project: str = option("mojax", help="W&B project")
    entity: str = option("", help="W&B entity")
    mode: str = option("online", help='"online" | "offline" | "disabled"')
    name: str = option("", help='run name ("" = the workdir\'s name)')
    group: str = option("", help="run group")

    def __post_init__(self):
        c = spec_checker("wandb", self)
        c.choice("wandb.mode", WANDB_MODES)
        c.raise_if_any()

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """``config.mesh``: the learner's device mesh axes (``-1`` = the remaining devices) and the
    devices of the sampler's mesh (``mojax.sharding.split_devices``)."""

    SECTION: ClassVar[str] = "mesh"
    data: int = option(-1, help="data-parallel axis (-1 = the remaining devices)")
    fsdp: int = option(1, help="fully sharded data-parallel axis (parameters sharded)")
    tensor: int = option(1, help="tensor-parallel axis (heads and MLP sharded)")
    sampler: int = option(
        0,
        help="devices of the sampler's own mesh, taken from every process's devices (0 = the "
        "sampler shares the learner's mesh)",
    )
    logical_axis_rules: tuple = ()  # config.logical_axis_rules when set (else the model's)

    def __post_init__(self):
        c = spec_checker("mesh", self)
        for axis in ("data", "fsdp", "tensor"):
            v = c.typed(f"mesh.{axis}", int)
            if isinstance(v, int) and not isinstance(v, bool) and v < 1 and v != -1:
                c.fail(f"mesh.{axis}", f"{v} must be a positive int or -1 (the remaining devices)")
        c.in_range("mesh.sampler", 0)
        c.raise_if_any()

    def as_dict(self) -> dict[str, int]:
        return {
            "data": self.data,
            "fsdp": self.fsdp,
            "tensor": self.tensor,
            "sampler": self.sampler,
        }


@dataclasses.dataclass(frozen=True)
class LoraSpec:
    """``config.lora``: LoRA / QLoRA adapters (``mojax.models.lora``) in place of full fine-tuning."""

    SECTION: ClassVar[str] = "lora"
    enabled: bool = option(
        False, help="train LoRA adapters on a frozen base instead of every weight"
    )
    rank: int = option(8, help="r, the adapters' rank")
    alpha: float = option(16.0, help="scale numerator: the update is (alpha / r) A B")
    dropout: float = option(0.0, help="dropout on the adapters' input (training only)")
    targets: tuple = option(
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        help="projections with adapters (q_proj k_proj v_proj o_proj ...)",
    )
    quant: str = option("none", help='frozen base storage: "none" | "nf4" (QLoRA) | "int8"')

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))
        c = spec_checker("lora", self)
        c.in_range("lora.rank", 1)
        c.in_range("lora.alpha", 0.0, low_inclusive=False)
        c.in_range("lora.dropout", 0.0, 1.0, high_inclusive=False)
        c.choice("lora.quant", models.lora.QUANT)
        for t in self.targets:
            if t not in models.lora.PROJECTIONS:
                c.fail("lora.targets", f"{t!r} is not one of {list(models.lora.PROJECTIONS)}")
        c.require(bool(self.targets), "lora.targets", "needs at least one projection")
        c.raise_if_any()

    def model_lora(self):
        """The model config's ``LoraConfig`` (None when disabled)."""
        if not self.enabled:
            return None
        return models.lora.LoraConfig(
            rank=self.rank,
            alpha=self.alpha,
            dropout=self.dropout,
            targets=self.targets,
            quant=self.quant,
        )


@dataclasses.dataclass(frozen=True)
class PackingSpec:
    """``config.packing``: several sequences per row of the PPO and SFT batches
    (``mojax.learner.packing``; per-sequence losses unchanged)."""

    SECTION: ClassVar[str] = "packing"
    enabled: bool = option(False, help="pack the PPO and SFT rows to a token budget (segment ids)")
    width: int = option(0, help="tokens per packed row (0 = the batch's T)")

    def __post_init__(self):
        c = spec_checker("packing", self)
        c.in_range("packing.width", 0)
        c.raise_if_any()
