"""The RL update: PPO-clip loss, train state, the sharded train step and the SFT step.

Typical use (see ``mojax.rl.train_step`` for the batch keys and metrics)::

    mesh = mojax.sharding.mesh_from_config(config.mesh)
    rules = mojax.sharding.logical_axis_rules(config)
    opt = mojax.rl.OptimizerConfig.from_config(config.optimizer)
    tx = mojax.rl.make_optimizer(opt)
    state = mojax.rl.create_train_state(model_config, tx, seed=config.seed, mesh=mesh, rules=rules)
    train_step = mojax.rl.make_train_step(model_config, tx, mojax.rl.PPOConfig.from_config(
        config.ppo), mesh, rules, lr_schedule=mojax.rl.make_schedule(opt))
    state, metrics = train_step(state, batch)
"""

from mojax.rl.logprobs import logprobs_from_hidden, token_logprobs
from mojax.rl.losses import (
    AGGREGATIONS,
    KL_TYPES,
    aggregation_weights,
    kl_penalty,
    ppo_clip_loss,
    ppo_token_terms,
    sft_loss,
)
from mojax.rl.sft import make_sft_step, sft_update
from mojax.rl.state import (
    OptimizerConfig,
    TrainState,
    abstract_train_state,
    create_train_state,
    make_optimizer,
    make_schedule,
    state_shardings,
)
from mojax.rl.train_step import (
    PPOConfig,
    ShardedStep,
    make_grad_fn,
    make_logprob_fn,
    make_train_step,
    ppo_grads,
    ppo_update,
)

__all__ = [
    "AGGREGATIONS",
    "KL_TYPES",
    "OptimizerConfig",
    "PPOConfig",
    "ShardedStep",
    "TrainState",
    "abstract_train_state",
    "aggregation_weights",
    "create_train_state",
    "kl_penalty",
    "logprobs_from_hidden",
    "make_grad_fn",
    "make_logprob_fn",
    "make_optimizer",
    "make_schedule",
    "make_sft_step",
    "make_train_step",
    "ppo_clip_loss",
    "ppo_grads",
    "ppo_token_terms",
    "ppo_update",
    "sft_loss",
    "sft_update",
    "state_shardings",
    "token_logprobs",
]
