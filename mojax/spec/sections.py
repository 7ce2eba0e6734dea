"""The sections of a run spec: one frozen dataclass per concern, each field with its config key and
help text (``mojax.config.option``), each checking its own fields in ``__post_init__``.

``mojax.spec.RunSpec`` gathers them (with the learner's ``PPOConfig`` / ``OptimizerConfig``, the
reward sources' sections, ``mojax.rewards.sections``, and the sections the advantage methods
declare). Every error names its ``config.`` key and the allowed values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from mojax import models
from mojax.config import option, spec_checker
from mojax.rewards.sections import JudgeSpec, RewardSpec  # noqa: F401 (the run spec's sections)
from mojax.rollout.spec import MAX_TOOL_TIMEOUT_S as MAX_TIMEOUT
from mojax.sampling.protocol import DRAWS, KV_CACHES, engines

DTYPES = ("float32", "bfloat16", "float16")
SANDBOX_MODES = (
    "bwrap",
    "auto",
    "unsafe_fallback",
    "fallback",
)  # mojax.rollout.tools.PythonSandbox
WANDB_MODES = ("online", "offline", "disabled")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """``config.model``: the policy's variant or checkpoint and its execution dtypes."""

    SECTION: ClassVar[str] = "model"
    variant: str = option(help="a mojax.models.VARIANTS name (random init) ...")
    overrides: dict = option(help="... with these QwenConfig fields replaced")
    checkpoint: str = option(help="HF directory (safetensors + config.json); overrides variant")
    dtype: str = option(help="compute dtype")
    param_dtype: str = option(help="parameter storage dtype")
    cache_dtype: str = option(help='KV cache dtype ("" = compute dtype; "bfloat16" halves memory)')
    remat: str = option(help='"none" | "full" | "dots" (rematerialise each layer in the backward)')

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
        help='"build": train the task\'s own sentencepiece; "": the checkpoint\'s; else a path'
    )
    vocab_size: int = option(help='pieces of the self-built vocabulary (path="build")')

    def __post_init__(self):
        c = spec_checker("tokenizer", self)
        c.in_range("tokenizer.vocab_size", 1)
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """``config.task``: which task, its data and answers per completion."""

    SECTION: ClassVar[str] = "task"
    name: str = option(help="calculator | toolrl | math | qa | musique | maze | pkg.module:Class")
    train_path: str = option(help="data file for file-backed tasks")
    eval_path: str = option(help="test data file for file-backed tasks (else carved from train)")
    val_path: str = option(help="validation data file (else carved from train, disjoint from test)")
    num_train: int = option(help="generated tasks (calculator, maze): training problems")
    num_eval: int = option(
        help="validation problems (a method's validation vector) / evaluation problems"
    )
    num_answers: int = option(
        help="S answers per completion (answer-set methods); 0 = single answer"
    )
    kwargs: dict = option(help="task constructor arguments (e.g. toolrl mode)")
    extra_rewards: dict = option(
        help="objectives added by import path: {name: {fn, min, max, weight, kwargs}}"
    )
    goal_conditioned: bool = option(
        help="goal-conditioned training (arXiv:2605.22817 App. E.5): w ~ Dir(1) per training prompt, "
        "in the prompt"
    )
    mix: dict = option(help="generated problems' difficulty mix (calculator: easy, medium, hard)")

    def __post_init__(self):
        c = spec_checker("task", self)
        c.in_range("task.num_answers", 0)
        c.in_range("task.num_eval", 1)
        c.in_range("task.num_train", 1)
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """``config.rollout`` + DAPO dynamic sampling: how one step's episodes are collected.

    ``P = prompts_per_step`` groups of ``G = num_samples`` rollouts; each turn decodes at most
    ``max_new_tokens``; all turns and tool observations together fit ``max_response_len``.
    """

    SECTION: ClassVar[str] = "rollout"
    prompts_per_step: int = option(help="P: prompt groups per RL step")
    num_samples: int = option(help="G: samples per prompt")
    max_prompt_len: int = option(help="0 = measured from the data (dry runs assume 1024)")
    max_new_tokens: int = option(help="new tokens per turn")
    max_response_len: int = option(help="R: all turns and observations together")
    max_turns: int = option(help="decode turns (tool calls + 1)")
    max_tool_calls: int = option(help="tool calls per response")
    temperature: float = option(help="sampling temperature (0 = greedy)")
    top_p: float = option(help="nucleus sampling mass (1 = off)")
    top_k: int = option(help="top-k sampling (0 = off)")
    draw: str = option(help='"gumbel" | "inverse_cdf": how a token is drawn (same distribution)')
    tool_timeout_s: float = option(
        help="deadline of one tool call, seconds in (0, 3600] (mojax.rollout.spec.MAX_TOOL_TIMEOUT_S)"
    )
    tool_workers: int = option(help="threads running tool calls")
    sandbox: str = option(help='math\'s Python tool: "bwrap" (fails closed) | "unsafe_fallback"')
    retrieval_url: str = option(help='Search-R1 retrieval server (qa); "" = BM25 over the data')
    dynamic_sampling: bool = option(
        help="DAPO: drop groups with no variance in any objective, refill",
        key="dapo.dynamic_sampling",
    )
    max_refill_rounds: int = option(
        help="DAPO: refill rounds per step at most", key="dapo.max_refill_rounds"
    )
    decode_segment: int = option(
        0, help="decode in calls of at most N tokens (0 = a turn per call); bounds signal latency"
    )
    staleness: int = option(
        0,
        help="k: generation for step t + k runs during step t's update, with weights k updates "
        "old at most (0 = synchronous; mojax.rl.async_loop)",
    )
    engine: str = option(
        "static",
        help='"static" (every row of a decode call runs until its longest row ends) | '
        '"continuous" (rollout.slots decode slots refilled as rows end; one engine per process)',
    )
    slots: int = option(16, help="decode slots of the continuous engine (its KV cache rows)")
    kv_cache: str = option(
        "dense",
        help='the continuous engine\'s KV cache: "dense" (slots x max length) | "paged" (a pool '
        "of rollout.num_pages pages that rows take as they grow; mojax.models.paged_cache)",
    )
    page_size: int = option(16, help="tokens per page of the paged KV cache")
    num_pages: int = option(
        0, help="pages in the paged KV cache's pool (0 = as many as the dense cache holds)"
    )
    prefill_prompts: int = option(
        0,
        help="prompts per prompt prefill of the continuous engine (0 = enough to fill the slots, "
        "ceil(rollout.slots / rollout.num_samples))",
    )
    refill_slots: int = option(
        1,
        help="while rows wait, a continuous-engine segment ends once this many slots have freed "
        "(more: fewer segment boundaries, slots idle until one; the tokens do not change)",
    )

    def __post_init__(self):
        c = spec_checker("rollout", self)
        for key in ("prompts_per_step", "num_samples", "max_new_tokens", "max_response_len"):
            c.in_range(f"rollout.{key}", 1)
        for key in ("max_turns", "tool_workers"):
            c.in_range(f"rollout.{key}", 1)
        c.in_range("rollout.max_tool_calls", 0)
        c.in_range("rollout.max_prompt_len", 0)
        c.in_range("rollout.staleness", 0)
        c.in_range("rollout.temperature", 0.0)
        c.in_range("rollout.top_p", 0.0, 1.0, low_inclusive=False)
        c.in_range("rollout.top_k", 0)
        c.choice("rollout.draw", DRAWS)
        t = c.typed("rollout.tool_timeout_s", (int, float))
        if isinstance(t, int | float) and not isinstance(t, bool) and not 0 < t <= MAX_TIMEOUT:
            c.fail(
                "rollout.tool_timeout_s",
                f"{t!r} is not allowed; allowed values: a finite number of seconds in "
                f"(0, {MAX_TIMEOUT:g}] (one call's deadline holds its whole step; the sandbox's "
                "CPU rlimit is ceil(timeout) + 1 s; mojax.rollout.spec.MAX_TOOL_TIMEOUT_S)",
            )
        c.choice("rollout.sandbox", SANDBOX_MODES)
        c.require(
            self.max_response_len >= self.max_new_tokens,
            "rollout.max_response_len",
            "must be >= rollout.max_new_tokens (it holds every turn and observation)",
        )
        c.in_range("rollout.decode_segment", 0)
        c.choice("rollout.engine", engines())  # the registry, ``protocol.SAMPLERS``
        c.in_range("rollout.slots", 1)
        c.choice("rollout.kv_cache", KV_CACHES)
        c.in_range("rollout.page_size", 1)
        c.in_range("rollout.num_pages", 0)
        c.in_range("rollout.prefill_prompts", 0)
        c.in_range("rollout.refill_slots", 1)
        c.require(
            self.refill_slots <= self.slots,
            "rollout.refill_slots",
            f"{self.refill_slots} must be <= rollout.slots={self.slots}",
        )
        c.require(
            self.kv_cache != "paged" or self.engine == "continuous",
            "rollout.kv_cache",
            "'paged' needs rollout.engine='continuous' (the static engine keeps a dense cache)",
        )
        row = self.max_prompt_len + self.max_response_len  # a row's most tokens (0: measured)
        c.require(
            self.kv_cache != "paged" or not self.num_pages or not self.max_prompt_len
            or self.num_pages * self.page_size >= row,
            "rollout.num_pages",
            f"{self.num_pages} pages of rollout.page_size={self.page_size} tokens cannot hold one "
            f"row of rollout.max_prompt_len + rollout.max_response_len = {row} tokens",
        )  # fmt: skip
        if self.max_refill_rounds < 0:
            c.fail("dapo.max_refill_rounds", f"{self.max_refill_rounds} is out of range [0, inf)")
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class SFTSpec:
    """``config.sft``: the supervised warm start before RL (0 steps = none)."""

    SECTION: ClassVar[str] = "sft"
    steps: int = option(help="SFT warm-start steps before RL (0 = none)")
    batch_size: int = option(help="demonstrations per SFT step")
    num_examples: int = option(help="demonstrations built from the training split at most")
    data_path: str = option(help="demonstrations file for file-backed tasks (e.g. rlla_sft.json)")
    learning_rate: float = option(help="peak learning rate (cosine decay, no weight decay)")
    warmup_steps: int = option(help="linear warmup steps")
    behaviours: dict = option(
        help="calculator demonstrations: behaviour mix (always / never / when_hard call)"
    )
    think_rate: float = option(
        help="calculator demonstrations: the fraction that open with a <think> plan"
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
    num_samples: int = option(help="samples per problem (best@k / pass@k need k <= this)")
    temperature: float = option(help="0 = greedy")
    ks: tuple = option(help="best@k / pass@k budgets (each k <= num_samples x answers)")
    checkpoint: str = option(help='mode=eval: an HF dir, or "" = the workdir\'s latest checkpoint')
    split: str = option(help='"test" | "validation"')

    def __post_init__(self):
        object.__setattr__(self, "ks", tuple(self.ks))
        c = spec_checker("eval", self)
        c.in_range("eval.num_samples", 1)
        c.in_range("eval.temperature", 0.0)
        c.choice("eval.split", ["validation", "test"])
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class WandbSpec:
    """``config.wandb``: Weights & Biases logging (process 0)."""

    SECTION: ClassVar[str] = "wandb"
    enabled: bool = option(help="log to W&B besides metrics.jsonl and TensorBoard")
    project: str = option(help="W&B project")
    entity: str = option(help="W&B entity")
    mode: str = option(help='"online" | "offline" | "disabled"')
    name: str = option(help='run name ("" = the workdir\'s name)')
    group: str = option(help="run group")

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
    data: int = option(help="data-parallel axis (-1 = the remaining devices)")
    fsdp: int = option(help="fully sharded data-parallel axis (parameters sharded)")
    tensor: int = option(help="tensor-parallel axis (heads and MLP sharded)")
    sampler: int = option(
        help="devices of the sampler's own mesh, taken from every process's devices (0 = the "
        "sampler shares the learner's mesh)"
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
    enabled: bool = option(help="train LoRA adapters on a frozen base instead of every weight")
    rank: int = option(help="r, the adapters' rank")
    alpha: float = option(help="scale numerator: the update is (alpha / r) A B")
    dropout: float = option(help="dropout on the adapters' input (training only)")
    targets: tuple = option(help="projections with adapters (q_proj k_proj v_proj o_proj ...)")
    quant: str = option(help='frozen base storage: "none" | "nf4" (QLoRA) | "int8"')

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
    enabled: bool = option(help="pack the PPO and SFT rows to a token budget (segment ids)")
    width: int = option(help="tokens per packed row (0 = the batch's T)")

    def __post_init__(self):
        c = spec_checker("packing", self)
        c.in_range("packing.width", 0)
        c.raise_if_any()
