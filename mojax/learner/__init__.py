"""The learner: PPO-clip loss, log-probs, train state, the sharded PPO step and the SFT step.

Typical use (``mojax.learner.batch`` for the batch's fields, ``mojax.learner.step`` for the metrics)::

    from mojax import learner
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-5))
    state = learner.create_train_state(model_config, tx, seed=0, mesh=mesh, rules=rules)
    train_step = learner.make_train_step(model_config, tx, learner.PPOConfig(), mesh, rules)
    state, metrics = train_step(state, learner.PPOBatch(tokens, loss_mask, old_logprobs, advantages))
"""

from mojax.learner.batch import PPOBatch, SFTBatch
from mojax.learner.correction import CorrectionConfig
from mojax.learner.logprobs import logprobs_from_hidden, token_logprobs
from mojax.learner.losses import (
    AGGREGATIONS,
    KL_TYPES,
    aggregation_weights,
    kl_penalty,
    ppo_clip_loss,
    ppo_token_terms,
    sft_loss,
)
from mojax.learner.ppo import PPOConfig, ppo_grads, ppo_update
from mojax.learner.recompute import make_recompute_fn
from mojax.learner.sft import make_sft_step, sft_update
from mojax.learner.state import (
    OptimizerConfig,
    TrainState,
    abstract_train_state,
    attach_frozen,
    create_train_state,
    make_optimizer,
    make_schedule,
    policy_params,
    state_shardings,
)
from mojax.learner.step import ShardedStep, make_grad_fn, make_logprob_fn, make_train_step

__all__ = [
    "AGGREGATIONS",
    "CorrectionConfig",
    "KL_TYPES",
    "OptimizerConfig",
    "PPOBatch",
    "PPOConfig",
    "SFTBatch",
    "ShardedStep",
    "TrainState",
    "abstract_train_state",
    "attach_frozen",
    "aggregation_weights",
    "create_train_state",
    "kl_penalty",
    "logprobs_from_hidden",
    "make_grad_fn",
    "make_logprob_fn",
    "make_optimizer",
    "make_recompute_fn",
    "make_schedule",
    "make_sft_step",
    "make_train_step",
    "ppo_clip_loss",
    "ppo_grads",
    "ppo_token_terms",
    "policy_params",
    "ppo_update",
    "sft_loss",
    "sft_update",
    "state_shardings",
    "token_logprobs",
]
