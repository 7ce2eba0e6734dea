"""The mesh-sharded PPO-clip update: ``train_step(state, batch) -> (state, metrics)``.

One call consumes one rollout batch: ``ppo_epochs`` passes, each over a fresh permutation of the B
rows (drawn from ``state.rng``) split into ``num_minibatches`` optimizer updates, each update
accumulating gradients over ``num_microbatches`` micro-batches with ``lax.scan``. All of it is one
jitted pure function with explicit in/out shardings over a ("data", "fsdp", "tensor") mesh and the
state donated, so it runs unchanged from one CPU to a multi-host mesh::

    step = make_train_step(model_config, tx, PPOConfig(...), mesh, rules)
    state, metrics = step(state, batch)       # batch: a PPOBatch of host or device arrays

The batch is a ``mojax.learner.batch.PPOBatch`` (the rollout batch contract,
``docs/architecture.md``): ``tokens`` int32 [B, T], ``loss_mask`` [B, T], ``old_logprobs`` fp32
[B, T], ``advantages`` [B] or [B, T]; ``ref_logprobs`` [B, T] required when ``kl_coef != 0``;
optional ``attention_mask`` [B, T], ``clip_eps`` (scalar AWPO radius), ``is_weights`` [B, T]
(off-policy correction weights, ``mojax.learner.correction``), ``segment_ids`` / ``positions``
(packed rows). A missing required field or a wrong shape raises naming the field.

Exact micro-batching: the aggregation weights of the loss (``mojax.learner.losses.aggregation_weights``)
are computed once on the whole mini-batch and split with it, so the accumulated loss and gradient
equal those of the un-split mini-batch for every aggregation mode.

NaN guard: an update whose loss or gradient norm is not finite is skipped (params, optimizer state
and ``state.step`` unchanged) and counted in ``metrics["skipped_updates"]``.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from mojax import sharding as sharding_lib
from mojax.learner import batch as batch_lib
from mojax.learner.batch import Batch, PPOBatch
from mojax.learner.logprobs import token_logprobs
from mojax.learner.ppo import PPOConfig, ppo_grads, ppo_update
from mojax.learner.state import TrainState, state_shardings
from mojax.models import QwenConfig, layouts, param_shardings

# --------------------------------------------------------------------------------------------------
# the jitted, sharded step


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


class ShardedStep:
    """``(state, batch) -> (state, metrics)`` jitted per set of present batch fields with explicit
    shardings.

    Takes one batch class (``batch_type``: ``PPOBatch`` or ``SFTBatch``), validates the batch
    (``mojax.learner.batch.checked``: a missing required field or a wrong shape raises naming the
    field), places the rows over the mesh's batch axes and calls one ``jax.jit`` with
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
        batch_type: type = PPOBatch,
        required: tuple[str, ...] = (),
        row_divisor: int = 1,
        max_in_flight: int = 2,
    ):
        self._fn, self.shardings, self.mesh, self.rules = fn, shardings, mesh, rules
        self.batch_type, self.required = batch_type, required
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

    def check_batch(self, batch: Batch) -> Batch:
        """``batch`` checked and cast for this step (``mojax.learner.batch.checked``)."""
        if not isinstance(batch, self.batch_type):
            raise TypeError(
                f"this step takes a {self.batch_type.__name__} (mojax.learner.batch), got "
                f"{type(batch).__name__}"
            )
        return batch_lib.checked(batch, self.required, self.row_divisor)

    def jitted(self, batch: Batch) -> Callable:
        """The ``jax.jit`` object used for this batch's present fields (e.g. to ``.lower(...)``)."""
        key = batch_lib.signature(batch)
        if key not in self._jitted:
            self._jitted[key] = jax.jit(
                self._traced,
                in_shardings=(self.shardings, batch_lib.shardings(batch, self.mesh, self.rules)),
                out_shardings=(self.shardings, sharding_lib.replicated(self.mesh)),
                donate_argnums=0,
            )
        return self._jitted[key]

    def __call__(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict]:
        batch = batch_lib.shard(self.check_batch(batch), self.mesh, self.rules)
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
    return ShardedStep(
        fn,
        state_shardings(model_config, tx, mesh, rules),
        mesh,
        rules,
        batch_type=PPOBatch,
        required=("ref_logprobs",) if cfg.kl_coef != 0.0 else (),
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
        return jitted(params, batch_lib.shard(batch, mesh, rules))

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
