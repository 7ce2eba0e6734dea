"""Shared pieces of the advantage transforms: result type, input checks and masked group statistics.

Every estimator takes ``rewards [P, G, M]`` (or VPO's ``[P, G, S, M]``) and ``valid [P, G]`` and
returns an :class:`AdvantageOutput`. Two layers of protection keep NaN out of the advantages:

* outside jit (concrete inputs), shapes, ``M = 0`` and non-finite rewards in rows marked valid are a
  ``ValueError`` that names the argument (a bug upstream should fail loudly, not be averaged away);
* inside jit (traced inputs), a row with any non-finite reward is treated as invalid.

Groups with fewer than 2 valid samples get advantage 0 (methods.md; verl returns the raw score there
-- mojax does not), and invalid rows get exactly 0.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["AdvantageOutput"]


class AdvantageOutput(NamedTuple):
    """What every estimator returns (a pytree, so it can leave a jitted function).

    Attributes:
      advantages: float32 ``[P, G]``; exactly 0 where the sample is invalid; never NaN.
      state: pytree carried across steps (e.g. AWPO's running peak), or None.
      metrics: dict of scalar arrays (weights, gate fractions, number of fronts, ...).
      clip_eps: scalar PPO clip radius to use for this batch (AWPO, Eq. 29), or None.
    """

    advantages: jax.Array
    state: Any = None
    metrics: dict | None = None
    clip_eps: jax.Array | None = None


def is_concrete(*xs) -> bool:
    """True when none of ``xs`` is a tracer (so values can be checked on the host)."""
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}")


def check_batch(
    rewards, valid, *, name: str = "rewards", valid_name: str = "valid", ndim: int = 3
) -> tuple[jax.Array, jax.Array]:
    """Converts and checks ``rewards [P, G, (S,) M]`` and ``valid [P, G, (S)]``.

    Returns float32 rewards and bool valid (all True when ``valid`` is None).
    """
    rewards = jnp.asarray(rewards)
    legend = "[P, G, M]" if ndim == 3 else "[P, G, S, M]"
    if rewards.ndim != ndim:
        raise ValueError(f"{name} must have shape {legend}; got shape {rewards.shape}")
    if rewards.shape[-1] == 0:
        raise ValueError(f"{name} has M = 0 objectives (shape {rewards.shape}); need M >= 1")
    if not jnp.issubdtype(rewards.dtype, jnp.floating) or rewards.dtype != jnp.float32:
        rewards = rewards.astype(jnp.float32)
    mask_shape = rewards.shape[:-1]
    if valid is None:
        valid = jnp.ones(mask_shape, dtype=bool)
    else:
        valid = jnp.asarray(valid)
        if valid.shape != mask_shape:
            raise ValueError(
                f"{valid_name} must have shape {mask_shape} ({name}.shape[:-1]); got {valid.shape}"
            )
        if valid.dtype != jnp.bool_:
            valid = valid.astype(bool)
    if is_concrete(rewards, valid) and not np.isfinite(r := np.asarray(rewards)).all():
        bad = np.asarray(valid) & ~np.all(np.isfinite(r), axis=-1)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{name} has non-finite values in {int(bad.sum())} row(s) marked valid (first at "
                f"index {idx}); mark them invalid with {valid_name}=False"
            )
    return rewards, valid


def check_weights(
    weights, num_objectives: int, *, default: float, name: str = "weights", rows=None
):
    """``weights`` as float32 ``[M]`` (or ``[P, M]`` when ``rows = P``); None -> ``default``."""
    if weights is None:
        return jnp.full((num_objectives,), default, dtype=jnp.float32)
    w = jnp.asarray(weights, dtype=jnp.float32)
    shapes = [(num_objectives,)] + ([(rows, num_objectives)] if rows is not None else [])
    if w.shape not in shapes:
        raise ValueError(f"{name} must have shape {' or '.join(map(str, shapes))}; got {w.shape}")
    if is_concrete(w) and not np.all(np.isfinite(np.asarray(w))):
        raise ValueError(f"{name} must be finite; got {np.asarray(w)}")
    return w


def check_per_sample(x, shape, name: str, *, nonnegative: bool = False):
    """A per-sample array (e.g. token counts, reward scales) of shape ``shape`` or a scalar."""
    x = jnp.asarray(x, dtype=jnp.float32)
    if x.shape not in ((), tuple(shape)):
        raise ValueError(f"{name} must be a scalar or have shape {tuple(shape)}; got {x.shape}")
    if is_concrete(x):
        v = np.asarray(x)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name} must be finite")
        if nonnegative and np.any(v < 0):
            raise ValueError(f"{name} must be >= 0")
    return jnp.broadcast_to(x, tuple(shape))


def effective_mask(rewards: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """In-jit: rows with any non-finite reward become invalid; invalid rows are zeroed."""
    mask = valid & jnp.all(jnp.isfinite(rewards), axis=-1)
    return jnp.where(mask[..., None], rewards, 0.0), mask


def masked_moments(x: jax.Array, mask: jax.Array, axis, ddof: int = 0):
    """Mean, std (``ddof``), count and deviations ``x - mean`` over ``axis`` where ``mask``.

    Statistics are computed after subtracting the largest valid value, so a set of identical
    values has deviations and std of exactly 0 (a plain ``sum / n`` can be off by one ulp, which
    ``(x - mean) / (std + eps)`` would blow up to O(0.1) advantages).
    """
    m = mask.astype(x.dtype)
    shift = jnp.max(jnp.where(mask, x, -jnp.inf), axis=axis, keepdims=True)
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
    xc = jnp.where(mask, x - shift, 0.0)
    count = jnp.sum(m, axis=axis, keepdims=True)
    mean_c = jnp.sum(xc, axis=axis, keepdims=True) / jnp.maximum(count, 1.0)
    dev = jnp.where(mask, xc - mean_c, 0.0)
    var = jnp.sum(dev**2, axis=axis, keepdims=True) / jnp.maximum(count - ddof, 1.0)
    return mean_c + shift, jnp.sqrt(var), count, dev


def group_ok(mask: jax.Array) -> jax.Array:
    """``[P, 1]``: the group has at least 2 valid samples."""
    return jnp.sum(mask, axis=-1, keepdims=True) >= 2


def group_zscore(x, mask, *, eps, ddof: int = 0, scale_by_std: bool = True, min_std=None):
    """``(x - mean_g) / (std_g + eps)`` per group over valid samples (``x - mean_g`` without std).

    Invalid samples and groups with < 2 valid samples get 0; with ``min_std``, groups whose std is
    below it get 0 as a whole (VPO's authors' code).
    """
    _, std, _, dev = masked_moments(x, mask, axis=-1, ddof=ddof)
    adv = dev / (std + eps) if scale_by_std else dev
    keep = mask & group_ok(mask)
    if min_std is not None:
        keep = keep & (std >= min_std)
    return jnp.where(keep, adv, 0.0), std


def batch_normalize(a, keep, *, eps, token_counts=None, ddof: int = 0):
    """GDPO's batch normalisation (SAW Eq. 7): z-score of ``a`` over all kept samples.

    ``token_counts`` (``[P, G]``) switches to token weighting (verl): each sample counts once per
    response token in the mean and the std. ``ddof=1`` divides the variance by ``total - 1``
    (samples, or tokens when token-weighted) as ``torch.std`` / verl's ``masked_whiten`` do.
    """
    w = keep.astype(a.dtype)
    if token_counts is not None:
        w = w * token_counts
    shift = jnp.max(jnp.where(keep, a, -jnp.inf))
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
    ac = jnp.where(keep, a - shift, 0.0)
    total = jnp.maximum(jnp.sum(w), 1e-30)
    dev = ac - jnp.sum(w * ac) / total
    std = jnp.sqrt(jnp.sum(w * dev**2) / jnp.maximum(total - ddof, 1e-30))
    return jnp.where(keep, dev / (std + eps), 0.0)


def finalize(adv: jax.Array, keep: jax.Array) -> jax.Array:
    """float32 advantages, exactly 0 outside ``keep`` (and never NaN)."""
    adv = adv.astype(jnp.float32)
    return jnp.where(keep & jnp.isfinite(adv), adv, 0.0)


def group_metrics(mask: jax.Array, std: jax.Array | None = None) -> dict:
    """Metrics every estimator logs: valid, degenerate-group and zero-variance-group fractions."""
    ok = group_ok(mask)[..., 0].astype(jnp.float32)
    out = {
        "adv/valid_frac": jnp.mean(mask.astype(jnp.float32)),
        "adv/degenerate_group_frac": 1.0 - jnp.mean(ok),
    }
    if std is not None:
        zero = (std[..., 0] <= 0.0).astype(jnp.float32) * ok
        out["adv/zero_std_group_frac"] = jnp.sum(zero) / jnp.maximum(jnp.sum(ok), 1.0)
    return out
