"""The mesh-sharded PPO-clip update: ``train_step(state, batch) -> (state, metrics)``.

One call consumes one rollout batch: ``ppo_epochs`` passes, each over a fresh permutation of the B
rows (drawn from ``state.rng``) split into ``num_minibatches`` optimizer updates, each update
accumulating gradients over ``num_microbatches`` micro-batches with ``lax.scan``. All of it is one
jitted pure function with explicit in/out shardings over a ("data", "fsdp", "tensor") mesh and the
state donated, so it runs unchanged from one CPU to a multi-host mesh::

    step = make_train_step(model_config, tx, PPOConfig(...), mesh, rules)
    state, metrics = step(state, batch)       # batch: dict of host or device arrays (keys below)

Batch keys (the rollout batch contract, ``docs/architecture.md``): ``tokens`` int32 [B, T], ``loss_mask`` [B, T],
``old_logprobs`` fp32 [B, T], ``advantages`` [B] or [B, T]; ``ref_logprobs`` [B, T] when
``kl_coef != 0``; optional ``attention_mask`` [B, T], ``clip_eps`` (scalar AWPO radius),
``is_weights`` [B, T] (off-policy correction weights, ``mojax.learner.correction``); ``n_calls``
and other host metadata are accepted and ignored. A missing or unknown key raises naming it.

Exact micro-batching: the aggregation weights of the loss (``mojax.learner.losses.aggregation_weights``)
are computed once on the whole mini-batch and split with it, so the accumulated loss and gradient
equal those of the un-split mini-batch for every aggregation mode.

NaN guard: an update whose loss or gradient norm is not finite is skipped (params, optimizer state
and ``state.step`` unchanged) and counted in ``metrics["skipped_updates"]``.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from mojax import sharding as sharding_lib
from mojax.learner.logprobs import token_logprobs
from mojax.learner.ppo import PPOConfig, ppo_grads, ppo_update
from mojax.learner.state import TrainState, state_shardings
from mojax.models import QwenConfig, layouts, param_shardings

# --------------------------------------------------------------------------------------------------
# the jitted, sharded step


_DTYPES = {"tokens": np.int32, "attention_mask": np.int32, "segment_ids": np.int32}
_DTYPES["positions"] = np.int32


@contextlib.contextmanager
def logical_context(mesh: Mesh, rules):
    """Inside a traced function: the model's logical sharding constraints apply on ``mesh``.

    flax's ``with_logical_constraint`` reads the context mesh; ``with mesh:`` no longer sets it
    inside ``jax.jit`` (the constraints were silently dropped), ``jax.set_mesh`` is refused there,
    and ``jax.sharding.use_abstract_mesh`` works from the traced function, so lowering the step
    from anywhere (the dry run) sees the same constraints as a call.
    """
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
        yield


def _as_dtype(x, dtype):
    if x.dtype == dtype:
        return x
    return x.astype(dtype)


class ShardedStep:
    """``(state, batch) -> (state, metrics)`` jitted per batch-key set with explicit shardings.

    Validates the batch (missing / unknown keys and shapes raise naming the key), drops ignored
    host metadata, places the rows over the mesh's batch axes and calls one ``jax.jit`` with
    ``in_shardings=(state_shardings, batch_shardings)``, ``out_shardings=(state_shardings,
    replicated)`` and ``donate_argnums=0`` (the old state's buffers are reused).

    Bounded dispatch: before a call is dispatched, the call ``max_in_flight`` calls back is waited
    for (its metrics), so a loop that never reads its results (the SFT warm start) keeps at most
    ``max_in_flight`` steps queued per device. Unbounded, the queue grows until PjRt's per-device
    in-flight semaphore is reached; on the CPU backend that semaphore is acquired inside the launch
    task on the client's thread pool (one thread per device), so blocked launches and devices
    waiting in a collective for a device whose queued step cannot get a thread fill the pool: a
    deadlock that XLA aborts ("Expected 8 threads to join the rendezvous, but only 7 arrived").

    Attributes:
      trace_count: how many times the step function was traced (1 across steps of equal shapes).
    """

    def __init__(
        self,
        fn: Callable,
        shardings: TrainState,
        mesh: Mesh,
        rules,
        *,
        required: tuple[str, ...],
        optional: tuple[str, ...],
        ignored: tuple[str, ...] = (),
        row_divisor: int = 1,
        max_in_flight: int = 2,
    ):
        self._fn, self.shardings, self.mesh, self.rules = fn, shardings, mesh, rules
        self.required, self.optional, self.ignored = required, optional, ignored
        self.row_divisor = row_divisor
        self.trace_count = 0
        self._jitted: dict[tuple, Callable] = {}
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self._in_flight: collections.deque = collections.deque()

    def _traced(self, state, batch):
        self.trace_count += 1
        with logical_context(self.mesh, self.rules):
            return self._fn(state, batch)

    def check_batch(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        missing = [k for k in self.required if k not in batch]
        if missing:
            raise KeyError(f"batch is missing required key(s) {missing}; got {sorted(batch)}")
        unknown = sorted(set(batch) - set(self.required + self.optional + self.ignored))
        if unknown:
            raise KeyError(
                f"unknown batch key(s) {unknown}; allowed: {sorted(self.required + self.optional)}"
                f" (+ ignored metadata {sorted(self.ignored)})"
            )
        out = {
            k: v if isinstance(v, jax.Array) else np.asarray(v)
            for k, v in batch.items()
            if k not in self.ignored
        }
        if np.ndim(out["tokens"]) != 2:
            raise ValueError(f"batch['tokens'] must be [B, T], got shape {np.shape(out['tokens'])}")
        b, t = np.shape(out["tokens"])
        for k, v in out.items():
            shape = np.shape(v)
            if k == "clip_eps":
                if shape != ():
                    raise ValueError(f"batch['clip_eps'] must be a scalar, got shape {shape}")
            elif k == "advantages":
                if shape not in ((b,), (b, t)):
                    raise ValueError(
                        f"batch['advantages'] must be [B]={b} or [B, T]={(b, t)}, got {shape}"
                    )
            elif shape != (b, t):
                raise ValueError(
                    f"batch[{k!r}] must have the shape of tokens {(b, t)}, got {shape}"
                )
        if b % self.row_divisor:
            raise ValueError(
                f"batch has B={b} rows, not a multiple of {self.row_divisor} (mini-batches x "
                "micro-batches x batch shards of the mesh)"
            )
        if not np.issubdtype(out["tokens"].dtype, np.integer):
            raise ValueError(f"batch['tokens'] must be an integer array, got {out['tokens'].dtype}")
        # one dtype per key, so host batches of any numeric dtype hit the same compiled step
        return {k: _as_dtype(v, _DTYPES.get(k, np.float32)) for k, v in out.items()}

    def jitted(self, batch: Mapping[str, Any]) -> Callable:
        """The ``jax.jit`` object used for this batch's key set (e.g. to ``.lower(...)``)."""
        key = tuple(sorted((k, np.ndim(v)) for k, v in batch.items()))
        if key not in self._jitted:
            b_sh = {k: sharding_lib.batch_sharding(self.mesh, self.rules, nd) for k, nd in key}
            self._jitted[key] = jax.jit(
                self._traced,
                in_shardings=(self.shardings, b_sh),
                out_shardings=(self.shardings, sharding_lib.replicated(self.mesh)),
                donate_argnums=0,
            )
        return self._jitted[key]

    def __call__(self, state: TrainState, batch: Mapping[str, Any]) -> tuple[TrainState, dict]:
        batch = self.check_batch(batch)
        batch = sharding_lib.shard_batch(batch, self.mesh, self.rules)
        while len(self._in_flight) >= self.max_in_flight:
            jax.block_until_ready(self._in_flight.popleft())
        state, metrics = self.jitted(batch)(state, batch)
        self._in_flight.append(metrics)
        return state, metrics


def make_train_step(
    model_config: QwenConfig,
    tx: optax.GradientTransformation,
    cfg: PPOConfig,
    mesh: Mesh,
    rules=None,
    *,
    lr_schedule: Callable | None = None,
) -> ShardedStep:
    """The jitted PPO ``train_step(state, batch) -> (state, metrics)`` for ``mesh``.

    Metrics (scalars, averaged over the call's updates unless noted): ``loss, pg_loss, kl`` (when
    ``ref_logprobs`` given), ``entropy``, ``clip_frac_low, clip_frac_high, dual_clip_frac,
    approx_kl, ratio_mean``, ``ratio_min / ratio_max`` (over all updates), ``grad_norm,
    update_norm``, ``param_norm`` and ``learning_rate`` (after / at the last update),
    ``skipped_updates`` and ``tokens`` (summed), ``num_updates``.
    """
    model_config = layouts.resolve(model_config)  # the learner's layouts for this backend
    rules = sharding_lib.logical_axis_rules() if rules is None else rules
    sharding_lib.check_model_divides(model_config, mesh, rules)
    fn = lambda state, batch: ppo_update(
        state,
        batch,
        model_config=model_config,
        cfg=cfg,
        tx=tx,
        mesh=mesh,
        rules=rules,
        lr_schedule=lr_schedule,
    )
    required = ("tokens", "loss_mask", "old_logprobs", "advantages")
    if cfg.kl_coef != 0.0:
        required += ("ref_logprobs",)
    optional = ("ref_logprobs", "attention_mask", "clip_eps", "is_weights")
    optional = tuple(k for k in optional if k not in required)
    optional += ("segment_ids", "positions")  # packed rows (mojax.learner.packing)
    return ShardedStep(
        fn,
        state_shardings(model_config, tx, mesh, rules),
        mesh,
        rules,
        required=required,
        optional=optional,
        ignored=("n_calls",),
        row_divisor=cfg.num_minibatches * cfg.num_microbatches,
    )


def make_grad_fn(model_config: QwenConfig, cfg: PPOConfig, mesh: Mesh, rules=None) -> Callable:
    """Jitted ``(params, batch) -> (grads, metrics)`` of the PPO loss on the whole batch, grads
    sharded like the params (for tests and analysis; the train step does the same internally)."""
    model_config = layouts.resolve(model_config)  # the learner's layouts for this backend
    rules = sharding_lib.logical_axis_rules() if rules is None else rules
    sharding_lib.check_model_divides(model_config, mesh, rules)
    p_sh = param_shardings(model_config, mesh, rules)

    def fn(params, batch):
        with logical_context(mesh, rules):
            return ppo_grads(model_config, cfg, params, batch, mesh=mesh, rules=rules)

    jitted = jax.jit(fn, out_shardings=(p_sh, sharding_lib.replicated(mesh)))

    def call(params, batch):
        return jitted(params, sharding_lib.shard_batch(batch, mesh, rules))

    return call


def make_logprob_fn(
    model_config: QwenConfig,
    mesh: Mesh,
    rules=None,
    *,
    chunk_size: int | None = None,
    offloaded: bool = False,
) -> Callable:
    """Jitted ``(params, tokens, attention_mask=None) -> fp32 logprobs [B, T]`` (aligned).

    For ``ref_logprobs`` under the frozen reference (params sharded like the policy: pass
    ``param_shardings``-placed params, or ``mojax.sharding.offload(...)``-placed ones with
    ``offloaded=True``: they are streamed from pinned host memory to the devices inside the call),
    and for recomputing ``old_logprobs`` with the training numerics.
    """
    model_config = layouts.resolve(model_config)  # the learner's layouts for this backend
    rules = sharding_lib.logical_axis_rules() if rules is None else rules
    sharding_lib.check_model_divides(model_config, mesh, rules)
    p_sh = param_shardings(model_config, mesh, rules)
    in_p = jax.tree.map(lambda s: s.with_memory_kind("pinned_host"), p_sh) if offloaded else p_sh

    def fn(params, tokens, mask):
        if offloaded:
            params = jax.device_put(params, p_sh)
        with logical_context(mesh, rules):
            lp, _ = token_logprobs(
                model_config,
                params,
                tokens,
                mask,
                chunk_size=chunk_size,
                vocab_sharded=sharding_lib.num_shards(mesh, rules, "vocab") > 1,
            )
        return lp

    rows = sharding_lib.batch_sharding(mesh, rules, 2)
    jitted = jax.jit(fn, in_shardings=(in_p, rows, rows), out_shardings=rows)

    def call(params, tokens, attention_mask=None):
        tokens = jnp.asarray(tokens, jnp.int32)
        mask = jnp.ones(tokens.shape, jnp.int32) if attention_mask is None else attention_mask
        return jitted(params, tokens, jnp.asarray(mask, jnp.int32))

    return call
