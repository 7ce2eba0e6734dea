"""Train state (params, optimizer state, step, RNG), the optimizer, and their mesh shardings.

``TrainState`` is a plain pytree (``flax.struct``) with no functions inside, so it can be jitted,
donated, sharded and saved by orbax as is; the optax transformation lives beside it (static)::

    tx = make_optimizer(OptimizerConfig(learning_rate=1e-6, schedule="cosine", total_steps=1000))
    state = create_train_state(model_config, tx, seed=0, mesh=mesh, rules=rules)  # or params=...
    shardings = state_shardings(model_config, tx, mesh, rules)  # same pytree of NamedSharding

The params are created already sharded (``jax.jit`` with ``out_shardings`` from the model's logical
axis names), so a 7B state never exists unsharded on one device. The optimizer moments take the
shardings of the params they belong to (``optax.tree_map_params``); counters are replicated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from mojax import sharding as sharding_lib
from mojax.config import Checker, dataclass_from_config, option
from mojax.models import QwenConfig, init_params, param_shapes, param_shardings
from mojax.models import lora as lora_lib

SCHEDULES = ("constant", "cosine", "linear")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with global-norm clipping and a warmup + decay schedule.

    Attributes:
      learning_rate: peak learning rate.
      schedule: ``"constant"`` (after warmup), ``"cosine"`` or ``"linear"`` decay to
        ``end_lr_ratio * learning_rate`` at ``total_steps``.
      warmup_steps: linear warmup from 0 over this many optimizer updates.
      total_steps: optimizer updates until the end of the decay (cosine / linear only).
      end_lr_ratio: final learning rate as a fraction of the peak.
      b1, b2, eps, weight_decay: AdamW (decoupled weight decay, Loshchilov & Hutter 2019).
      max_grad_norm: clip the global L2 norm of the gradient (None = no clipping).
    """

    SECTION: ClassVar[str] = "optimizer"
    learning_rate: float = option(1e-6, help="peak learning rate")
    schedule: str = option("constant", help='"constant" (after warmup) | "cosine" | "linear"')
    warmup_steps: int = option(0, help="linear warmup over this many optimizer updates")
    total_steps: int = option(
        0, help="optimizer updates until the end of the decay (cosine / linear)"
    )
    end_lr_ratio: float = option(0.0, help="final learning rate as a fraction of the peak")
    b1: float = option(0.9, help="AdamW β1")
    b2: float = option(0.999, help="AdamW β2")
    eps: float = option(1e-8, help="AdamW ε")
    weight_decay: float = option(0.01, help="decoupled weight decay")
    max_grad_norm: float | None = option(
        1.0, help="clip the global gradient norm (None = no clipping)"
    )

    def __post_init__(self):
        c = Checker({"optimizer": dataclasses.asdict(self)})
        c.choice("optimizer.schedule", SCHEDULES)
        c.in_range("optimizer.learning_rate", 0.0, finite=True)
        c.in_range("optimizer.warmup_steps", 0)
        c.in_range("optimizer.end_lr_ratio", 0.0, finite=True)
        c.in_range("optimizer.b1", 0.0, 1.0, high_inclusive=False)
        c.in_range("optimizer.b2", 0.0, 1.0, high_inclusive=False)
        c.in_range("optimizer.eps", 0.0, low_inclusive=False, finite=True)
        c.in_range("optimizer.weight_decay", 0.0, finite=True)
        if self.schedule != "constant" and self.total_steps <= self.warmup_steps:
            c.fail(
                "optimizer.total_steps",
                f"({self.total_steps}) must exceed warmup_steps ({self.warmup_steps}) for "
                f"schedule={self.schedule!r}",
            )
        if self.max_grad_norm is not None:
            c.in_range("optimizer.max_grad_norm", 0.0, low_inclusive=False, finite=True)
        c.raise_if_any()

    @classmethod
    def from_config(cls, cfg: Any) -> OptimizerConfig:
        """From a ConfigDict / mapping; unknown keys raise naming the key."""
        return dataclass_from_config(cls, cfg, "optimizer")


def make_schedule(cfg: OptimizerConfig) -> optax.Schedule:
    """Learning rate as a function of the optimizer-update count."""
    peak, end = cfg.learning_rate, cfg.learning_rate * cfg.end_lr_ratio
    if cfg.schedule == "constant":
        if cfg.warmup_steps == 0:
            return optax.constant_schedule(peak)
        return optax.join_schedules(
            [optax.linear_schedule(0.0, peak, cfg.warmup_steps), optax.constant_schedule(peak)],
            [cfg.warmup_steps],
        )
    if cfg.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(
            0.0, peak, cfg.warmup_steps, cfg.total_steps, end_value=end
        )
    decay = optax.linear_schedule(peak, end, cfg.total_steps - cfg.warmup_steps)
    if cfg.warmup_steps == 0:
        return decay
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, cfg.warmup_steps), decay], [cfg.warmup_steps]
    )


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    """``clip_by_global_norm`` then AdamW with ``make_schedule(cfg)``."""
    adamw = optax.adamw(
        make_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay
    )
    if cfg.max_grad_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)


@flax.struct.dataclass
class TrainState:
    """Everything the update changes: a pytree of arrays only (jit/donate/shard/checkpoint as is).

    Attributes:
      step: int32 [], number of optimizer updates applied (skipped non-finite updates excluded),
        equal to the optax schedule count.
      params: the policy parameters (model pytree).
      opt_state: the optax state for ``params``.
      rng: uint32 [2], a raw PRNG key (``jax.random.PRNGKey`` layout, checkpointable as an array);
        split once per ``train_step`` for the mini-batch shuffle.
      frozen: with LoRA (``config.lora``), the frozen base weights (quantised for QLoRA) while
        ``params`` holds the adapters only (``mojax.models.lora``); None otherwise. Not
        checkpointed (the checkpoint names the base, ``mojax.infra.checkpoint``).
    """

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
    frozen: Any = None


def policy_params(state: TrainState) -> Any:
    """The full parameter tree the policy runs with: ``params``, plus the frozen base under LoRA."""
    return state.params if state.frozen is None else lora_lib.merge(state.frozen, state.params)


def _split_shapes(config: QwenConfig) -> tuple[Any, Any]:
    """``(trainable, frozen)`` parameter shapes of ``config`` (frozen None without LoRA)."""
    shapes = param_shapes(config)
    if config.lora is None:
        return shapes, None
    base, adapters = lora_lib.split(shapes)
    return adapters, base


def _split_shardings(config: QwenConfig, mesh: Mesh, rules) -> tuple[Any, Any]:
    sh = param_shardings(config, mesh, rules)
    if config.lora is None:
        return sh, None
    base, adapters = lora_lib.split(sh)
    return adapters, base


def _init_state(
    params: Any, tx: optax.GradientTransformation, rng: jax.Array, frozen: Any = None
) -> TrainState:
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        rng=rng,
        frozen=frozen,
    )


def state_shardings(
    config: QwenConfig,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    rules,
    *,
    with_frozen: bool = True,
) -> TrainState:
    """``TrainState`` of ``NamedSharding``s: params by logical axes, moments like their params
    (under LoRA: the adapters and their moments; the frozen base when ``with_frozen``)."""
    p_sh, f_sh = _split_shardings(config, mesh, rules)
    shapes, _ = _split_shapes(config)
    opt_shapes = jax.eval_shape(tx.init, shapes)
    rep = sharding_lib.replicated(mesh)
    opt_sh = optax.tree_map_params(
        tx, lambda _, s: s, opt_shapes, p_sh, transform_non_params=lambda _: rep
    )
    frozen = f_sh if with_frozen else None
    return TrainState(step=rep, params=p_sh, opt_state=opt_sh, rng=rep, frozen=frozen)


def abstract_train_state(
    config: QwenConfig,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    rules,
    *,
    with_frozen: bool = False,
) -> TrainState:
    """``TrainState`` of ``jax.ShapeDtypeStruct`` with shardings: the restore target of a checkpoint
    (under LoRA without the frozen base, which checkpoints do not hold; ``with_frozen`` adds it,
    e.g. for a dry run's compilation)."""
    shapes, frozen = _split_shapes(config)
    frozen = frozen if with_frozen else None
    abstract = jax.eval_shape(
        lambda p, f: _init_state(p, tx, jax.random.PRNGKey(0), f), shapes, frozen
    )
    sh = state_shardings(config, tx, mesh, rules, with_frozen=with_frozen)
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, sh
    )


def attach_frozen(
    config: QwenConfig, state: TrainState, dense: Any, mesh: Mesh, rules=None
) -> TrainState:
    """``state`` (adapters restored from a checkpoint) with its frozen base built from the dense
    weights ``dense`` (``mojax.models.lora.base_from_dense``); ``state`` itself without LoRA."""
    if config.lora is None:
        return state
    rules = sharding_lib.logical_axis_rules() if rules is None else rules
    _, f_sh = _split_shardings(config, mesh, rules)
    base = jax.jit(lambda d: lora_lib.base_from_dense(config, d), out_shardings=f_sh)(dense)
    return state.replace(frozen=base)


def create_train_state(
    config: QwenConfig,
    tx: optax.GradientTransformation,
    *,
    seed: int = 0,
    mesh: Mesh,
    rules=None,
    params: Any = None,
) -> TrainState:
    """A fresh ``TrainState`` placed on ``mesh``.

    Args:
      config: the model config.
      tx: the optimizer (``make_optimizer``).
      seed: seeds the param init (when ``params`` is None) and the state RNG.
      mesh: a ("data", "fsdp", "tensor") mesh (``mojax.sharding.make_mesh``).
      rules: logical axis rules (default: the model's).
      params: existing parameters (e.g. ``from_pretrained(...).params``); resharded onto ``mesh``.
        Under LoRA (``config.lora``): the dense base weights (default a random init of the dense
        model), frozen (quantised for QLoRA), while fresh adapters are trained.
    """
    rules = sharding_lib.logical_axis_rules() if rules is None else rules
    sh = state_shardings(config, tx, mesh, rules)
    init_key, state_key = jax.random.split(jax.random.PRNGKey(seed))
    if config.lora is not None:  # params: the dense base; the adapters start fresh
        dense_config = config.replace(lora=None)
        if params is None:
            dense_sh = param_shardings(dense_config, mesh, rules)
            params = init_params(dense_config, init_key, shardings=dense_sh)
        state = attach_frozen(config, TrainState(None, None, None, None), params, mesh, rules)
        shapes = param_shapes(config)
        adapters = jax.jit(
            lambda k: lora_lib.init_adapters(config, k, shapes), out_shardings=sh.params
        )(jax.random.fold_in(init_key, 1))
        fn = lambda p, k, f: _init_state(p, tx, k, f)
        return jax.jit(fn, out_shardings=sh)(adapters, state_key, state.frozen)
    if params is None:
        params = init_params(config, init_key, shardings=sh.params)
    else:
        params = jax.device_put(params, sh.params)
    return jax.jit(lambda p, k: _init_state(p, tx, k), out_shardings=sh)(params, state_key)
