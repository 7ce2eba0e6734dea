"""``ppo.old_logprobs = "recompute"``: π_old from the learner's forward, the mismatch, the correction.

``make_recompute_fn(...)(params, batch) -> (batch, metrics)`` places the PPO batch on the learner's
mesh (rows over the batch axes; with several processes each hands over the rows its devices hold),
runs the learner's log-prob forward on it (``mojax.learner.step.make_logprob_fn``: the model, layouts,
mesh and vocabulary chunks of the update), and then, in one jitted call:

* keeps the sampler's log-probs as the behaviour policy ``μ`` and puts the recomputed ones in
  ``old_logprobs`` (π_old of the PPO ratio);
* measures the mismatch (``mojax.learner.correction.mismatch_metrics``: ``mismatch/kl_k3``, the
  ratio's mean / p99 / max, ``mismatch/frac_outside``, ...);
* applies ``config.rollout_correction`` (``mojax.learner.correction.correct``): ``is_weights``
  [B, T] for the PPO term and the rejected tokens out of ``loss_mask``.

The metrics are device scalars (replicated); the caller reads them with the update's metrics, so
nothing here waits for the device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from mojax import sharding as sharding_lib
from mojax.learner import batch as batch_lib
from mojax.learner import correction as corr
from mojax.learner.batch import PPOBatch
from mojax.learner.step import make_logprob_fn
from mojax.models import QwenConfig


def _post(cfg: corr.CorrectionConfig) -> Callable:
    """``(old [B, T], behave [B, T], loss_mask [B, T]) -> (arrays, metrics)``."""

    def fn(old, behave, loss_mask):
        on = loss_mask > 0
        old = jnp.where(on, old, 0.0)
        metrics = {
            f"mismatch/{k}": v
            for k, v in corr.mismatch_metrics(
                old, behave, loss_mask, low=cfg.low, high=cfg.high
            ).items()
        }
        arrays = {"old_logprobs": old}
        if cfg.enabled:
            weights, mask, cm = corr.correct(old, behave, loss_mask, cfg)
            metrics.update({f"correction/{k}": v for k, v in cm.items()})
            arrays["loss_mask"] = mask
            if weights is not None:
                arrays["is_weights"] = weights
        return arrays, metrics

    return fn


def make_recompute_fn(
    model_config: QwenConfig,
    mesh: Mesh,
    rules,
    cfg: corr.CorrectionConfig,
    *,
    chunk_size: int | None = None,
) -> Callable[[Any, PPOBatch], tuple[PPOBatch, dict]]:
    """``(params, batch) -> (batch, metrics)`` (see the module docstring).

    ``batch`` is the :class:`PPOBatch` of ``mojax.learner.step.make_train_step`` (host or device
    arrays); the returned batch (``dataclasses.replace`` of it) holds device arrays on ``mesh`` and
    is what the train step takes.
    """
    lp_fn = make_logprob_fn(model_config, mesh, rules, chunk_size=chunk_size)
    rows = sharding_lib.batch_sharding(mesh, rules, 2)
    post = jax.jit(_post(cfg), out_shardings=(rows, sharding_lib.replicated(mesh)))

    def call(params, batch: PPOBatch) -> tuple[PPOBatch, dict]:
        batch = batch_lib.shard(batch, mesh, rules)
        old = lp_fn(params, batch.tokens, batch.attention_mask)
        arrays, metrics = post(old, batch.old_logprobs, batch.loss_mask)
        return dataclasses.replace(batch, **arrays), metrics

    return call
