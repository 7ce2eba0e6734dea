"""The pure PPO-clip update (no jit, no mesh): the config, the micro-batched gradient and the
optimizer update over epochs and mini-batches.

``ppo_update(state, batch, ...)`` is what ``mojax.learner.step.make_train_step`` jits with explicit
shardings; see that module for the batch contract. Exact micro-batching: the aggregation weights of
the loss (``mojax.learner.losses.aggregation_weights``) are computed once on the whole mini-batch and split
with it, so the accumulated loss and gradient equal those of the un-split mini-batch. NaN guard: an
update whose loss or gradient norm is not finite is skipped and counted in ``skipped_updates``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from mojax import sharding as sharding_lib
from mojax.config import Checker, dataclass_from_config, option
from mojax.learner import losses
from mojax.learner.batch import Batch, PPOBatch, rows_only
from mojax.learner.logprobs import COMPACT_MODES, token_logprobs
from mojax.learner.state import TrainState
from mojax.models import QwenConfig


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of the PPO-clip update (methods.md "PPO-clip update").

    Attributes:
      clip_low, clip_high: ε_low, ε_high (DAPO clip-higher: 0.2, 0.28).
      dual_clip: c for negative advantages (None = off; methods.md's value is 3).
      agg: loss aggregation (``mojax.learner.losses.AGGREGATIONS``).
      max_len: constant normaliser of ``seq-mean-token-sum-norm`` (default T of the batch).
      kl_coef, kl_type: KL-to-reference loss term (needs ``ref_logprobs`` in the batch).
      entropy_coef: entropy bonus weight (0 = off; the entropy is still logged when
        ``log_entropy``).
      ppo_epochs: passes over the rollout batch per call.
      num_minibatches: optimizer updates per pass (B must be divisible by
        ``num_minibatches * num_microbatches``).
      num_microbatches: gradient-accumulation micro-batches per update (at least).
      microbatch_tokens: a token budget per micro-batch: an update whose ``rows x T`` exceeds it is
        split into more micro-batches (the fewest that fit, ``microbatches_for``), so activation
        memory stays bounded whatever B and T are (None = off). Exact, like all micro-batching.
      shuffle: permute the rows before each pass (key from ``state.rng``).
      logprob_chunk: positions per vocab-projection chunk (None = whole sequence at once).
      logprob_compact: ``"rows"``: gather each row's loss positions to its front before the
        chunked projection, so prompt, padding and packed-neighbour positions are not projected
        onto the vocabulary; ``"batch"``: gather all rows' loss positions together (fewest chunks;
        the gather crosses devices on a batch-sharded mesh); ``"off"`` (needs ``logprob_chunk``
        otherwise; ``mojax.learner.logprobs``).
      logprob_remat: with ``logprob_chunk``, the backward pass recomputes each chunk's logits
        (memory: one ``[rows, chunk, V]`` chunk); ``False`` keeps every chunk's fp32 logits from
        the forward and skips that matmul (a third of the projection's FLOPs; memory: all chunks).
      log_entropy: compute the per-token entropy for metrics even without a bonus.
      ratio_level: ``"token"`` (PPO) or ``"sequence"`` (AWPO Eq. 30: one importance ratio per
        response; with ``agg="seq-mean-token-mean"`` the loss is the paper's 1/(GK) mean).
      num_seqs: a constant sequence count for the ``seq-mean-*`` aggregations (verl's
        ``global_batch_size``; None = the sequences present in the mini-batch).
      old_logprobs: ``"sampler"`` or ``"recompute"`` (``mojax.learner.recompute``).
    """

    SECTION: ClassVar[str] = "ppo"
    clip_low: float = option(0.2, help="ε_low of the clipped ratio")
    clip_high: float = option(0.2, help="ε_high (DAPO clip-higher: 0.28)")
    dual_clip: float | None = option(
        None, help="c of the dual clip for negative advantages (None = off)"
    )
    agg: str = option(
        "token-mean",
        help="loss aggregation: token-mean | seq-mean-token-mean | seq-mean-token-sum | ...",
    )
    max_len: int | None = option(
        None, help="constant normaliser of seq-mean-token-sum-norm (None = T of the batch)"
    )
    kl_coef: float = option(0.0, help="KL-to-reference loss weight (0 = off)")
    kl_type: str = option("k3", help="KL estimator: k1 | k2 | k3 | ...")
    entropy_coef: float = option(0.0, help="entropy bonus weight (0 = off)")
    ppo_epochs: int = option(1, help="passes over the rollout batch per step")
    num_minibatches: int = option(1, help="optimizer updates per pass")
    num_microbatches: int = option(1, help="gradient-accumulation micro-batches per update")
    microbatch_tokens: int | None = option(
        8192, help="rows x T per micro-batch at most: more micro-batches when over (None = off)"
    )
    shuffle: bool = option(True, help="permute the rows before each pass")
    logprob_chunk: int | None = option(
        None, help="positions per vocabulary-projection chunk (None = the whole sequence)"
    )
    logprob_compact: str = option(
        "off",
        help='project only the loss positions onto the vocabulary, in chunks of logprob_chunk: "off" '
        '| "rows" (gathered per row) | "batch" (gathered over the batch: fewest chunks)',
    )
    logprob_remat: bool = option(
        True,
        help="recompute each vocabulary chunk's logits in the backward (False: keep them all from "
        "the forward, one matmul fewer per chunk, memory of every chunk's fp32 logits)",
    )
    log_entropy: bool = option(True, help="compute the per-token entropy for metrics")
    ratio_level: str = option("token", help='"token" (PPO) | "sequence" (AWPO Eq. 30)')
    num_seqs: int | None = option(
        None, help="constant sequence count of the seq-mean-* aggregations (None = those present)"
    )
    old_logprobs: str = option(
        "sampler",
        help='π_old of the ratio: "sampler" (the rollout\'s log-probs) | "recompute" (the '
        "learner's forward on the batch; logs mismatch/*, enables rollout_correction)",
    )

    def __post_init__(self):
        c = Checker({"ppo": dataclasses.asdict(self)})
        c.choice("ppo.agg", losses.AGGREGATIONS)
        c.choice("ppo.kl_type", losses.KL_TYPES)
        c.choice("ppo.ratio_level", losses.RATIO_LEVELS)
        c.choice("ppo.old_logprobs", ("sampler", "recompute"))
        if self.num_seqs is not None and self.num_seqs < 1:
            c.fail("ppo.num_seqs", f"must be >= 1 or None, got {self.num_seqs}")
        c.in_range("ppo.clip_low", 0.0, 1.0, high_inclusive=False)
        c.in_range("ppo.clip_high", 0.0)
        for name in ("ppo_epochs", "num_minibatches", "num_microbatches"):
            c.in_range(f"ppo.{name}", 1)
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            c.fail("ppo.dual_clip", f"must be > 1 or None, got {self.dual_clip!r}")
        if self.microbatch_tokens is not None and self.microbatch_tokens < 1:
            c.fail("ppo.microbatch_tokens", f"must be >= 1 or None, got {self.microbatch_tokens}")
        if self.logprob_chunk is not None and self.logprob_chunk < 1:
            c.fail("ppo.logprob_chunk", f"must be >= 1 or None, got {self.logprob_chunk}")
        c.choice("ppo.logprob_compact", COMPACT_MODES)
        if self.logprob_compact != "off" and self.logprob_chunk is None:
            c.fail(
                "ppo.logprob_compact", "needs ppo.logprob_chunk (the chunk of gathered positions)"
            )
        c.raise_if_any()

    @classmethod
    def from_config(cls, cfg: Any) -> PPOConfig:
        """From a ConfigDict / mapping; unknown keys raise naming the key."""
        return dataclass_from_config(cls, cfg, "ppo")


# --------------------------------------------------------------------------------------------------
# pure pieces


def microbatches_for(rows: int, t: int, at_least: int, budget: int | None, shards: int = 1) -> int:
    """Micro-batches of a ``rows x t`` mini-batch: the fewest ``n >= at_least`` dividing ``rows``
    (each micro-batch a multiple of ``shards`` rows) with ``rows / n x t <= budget``; the most
    such ``n`` when none fits (one micro-batch per ``shards`` rows)."""
    if budget is None or rows * t <= budget * at_least:
        return at_least
    ok = [n for n in range(at_least, rows + 1) if rows % n == 0 and (rows // n) % shards == 0]
    if not ok:
        return at_least
    return next((n for n in ok if rows // n * t <= budget), ok[-1])


def split_rows(tree: Any, n: int) -> Any:
    """[B, ...] -> [n, B/n, ...] taking rows strided (row i goes to split i % n).

    Strided, so a batch sharded in contiguous row blocks keeps every split evenly spread over the
    devices (the reshape + transpose is local on each device).
    """
    return jax.tree.map(
        lambda x: jnp.swapaxes(x.reshape(x.shape[0] // n, n, *x.shape[1:]), 0, 1), tree
    )


def constrain_rows(tree: Any, mesh: Mesh, rules) -> Any:
    """``tree``'s leading (row) axis constrained to the mesh's batch axes."""
    return jax.tree.map(
        lambda x: jax.lax.with_sharding_constraint(
            x, sharding_lib.batch_sharding(mesh, rules, x.ndim)
        ),
        tree,
    )


_SUM_METRICS = ("loss", "pg_loss", "kl", "entropy")  # already weighted by the global weights
_MEAN_METRICS = ("clip_frac_low", "clip_frac_high", "dual_clip_frac", "approx_kl", "ratio_mean")


def accumulate_gradients(
    loss_fn: Callable[[Any, Batch, jax.Array], tuple[jax.Array, dict]],
    params: Any,
    minibatch: Batch,
    weights: jax.Array,
    num_microbatches: int,
    constrain: Callable[[Any], Any] = lambda x: x,
) -> tuple[Any, dict[str, jax.Array]]:
    """Σ over micro-batches of ``grad(loss_fn)`` (``lax.scan``), with combined metrics.

    ``minibatch`` (no scalar fields: every leaf has its rows) and its aggregation ``weights``
    [B, T] are split together; ``loss_fn(params, micro, micro_weights)`` must return a loss already
    weighted for the whole mini-batch (so the sum is the mini-batch loss) and metrics;
    ``_SUM_METRICS`` are summed, ``_MEAN_METRICS`` are token-means recombined with the micro-batch
    token counts, ``ratio_min/max`` by min / max.
    """
    micro = split_rows((minibatch, weights), num_microbatches)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def body(acc, xw):
        x, w = constrain(xw)
        (loss, metrics), grads = grad_fn(params, x, w)
        n = jnp.sum(x.loss_mask.astype(jnp.float32))
        g_acc, m_acc = acc
        g_acc = jax.tree.map(lambda a, g: a + g.astype(a.dtype), g_acc, grads)
        new = dict(m_acc)
        for k, v in {"loss": loss, **metrics}.items():
            if k in _SUM_METRICS:
                new[k] = m_acc[k] + v
            elif k in _MEAN_METRICS:
                new[k] = m_acc[k] + v * n
            elif k == "ratio_min":
                new[k] = jnp.minimum(m_acc[k], v)
            elif k == "ratio_max":
                new[k] = jnp.maximum(m_acc[k], v)
        new["tokens"] = m_acc["tokens"] + n
        return (g_acc, new), None

    # metric structure from an abstract evaluation (no compute)
    x0 = jax.tree.map(lambda x: x[0], micro)
    _, m_shape = jax.eval_shape(lambda p, xw: loss_fn(p, *xw), params, x0)
    m0 = {k: jnp.zeros((), jnp.float32) for k in ("loss", *m_shape)}
    if "ratio_min" in m0:
        m0["ratio_min"] = jnp.full((), jnp.inf, jnp.float32)
        m0["ratio_max"] = jnp.full((), -jnp.inf, jnp.float32)
    m0["tokens"] = jnp.zeros((), jnp.float32)
    g0 = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.promote_types(p.dtype, jnp.float32)), params)
    if num_microbatches == 1:  # no loop: saves the accumulator and the loop's copies
        (grads, metrics), _ = body((g0, m0), jax.tree.map(lambda x: x[0], micro))
    else:
        (grads, metrics), _ = jax.lax.scan(body, (g0, m0), micro)
    for k in _MEAN_METRICS:
        if k in metrics:
            metrics[k] = metrics[k] / jnp.maximum(metrics["tokens"], 1.0)
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
    return grads, metrics


def apply_update(
    tx: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    step: jax.Array,
    grads: Any,
    loss: jax.Array,
    lr_schedule: Callable | None = None,
) -> tuple[Any, Any, jax.Array, dict[str, jax.Array]]:
    """One optax update with the NaN guard; returns new (params, opt_state, step) and norms.

    A non-finite loss or gradient norm keeps params, optimizer state and step as they were.
    """
    grad_norm = optax.global_norm(grads)
    ok = jnp.isfinite(grad_norm) & jnp.isfinite(loss)

    updates, new_opt = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)

    # a select per element fuses into the update loops (lax.cond copies its branch outputs out)
    def keep(new, old):
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)

    params, opt_state = keep(new_params, params), keep(new_opt, opt_state)
    update_norm = jnp.where(ok, optax.global_norm(updates), 0.0)
    metrics = {
        "grad_norm": grad_norm,
        "update_norm": update_norm.astype(jnp.float32),
        "skipped_updates": (~ok).astype(jnp.float32),
        "param_norm": optax.global_norm(params),
    }
    if lr_schedule is not None:
        metrics["learning_rate"] = jnp.asarray(lr_schedule(step), jnp.float32)
    return params, opt_state, step + ok.astype(step.dtype), metrics


def ppo_loss_fn(
    model_config: QwenConfig,
    cfg: PPOConfig,
    vocab_sharded: bool = False,
    *,
    clip_eps: jax.Array | None = None,
    lora_rng: jax.Array | None = None,
) -> Callable:
    """``loss_fn(params, micro, weights) -> (loss, metrics)`` of one micro-batch (a
    :class:`PPOBatch` without its scalar fields; packed rows carry ``segment_ids`` / ``positions``)
    and its aggregation ``weights`` [b, T]; ``clip_eps`` is the batch's scalar clip radius,
    ``lora_rng`` the key of adapter dropout."""
    with_entropy = cfg.entropy_coef != 0.0 or cfg.log_entropy

    def loss_fn(params, x: PPOBatch, weights):
        lp, ent = token_logprobs(
            model_config,
            params,
            x.tokens,
            x.attention_mask,
            chunk_size=cfg.logprob_chunk,
            with_entropy=with_entropy,
            vocab_sharded=vocab_sharded,
            need=x.loss_mask > 0,
            compact=cfg.logprob_compact,
            remat_chunks=cfg.logprob_remat,
            segment_ids=x.segment_ids,
            positions=x.positions,
            lora_rng=lora_rng,
        )
        adv = x.advantages
        if x.is_weights is not None:  # w min(ρA, clip(ρ)A) = min(ρ wA, clip(ρ) wA) for w >= 0
            adv = (adv[:, None] if adv.ndim == 1 else adv) * x.is_weights
        return losses.ppo_clip_loss(
            lp,
            x.old_logprobs,
            adv,
            x.loss_mask,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            clip_eps=clip_eps,
            dual_clip=cfg.dual_clip,
            ref_logprobs=x.ref_logprobs,
            kl_coef=cfg.kl_coef,
            kl_type=cfg.kl_type,
            entropy=ent if cfg.entropy_coef != 0.0 or ent is None else jax.lax.stop_gradient(ent),
            entropy_coef=cfg.entropy_coef,
            token_weights=weights,
            ratio_level=cfg.ratio_level,
        )

    return loss_fn


def aggregation_weights(minibatch: PPOBatch, cfg: PPOConfig) -> jax.Array:
    """The loss's per-token weights [B, T] of the whole mini-batch (``cfg.agg``); packed rows
    (``segment_ids``) count tokens and sequences per segment (``mojax.learner.packing``)."""
    if minibatch.segment_ids is not None:
        from mojax.learner.packing import packed_aggregation_weights

        return packed_aggregation_weights(
            minibatch.loss_mask, minibatch.segment_ids, cfg.agg, cfg.max_len, cfg.num_seqs
        )
    return losses.aggregation_weights(minibatch.loss_mask, cfg.agg, cfg.max_len, cfg.num_seqs)


def ppo_grads(
    model_config: QwenConfig,
    cfg: PPOConfig,
    params: Any,
    minibatch: PPOBatch,
    *,
    mesh: Mesh | None = None,
    rules=None,
    frozen: Any = None,
    lora_rng: jax.Array | None = None,
) -> tuple[Any, dict]:
    """Accumulated gradient and metrics of the PPO loss on one mini-batch (no optimizer).

    ``frozen``: under LoRA, the frozen base the trainable ``params`` (the adapters) are merged
    with; the gradient is the adapters' only. ``lora_rng``: the key of adapter dropout."""
    rows = rows_only(minibatch)
    weights = aggregation_weights(rows, cfg)
    constrain = (lambda x: x) if mesh is None else (lambda x: constrain_rows(x, mesh, rules))
    vocab_sharded = sharding_lib.num_shards(mesh, rules, "vocab") > 1
    fn = ppo_loss_fn(
        model_config, cfg, vocab_sharded, clip_eps=minibatch.clip_eps, lora_rng=lora_rng
    )
    if frozen is not None:
        fn = _with_frozen(fn, frozen)
    b, t = minibatch.tokens.shape
    shards = 1 if mesh is None else sharding_lib.batch_divisor(mesh, rules)
    n = microbatches_for(b, t, cfg.num_microbatches, cfg.microbatch_tokens, shards)
    return accumulate_gradients(fn, params, rows, weights, n, constrain)


def _with_frozen(fn: Callable, frozen: Any) -> Callable:
    """``fn(params, x, w)`` over the full tree: the frozen base merged with the trainable adapters."""
    from mojax.models.lora import merge

    return lambda p, x, w: fn(merge(frozen, p), x, w)


def _mean_over_updates(per_update: dict[str, jax.Array]) -> dict[str, jax.Array]:
    out = {}
    for k, v in per_update.items():
        v = v.reshape(-1)
        if k == "ratio_min":
            out[k] = jnp.min(v)
        elif k == "ratio_max":
            out[k] = jnp.max(v)
        elif k in ("skipped_updates", "tokens"):
            out[k] = jnp.sum(v)
        elif k in ("learning_rate", "param_norm"):
            out[k] = v[-1]
        else:
            out[k] = jnp.mean(v)
    return out


def ppo_update(
    state: TrainState,
    batch: PPOBatch,
    *,
    model_config: QwenConfig,
    cfg: PPOConfig,
    tx: optax.GradientTransformation,
    mesh: Mesh | None = None,
    rules=None,
    lr_schedule: Callable | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """The pure body of ``train_step``: epochs x mini-batches of accumulated PPO updates."""
    b = batch.tokens.shape[0]
    rng, shuffle_key = jax.random.split(state.rng)
    epoch_keys = jax.random.split(shuffle_key, cfg.ppo_epochs)
    rows = rows_only(batch)
    lora_rng = None
    if model_config.lora is not None and model_config.lora.dropout > 0.0:
        lora_rng = jax.random.fold_in(state.rng, state.step)

    def minibatch_update(carry, mb):
        params, opt_state, step = carry
        grads, metrics = ppo_grads(
            model_config,
            cfg,
            params,
            dataclasses.replace(mb, clip_eps=batch.clip_eps),
            mesh=mesh,
            rules=rules,
            frozen=state.frozen,
            lora_rng=lora_rng,
        )
        params, opt_state, step, norms = apply_update(
            tx, params, opt_state, step, grads, metrics["loss"], lr_schedule
        )
        return (params, opt_state, step), {**metrics, **norms}

    def epoch(carry, key):
        if cfg.shuffle:
            perm = jax.random.permutation(key, b)
            mbs = split_rows(
                jax.tree.map(lambda x: jnp.take(x, perm, axis=0), rows), cfg.num_minibatches
            )
        else:
            mbs = split_rows(rows, cfg.num_minibatches)
        return jax.lax.scan(minibatch_update, carry, mbs)

    carry = (state.params, state.opt_state, state.step)
    (params, opt_state, step), per_update = jax.lax.scan(epoch, carry, epoch_keys)
    metrics = _mean_over_updates(per_update)
    metrics["num_updates"] = jnp.asarray(cfg.ppo_epochs * cfg.num_minibatches, jnp.float32)
    return state.replace(step=step, params=params, opt_state=opt_state, rng=rng), metrics
