"""Policy-gradient losses: PPO-clip (asymmetric, dual clip, AWPO radius), KL to a reference, SFT.

Everything here is a pure function of ``[B, T]`` token arrays, so the train step can call it per
micro-batch. Formulas are those of ``methods.md`` ("PPO-clip update"):

* ratio ``ρ_t = exp(logπ − logπ_old)`` (PPO, Schulman et al. 2017, eq. 6);
* per-token objective ``o = min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A)`` (PPO eq. 7 with DAPO's
  decoupled "clip-higher" bounds, DAPO eq. 10);
* dual clip for ``A < 0``: ``o = max(o, c A)`` (Ye et al. 2020, eq. 5), i.e. the loss ``−o`` is capped
  at ``−c A``;
* token loss ``−o + β_KL · kl − β_H · H`` aggregated by one of four modes (below);
* KL to a frozen reference with ``q = logπ_ref − logπ``: ``k1 = −q``, ``k2 = q² / 2``,
  ``k3 = exp(q) − q − 1`` (Schulman's estimators). ``k3`` is clamped to ``[−10, 10]`` (and ``q`` to
  ``[−20, 20]`` before the exp so it cannot overflow), as verl's ``low_var_kl``.

Aggregation modes (``agg``), with ``m`` the loss mask, ``n_b = Σ_t m_bt`` and ``N`` the number of
sequences with at least one loss token (sequences with none are left out rather than divided by 0):

* ``token-mean`` (DAPO): ``Σ_bt m ℓ / Σ_bt m``;
* ``seq-mean-token-mean`` (GRPO paper): ``(1/N) Σ_b (1/n_b) Σ_t m ℓ``;
* ``seq-mean-token-sum``: ``(1/N) Σ_b Σ_t m ℓ``;
* ``seq-mean-token-sum-norm`` (Dr.GRPO, Liu et al. 2025, sec. 3.1): ``(1/N) Σ_b Σ_t m ℓ / L_max`` with
  a *constant* normaliser ``L_max`` (``max_len``; default the padded length T of the batch, so give
  the generation budget explicitly when T varies across steps). ``num_seqs`` fixes ``N`` as well
  (verl's ``global_batch_size``), so that masking rows does not change the normaliser.

Every mode is written as fixed per-token weights ``w_bt`` (``aggregation_weights``) so that a batch
split into micro-batches gives exactly the loss and gradient of the whole batch when the weights
are computed once on the whole (mini-)batch.

Importance ratio level (``ratio_level``): ``"token"`` (default, PPO) or ``"sequence"`` — AWPO
(arXiv:2512.19126) Eq. 30 / Algorithm 1: one ratio per response, ``r_b = π(y_b|x)/π_old(y_b|x) =
exp(Σ_t m_bt (logπ − logπ_old))`` (the literal product, not GSPO's length-normalised geometric
mean; the log-ratio is clamped to ``[−20, 20]`` so that ``exp`` cannot overflow), ``o_b =
min(r_b A_b, clip(r_b, 1 − ε, 1 + ε) A_b)`` (dual clip as above), and the sequence objective ``o_b``
takes the place of every token's ``o``. The loss is then ``Σ_b (Σ_t w_bt)(−o_b)``: with
``agg="seq-mean-token-mean"`` each sequence weighs ``1/N`` — Algorithm 1's ``1/(GK)`` mean over the
G·K responses (N counts the sequences with a loss token, so padding rows do not dilute it).

Shape legend: B sequences, T tokens.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
KL_TYPES = ("k1", "k2", "k3")
RATIO_LEVELS = ("token", "sequence")
K3_CLAMP = 10.0
_Q_CLAMP = 20.0
SEQ_LOG_RATIO_CLAMP = 20.0


def _check_choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {list(allowed)}")


def aggregation_weights(
    loss_mask: jax.Array, agg: str = "token-mean", max_len=None, num_seqs=None
) -> jax.Array:
    """Per-token weights ``w [B, T]`` (fp32) with ``loss = Σ_bt w_bt ℓ_bt`` for the mode ``agg``.

    Args:
      loss_mask: [B, T], 1 on tokens that carry loss.
      agg: one of ``AGGREGATIONS`` (see the module docstring for the formulas).
      max_len: the constant ``L_max`` of ``seq-mean-token-sum-norm`` (default T).
      num_seqs: a constant sequence count ``N`` for the ``seq-mean-*`` modes (verl's
        ``global_batch_size``: every row counts, masked or not). Default None: ``N`` = the
        sequences with at least one loss token (verl's fallback when no global batch size is
        given). A constant ``N`` keeps Dr.GRPO's normaliser independent of how many rows are masked.

    Returns:
      fp32 [B, T]; all zeros when the mask is empty (the loss is then 0, never NaN).
    """
    _check_choice("agg", agg, AGGREGATIONS)
    m = loss_mask.astype(jnp.float32)
    if agg == "token-mean":
        return m / jnp.maximum(m.sum(), 1.0)
    n_b = m.sum(axis=-1, keepdims=True)  # [B, 1]
    if num_seqs is None:
        num_seqs = jnp.maximum(jnp.sum(n_b > 0), 1).astype(jnp.float32)
    else:
        if isinstance(num_seqs, (int, float)) and not num_seqs > 0:
            raise ValueError(f"num_seqs must be positive, got {num_seqs!r}")
        num_seqs = jnp.asarray(num_seqs, jnp.float32)
    if agg == "seq-mean-token-mean":
        return m / (jnp.maximum(n_b, 1.0) * num_seqs)
    if agg == "seq-mean-token-sum":
        return m / num_seqs
    norm = float(m.shape[-1] if max_len is None else max_len)
    if norm <= 0:
        raise ValueError(f"max_len must be positive, got {max_len!r}")
    return m / (num_seqs * norm)


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, kl_type: str = "k3") -> jax.Array:
    """Per-token estimate of KL(π ‖ π_ref) from sampled tokens, ``q = logπ_ref − logπ`` [B, T].

    ``k1 = −q`` (unbiased, high variance), ``k2 = q²/2``, ``k3 = exp(q) − q − 1`` (unbiased, ≥ 0,
    low variance; clamped to [−10, 10] as methods.md fixes).
    """
    _check_choice("kl_type", kl_type, KL_TYPES)
    q = ref_logprobs.astype(jnp.float32) - logprobs.astype(jnp.float32)
    if kl_type == "k1":
        return -q
    if kl_type == "k2":
        return 0.5 * jnp.square(q)
    q = jnp.clip(q, -_Q_CLAMP, _Q_CLAMP)
    return jnp.clip(jnp.exp(q) - q - 1.0, -K3_CLAMP, K3_CLAMP)


def ppo_token_terms(
    logprobs: jax.Array,
    old_logprobs: jax.Array,
    advantages: jax.Array,
    *,
    clip_low: float | jax.Array = 0.2,
    clip_high: float | jax.Array = 0.2,
    clip_eps: float | jax.Array | None = None,
    dual_clip: float | None = None,
    ratio_level: str = "token",
    loss_mask: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """Unaggregated PPO-clip terms [B, T]: ``pg_loss = −o`` and the indicators used for metrics.

    ``clip_eps`` (AWPO's batch radius, eqs. 29-30) replaces both bounds: ``(1 − ε, 1 + ε)``.
    ``ratio_level="sequence"`` (AWPO Eq. 30) uses one ratio per sequence over its ``loss_mask``
    tokens (required then) and the sequence's advantage (``[B]``, or the mask-mean of ``[B, T]``);
    the per-sequence terms are broadcast over the sequence's tokens.
    """
    _check_choice("ratio_level", ratio_level, RATIO_LEVELS)
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (methods.md uses c = 3), got {dual_clip!r}")
    if ratio_level == "sequence" and loss_mask is None:
        raise ValueError('ratio_level="sequence" needs the loss_mask (the tokens of each response)')
    if clip_eps is not None:
        clip_low = clip_high = clip_eps
    logprobs = logprobs.astype(jnp.float32)
    adv = advantages.astype(jnp.float32)
    log_ratio = logprobs - old_logprobs.astype(jnp.float32)
    if ratio_level == "sequence":
        m = loss_mask.astype(jnp.float32)
        if adv.ndim == logprobs.ndim:  # per-token advantages: the sequence's mean over its mask
            adv = jnp.sum(adv * m, -1) / jnp.maximum(jnp.sum(m, -1), 1.0)
        seq_lr = jnp.clip(jnp.sum(log_ratio * m, -1), -SEQ_LOG_RATIO_CLAMP, SEQ_LOG_RATIO_CLAMP)
        ratio = jnp.broadcast_to(jnp.exp(seq_lr)[..., None], logprobs.shape)
        adv = jnp.broadcast_to(adv[..., None], logprobs.shape)
    else:
        if adv.ndim == logprobs.ndim - 1:  # per-sequence [B] -> [B, 1]
            adv = adv[..., None]
        adv = jnp.broadcast_to(adv, logprobs.shape)
        ratio = jnp.exp(log_ratio)
    lo, hi = 1.0 - clip_low, 1.0 + clip_high
    o = jnp.minimum(ratio * adv, jnp.clip(ratio, lo, hi) * adv)
    dual = jnp.zeros_like(o, dtype=bool)
    if dual_clip is not None:
        dual = (adv < 0) & (o < dual_clip * adv)
        o = jnp.where(adv < 0, jnp.maximum(o, dual_clip * adv), o)
    return {
        "pg_loss": -o,
        "ratio": ratio,
        "clipped_high": (adv > 0) & (ratio > hi),
        "clipped_low": (adv < 0) & (ratio < lo),
        "dual_clipped": dual,
        # k3 estimate of KL(π_old ‖ π) between the sampler and the current policy (for logging)
        "approx_kl": jnp.exp(-log_ratio) + log_ratio - 1.0,
    }


def ppo_clip_loss(
    logprobs: jax.Array,
    old_logprobs: jax.Array,
    advantages: jax.Array,
    loss_mask: jax.Array,
    *,
    clip_low: float | jax.Array = 0.2,
    clip_high: float | jax.Array = 0.2,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    ref_logprobs: jax.Array | None = None,
    kl_coef: float = 0.0,
    kl_type: str = "k3",
    clip_eps: float | jax.Array | None = None,
    entropy: jax.Array | None = None,
    entropy_coef: float = 0.0,
    max_len: int | None = None,
    token_weights: jax.Array | None = None,
    ratio_level: str = "token",
    num_seqs: int | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO-clip policy loss (methods.md "PPO-clip update"), differentiable in ``logprobs``.

    Args:
      logprobs: fp32 [B, T], log π(token_t | tokens_<t) under the current policy.
      old_logprobs: [B, T], the same under the sampling policy (constants).
      advantages: per token [B, T] or per sequence [B] (broadcast over T).
      loss_mask: [B, T], 1 on policy-generated tokens.
      clip_low, clip_high: ε_low, ε_high of the clip range ``[1 − ε_low, 1 + ε_high]``.
      dual_clip: c > 1 for the dual clip of negative advantages (None = off).
      agg: aggregation mode, see the module docstring.
      ref_logprobs: [B, T] under the frozen reference; required when ``kl_coef != 0``.
      kl_coef: β of the KL loss term; kl_type: ``"k1" | "k2" | "k3"``.
      clip_eps: a per-batch clip radius (AWPO eqs. 29-30) overriding both bounds symmetrically.
      entropy: [B, T] per-token policy entropy, for the bonus ``− entropy_coef · H``.
      max_len: the constant normaliser of ``seq-mean-token-sum-norm``.
      token_weights: precomputed ``aggregation_weights`` (micro-batching); overrides ``agg``.
      num_seqs: constant sequence count of the ``seq-mean-*`` modes (see
        :func:`aggregation_weights`; default: sequences with a loss token).
      ratio_level: ``"token"`` (default) or ``"sequence"`` (AWPO Eq. 30: one ratio per response;
        with ``agg="seq-mean-token-mean"`` the loss is the ``1/(GK)`` mean of Algorithm 1). The
        ratio metrics are then token-weighted means of the sequence ratios.

    Returns:
      ``(loss, metrics)``: scalar fp32 loss and scalar metrics ``pg_loss, kl, entropy,
      clip_frac_low, clip_frac_high, dual_clip_frac, approx_kl, ratio_mean, ratio_min,
      ratio_max`` (token means over the loss mask; ``pg_loss``/``kl``/``entropy`` use ``agg``).
    """
    _check_loss_inputs(logprobs, old_logprobs, advantages, loss_mask)
    _check_terms(kl_coef, ref_logprobs, entropy_coef, entropy)
    terms = ppo_token_terms(
        logprobs,
        old_logprobs,
        advantages,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_eps=clip_eps,
        dual_clip=dual_clip,
        ratio_level=ratio_level,
        loss_mask=loss_mask,
    )
    w = (
        aggregation_weights(loss_mask, agg, max_len, num_seqs)
        if token_weights is None
        else token_weights
    )
    token_loss = terms["pg_loss"]
    metrics = {"pg_loss": jnp.sum(w * terms["pg_loss"])}
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs, kl_type)
        metrics["kl"] = jnp.sum(w * kl)
        if kl_coef != 0.0:
            token_loss = token_loss + kl_coef * kl
    if entropy is not None:
        metrics["entropy"] = jnp.sum(w * entropy)
        if entropy_coef != 0.0:
            token_loss = token_loss - entropy_coef * entropy
    metrics.update(_ratio_metrics(terms, loss_mask))
    return jnp.sum(w * token_loss), metrics


def _check_terms(kl_coef, ref_logprobs, entropy_coef, entropy) -> None:
    if kl_coef != 0.0 and ref_logprobs is None:
        raise ValueError("kl_coef != 0 needs ref_logprobs (log-probs under the frozen reference)")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs the per-token entropy")


def _check_loss_inputs(logprobs, old_logprobs, advantages, loss_mask) -> None:
    if logprobs.shape != old_logprobs.shape or logprobs.shape != loss_mask.shape:
        raise ValueError(
            "logprobs, old_logprobs and loss_mask must share the shape [B, T]; got "
            f"{logprobs.shape}, {old_logprobs.shape}, {loss_mask.shape}"
        )
    if advantages.shape not in (logprobs.shape, logprobs.shape[:1]):
        raise ValueError(
            f"advantages must be [B, T] or [B] for logprobs {logprobs.shape}; got {advantages.shape}"
        )


def _ratio_metrics(terms: dict[str, jax.Array], loss_mask: jax.Array) -> dict[str, jax.Array]:
    """Token means over the loss mask of the clip indicators, approx KL and the ratio."""
    m = loss_mask.astype(bool)
    n = jnp.maximum(m.sum(), 1).astype(jnp.float32)

    def mean(x):
        return jnp.sum(jnp.where(m, x, 0.0)) / n

    return dict(
        clip_frac_low=mean(terms["clipped_low"].astype(jnp.float32)),
        clip_frac_high=mean(terms["clipped_high"].astype(jnp.float32)),
        dual_clip_frac=mean(terms["dual_clipped"].astype(jnp.float32)),
        approx_kl=mean(terms["approx_kl"]),
        ratio_mean=mean(terms["ratio"]),
        ratio_min=jnp.min(jnp.where(m, terms["ratio"], jnp.inf)),
        ratio_max=jnp.max(jnp.where(m, terms["ratio"], -jnp.inf)),
    )


def sft_loss(
    logprobs: jax.Array, loss_mask: jax.Array, *, token_weights: jax.Array | None = None
) -> jax.Array:
    """Token cross-entropy ``−Σ w log π(token)`` with token-mean weights by default (SFT)."""
    w = aggregation_weights(loss_mask, "token-mean") if token_weights is None else token_weights
    return -jnp.sum(w * logprobs.astype(jnp.float32))
