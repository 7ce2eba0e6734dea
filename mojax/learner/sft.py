"""Supervised fine-tuning step (warm starts): token cross-entropy on demonstrations.

``sft_step(state, batch) -> (state, metrics)`` with the same ``TrainState``, optimizer, mesh
shardings, micro-batch accumulation and NaN guard as the PPO ``train_step``::

    step = make_sft_step(model_config, tx, mesh, rules, num_microbatches=4)
    state, metrics = step(state, SFTBatch(tokens=tokens, loss_mask=loss_mask))

The loss is ``−Σ_bt m_bt log π(tokens_bt | tokens_<t) / Σ_bt m_bt`` (token-mean over the loss mask:
1 on the demonstration's response tokens, 0 on the prompt and padding). Metrics: ``loss`` (the mean
token NLL), ``tokens``, ``grad_norm``, ``update_norm``, ``param_norm``, ``learning_rate``,
``skipped_updates``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from mojax import sharding as sharding_lib
from mojax.learner import losses
from mojax.learner.batch import SFTBatch
from mojax.learner.logprobs import token_logprobs
from mojax.learner.ppo import accumulate_gradients, apply_update, constrain_rows
from mojax.learner.state import TrainState, state_shardings
from mojax.learner.step import ShardedStep
from mojax.models import QwenConfig, layouts
from mojax.models import lora as lora_lib


def sft_update(
    state: TrainState,
    batch: SFTBatch,
    *,
    model_config: QwenConfig,
    tx: optax.GradientTransformation,
    num_microbatches: int = 1,
    logprob_chunk: int | None = None,
    mesh: Mesh | None = None,
    rules=None,
    lr_schedule: Callable | None = None,
) -> tuple[TrainState, dict]:
    """The pure body of the SFT step: one accumulated optimizer update on the batch."""
    weights = losses.aggregation_weights(batch.loss_mask, "token-mean")

    def loss_fn(params, x: SFTBatch, w):
        lp, _ = token_logprobs(
            model_config,
            params,
            x.tokens,
            x.attention_mask,
            chunk_size=logprob_chunk,
            vocab_sharded=sharding_lib.num_shards(mesh, rules, "vocab") > 1,
            need=x.loss_mask > 0,
            segment_ids=x.segment_ids,
            positions=x.positions,
        )
        return losses.sft_loss(lp, x.loss_mask, token_weights=w), {}

    constrain = (lambda x: x) if mesh is None else (lambda x: constrain_rows(x, mesh, rules))
    fn = loss_fn
    if state.frozen is not None:  # LoRA: the adapters' gradient over the frozen base
        fn = lambda p, x, w: loss_fn(lora_lib.merge(state.frozen, p), x, w)
    grads, metrics = accumulate_gradients(
        fn, state.params, batch, weights, num_microbatches, constrain
    )
    params, opt_state, step, norms = apply_update(
        tx, state.params, state.opt_state, state.step, grads, metrics["loss"], lr_schedule
    )
    metrics = {**metrics, **norms, "skipped_updates": norms["skipped_updates"]}
    new = state.replace(step=step, params=params, opt_state=opt_state)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def make_sft_step(
    model_config: QwenConfig,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    rules=None,
    *,
    num_microbatches: int = 1,
    logprob_chunk: int | None = None,
    lr_schedule: Callable | None = None,
) -> ShardedStep:
    """The jitted SFT ``step(state, batch) -> (state, metrics)`` of an :class:`SFTBatch`
    (``tokens``, ``loss_mask``, optional ``attention_mask`` and packed ``segment_ids`` /
    ``positions``; B divisible by ``num_microbatches``)."""
    model_config = layouts.resolve(model_config)  # the learner's layouts for this backend
    rules = sharding_lib.logical_axis_rules() if rules is None else rules
    sharding_lib.check_model_divides(model_config, mesh, rules)

    def fn(state, batch):
        return sft_update(
            state,
            batch,
            model_config=model_config,
            tx=tx,
            num_microbatches=num_microbatches,
            logprob_chunk=logprob_chunk,
            mesh=mesh,
            rules=rules,
            lr_schedule=lr_schedule,
        )

    return ShardedStep(
        fn,
        state_shardings(model_config, tx, mesh, rules),
        mesh,
        rules,
        batch_type=SFTBatch,
        row_divisor=num_microbatches,
    )
