"""The sampler-learner mismatch and its corrections: pure functions of ``[B, T]`` log-probs (jit).

Two policies score every rollout token: the behaviour policy ``μ`` that sampled it (the sampler's
log-probs, recorded at generation: another numeric path, another dtype, or older weights when
generation runs ahead of the update) and ``π_old``, the learner's forward on the update's batch
before the update (``ppo.old_logprobs = "recompute"``). With ``δ_t = log π_old(y_t) − log μ(y_t)``
(clamped to ``[−20, 20]`` before any ``exp``, as verl's ``SAFETY_BOUND``), the token ratio is
``ρ_t = exp(δ_t)`` and, over the loss mask ``m``:

* mismatch (``mismatch_metrics``): the k3 estimate of ``KL(μ ‖ π_old) = E_μ[ρ − log ρ − 1]``, the
  k1 estimate ``E_μ[−δ]``, the mean / p99 / min / max of ``ρ`` and the fraction of tokens with ``ρ``
  outside ``[low, high]``;
* token-level truncated IS (``is_level="token"``): ``w_t = min(ρ_t, C)`` (TIS; verl
  ``rollout_corr_helper.compute_rollout_correction_weights`` with ``rollout_is="token"``, Tunix
  ``sampler_is="token"``);
* sequence-level truncated IS (``is_level="sequence"``): ``w_b = min(exp(Σ_t m_bt δ_bt), C)`` for
  every token of response ``b`` (verl ``rollout_is="sequence"``);
* token masking (``reject="token"``): a token with ``ρ_t ∉ [low, high]`` drops out of the loss
  mask (verl ``rollout_rs="token"``, Tunix ``sampler_rs="token"``); with ``is_level="token"`` and
  ``is_cap >= high`` the kept tokens carry ``ρ_t``: IcePop's masked importance weight ``M(ρ) = ρ``
  inside ``[α, β]``, 0 outside (Ring-1T, arXiv:2510.18855);
* sequence rejection (``reject="geometric"``): response ``b`` drops out when its geometric-mean
  ratio ``exp(Σ_t m δ / Σ_t m)`` lies outside ``[low, high]`` (verl ``rollout_rs="geometric"``,
  Tunix ``sampler_rs="geometric"``).

The weights are constants of the update (no gradient flows into them) and multiply the PPO-clip
term of each token, as verl's ``pg_losses * rollout_is_weights``: the update (batch key
``is_weights``, ``mojax.learner.ppo.ppo_loss_fn``) scales each token's advantage by ``w >= 0``,
which is the same term and gradient, ``w · min(ρA, clip(ρ)A) = min(ρ · wA, clip(ρ) · wA)`` (and
``w · max(o, cA) = max(w o, c · wA)`` for the dual clip), while the KL and entropy terms stay
unweighted. The masks shrink ``loss_mask``, so the aggregation's normaliser counts only the kept
tokens (verl modifies ``response_mask``). ``docs/methods.md``
("Off-policy correction") gives the formulas and their sources.

Shape legend: B sequences, T tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from mojax.config import Checker, dataclass_from_config, option

IS_LEVELS = ("none", "token", "sequence")
REJECTS = ("none", "token", "geometric")
OLD_LOGPROBS = ("sampler", "recompute")
SAFETY_BOUND = 20.0  # |δ| before exp (verl rollout_corr_helper.SAFETY_BOUND)


@dataclasses.dataclass(frozen=True)
class CorrectionConfig:
    """``config.rollout_correction``: importance weights and masks between sampler and learner.

    Needs ``ppo.old_logprobs="recompute"`` when on (the ratio ``π_old / μ`` is 1 otherwise).
    """

    SECTION: ClassVar[str] = "rollout_correction"
    is_level: str = option(
        "none",
        help='truncated IS weight of the PPO term: "none" | "token" min(ρ_t, is_cap) | '
        '"sequence" min(Π_t ρ_t, is_cap)',
    )
    is_cap: float = option(2.0, help="C: the truncation of the IS weight (verl / Tunix: 2.0)")
    reject: str = option(
        "none",
        help='"none" | "token": drop tokens with ρ_t outside [low, high] (masked IS; IcePop with '
        'is_level="token") | "geometric": drop responses whose geometric-mean ρ is outside',
    )
    low: float = option(0.5, help="lower edge of the band of reject and mismatch/frac_outside")
    high: float = option(2.0, help="upper edge of the band of reject and mismatch/frac_outside")

    def __post_init__(self):
        c = Checker({"rollout_correction": dataclasses.asdict(self)})
        c.choice("rollout_correction.is_level", IS_LEVELS)
        c.choice("rollout_correction.reject", REJECTS)
        c.in_range("rollout_correction.is_cap", 0.0, low_inclusive=False)
        c.in_range("rollout_correction.low", 0.0)
        c.require(
            self.high > self.low,
            "rollout_correction.high",
            f"{self.high!r} must exceed rollout_correction.low ({self.low!r})",
        )
        c.raise_if_any()

    @property
    def enabled(self) -> bool:
        return self.is_level != "none" or self.reject != "none"

    @classmethod
    def from_config(cls, cfg: Any) -> CorrectionConfig:
        """From a ConfigDict / mapping; unknown keys raise naming the key."""
        return dataclass_from_config(cls, cfg, "rollout_correction")


def log_ratio(old_logprobs: jax.Array, behave_logprobs: jax.Array) -> jax.Array:
    """``δ = log π_old − log μ`` [B, T] in fp32, clamped to ``[−SAFETY_BOUND, SAFETY_BOUND]``."""
    d = old_logprobs.astype(jnp.float32) - behave_logprobs.astype(jnp.float32)
    return jnp.clip(d, -SAFETY_BOUND, SAFETY_BOUND)


def _masked_mean(x: jax.Array, m: jax.Array, axis=None) -> jax.Array:
    return jnp.sum(x * m, axis=axis) / jnp.maximum(jnp.sum(m, axis=axis), 1.0)


def masked_quantile(x: jax.Array, mask: jax.Array, q: float) -> jax.Array:
    """The ``q`` quantile of ``x`` over ``mask`` (numpy's default linear interpolation); 0 when the
    mask is empty."""
    m = mask.astype(bool).reshape(-1)
    n = jnp.sum(m)
    s = jnp.sort(jnp.where(m, x.reshape(-1), jnp.inf))
    pos = q * (jnp.maximum(n, 1) - 1).astype(jnp.float32)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, jnp.maximum(n - 1, 0))
    out = s[lo] + (s[hi] - s[lo]) * (pos - lo)
    return jnp.where(n > 0, out, 0.0)


def mismatch_metrics(
    old_logprobs: jax.Array,
    behave_logprobs: jax.Array,
    loss_mask: jax.Array,
    *,
    low: float = 0.5,
    high: float = 2.0,
) -> dict[str, jax.Array]:
    """Scalars over the loss mask: ``kl_k3``, ``kl_k1`` (KL(μ ‖ π_old)), ``ratio_mean``,
    ``ratio_p99``, ``ratio_min``, ``ratio_max``, ``frac_outside`` (ρ outside ``[low, high]``),
    ``logprob_abs_diff`` (mean |δ|)."""
    m = loss_mask.astype(jnp.float32)
    d = log_ratio(old_logprobs, behave_logprobs)
    rho = jnp.exp(d)
    on = m > 0
    return {
        "kl_k3": _masked_mean(jnp.expm1(d) - d, m),  # ρ − log ρ − 1, exact for small δ
        "kl_k1": _masked_mean(-d, m),
        "ratio_mean": _masked_mean(rho, m),
        "ratio_p99": masked_quantile(rho, on, 0.99),
        "ratio_min": jnp.where(jnp.any(on), jnp.min(jnp.where(on, rho, jnp.inf)), 0.0),
        "ratio_max": jnp.where(jnp.any(on), jnp.max(jnp.where(on, rho, -jnp.inf)), 0.0),
        "frac_outside": _masked_mean(((rho < low) | (rho > high)).astype(jnp.float32), m),
        "logprob_abs_diff": _masked_mean(jnp.abs(d), m),
    }


def token_tis(delta: jax.Array, cap: float) -> tuple[jax.Array, jax.Array]:
    """Token-level truncated IS: ``(min(ρ_t, C) [B, T], truncated bool [B, T])``."""
    rho = jnp.exp(delta)
    return jnp.minimum(rho, cap), rho > cap


def sequence_tis(delta: jax.Array, mask: jax.Array, cap: float) -> tuple[jax.Array, jax.Array]:
    """Sequence-level truncated IS: ``(min(exp(Σ_t m δ_t), C)`` broadcast to [B, T], truncated
    bool [B])``; the summed log-ratio is clamped to ``[−SAFETY_BOUND, SAFETY_BOUND]``."""
    m = mask.astype(jnp.float32)
    s = jnp.clip(jnp.sum(delta * m, -1), -SAFETY_BOUND, SAFETY_BOUND)
    w = jnp.minimum(jnp.exp(s), cap)
    return jnp.broadcast_to(w[:, None], delta.shape), jnp.exp(s) > cap


def token_keep(delta: jax.Array, low: float, high: float) -> jax.Array:
    """Masked IS / IcePop: bool [B, T], True where ``low <= ρ_t <= high``."""
    rho = jnp.exp(delta)
    return (rho >= low) & (rho <= high)


def geometric_keep(delta: jax.Array, mask: jax.Array, low: float, high: float) -> jax.Array:
    """Sequence rejection: bool [B, T], True on every token of a response whose geometric-mean ratio
    ``exp(Σ_t m δ_t / Σ_t m)`` lies in ``[low, high]``."""
    m = mask.astype(jnp.float32)
    g = jnp.exp(jnp.clip(_masked_mean(delta, m, axis=-1), -SAFETY_BOUND, SAFETY_BOUND))
    keep = (g >= low) & (g <= high)
    return jnp.broadcast_to(keep[:, None], delta.shape)


def correct(
    old_logprobs: jax.Array,
    behave_logprobs: jax.Array,
    loss_mask: jax.Array,
    cfg: CorrectionConfig,
) -> tuple[jax.Array | None, jax.Array, dict[str, jax.Array]]:
    """``(is_weights [B, T] or None, loss_mask [B, T], metrics)`` of ``cfg``'s correction.

    ``is_weights`` is None when ``is_level="none"``; the returned mask is ``loss_mask`` with the
    rejected tokens set to 0 (same dtype). Metrics: ``is_weight_mean`` (over the kept tokens),
    ``is_truncated_frac`` (tokens, or responses at the sequence level, whose ratio exceeds the cap),
    ``masked_token_frac`` and ``rejected_seq_frac`` (responses that lost a token).
    """
    m = loss_mask.astype(jnp.float32)
    d = log_ratio(old_logprobs, behave_logprobs)
    keep = jnp.ones(d.shape, bool)
    if cfg.reject == "token":
        keep = token_keep(d, cfg.low, cfg.high)
    elif cfg.reject == "geometric":
        keep = geometric_keep(d, m, cfg.low, cfg.high)
    new_m = m * keep
    has = jnp.sum(m, -1) > 0
    lost = has & (jnp.sum(new_m, -1) < jnp.sum(m, -1))
    metrics = {
        "masked_token_frac": _masked_mean(1.0 - keep.astype(jnp.float32), m),
        "rejected_seq_frac": jnp.sum(lost) / jnp.maximum(jnp.sum(has), 1),
    }
    weights = None
    if cfg.is_level == "token":
        weights, cut = token_tis(d, cfg.is_cap)
        metrics["is_truncated_frac"] = _masked_mean(cut.astype(jnp.float32), m)
    elif cfg.is_level == "sequence":
        weights, cut = sequence_tis(d, m, cfg.is_cap)
        metrics["is_truncated_frac"] = jnp.sum(cut & has) / jnp.maximum(jnp.sum(has), 1)
    if weights is not None:
        weights = jax.lax.stop_gradient(weights * m)
        metrics["is_weight_mean"] = _masked_mean(weights, new_m)
    return weights, new_m.astype(loss_mask.dtype), metrics
