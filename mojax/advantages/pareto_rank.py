"""ParetoPO Stage 2: Pareto-rank advantages (ParetoPO, arXiv:2606.16111, Sec. 3.2, Eqs. 7-9).

Per group: non-dominated sort of the reward vectors -> rank ``rho in {1..N_rank}`` (N_rank = number
of fronts in the group); ``A_base = N_rank - rho + 1`` (Eq. 7); within each rank
``r_hat = (r_w - min) / (max - min)`` over that rank's members with ``r_w = w . r`` (Eq. 8), 0.5
when ``max = min`` (single-member ranks included); ``A = A_base + beta (r_hat - 0.5)`` (Eq. 9).

For ``beta <= 1`` every sample of a better rank gets a strictly larger A than every sample of a
worse rank, and ``|A| <= N_rank + beta / 2``. Switch ``normalize``: ``"none"`` (paper, Theorem 3.5;
default; an all-equal group gets A = 1 for every sample), ``"center"`` (subtract the group mean) or
``"zscore"`` (group z-score, population std + eps).

Whether the ranking acts (logged): ``pareto/reordered_pairs``, the fraction of a group's pairs of
valid samples in different fronts whose ``w . r`` does not strictly prefer the better-ranked one,
i.e. the pairs whose order Stage 2 sets differently from GRPO on ``w . r`` (within a front Eq. 8
keeps the ``w . r`` order, so no other pair can differ); ``pareto/reordered_group_frac``, the
fraction of groups with at least one. Both are 0 when every group is a chain under dominance (e.g.
``r_tool`` paid to successes only, ``tests/unit/advantages/test_pareto_rank_gate.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mojax.advantages import _common as C
from mojax.advantages._method import Method
from mojax.advantages.paretopo import ParetoPOSpec, make_hooks
from mojax.pareto.nondominated import _rank_impl

__all__ = ["PARETO_RANK", "pareto_rank", "NORMALIZE_MODES"]

NORMALIZE_MODES = ("none", "center", "zscore")
_TIE_RTOL = 1e-6  # relative tolerance for "max = min" in Eq. 8 (float32 resolution is ~1.2e-7)


def _impl(rewards, valid, weights, beta, eps, *, normalize):
    r, mask = C.effective_mask(rewards, valid)
    front = _rank_impl(r, mask)  # [P, G], 0-based, -1 invalid
    rho = front + 1
    n_rank = jnp.max(jnp.where(mask, rho, 0), axis=-1, keepdims=True)  # [P, 1]
    a_base = (n_rank - rho + 1).astype(jnp.float32)  # Eq. 7
    rw = r @ weights  # [P, G]
    same = (front[..., :, None] == front[..., None, :]) & mask[..., None, :]  # [P, G(i), G(j)]
    rw_j = rw[..., None, :]
    rmin = jnp.min(jnp.where(same, rw_j, jnp.inf), axis=-1)
    rmax = jnp.max(jnp.where(same, rw_j, -jnp.inf), axis=-1)
    # max = min up to float32 rounding counts as a tie (r_hat = 0.5): w . r of different vectors can
    # be equal exactly (0.6 * 2 = 0.4 * 3) yet differ by an ulp after rounding, which Eq. 8 would
    # otherwise blow up to r_hat in {0, 1}.
    scale = jnp.maximum(1.0, jnp.maximum(jnp.abs(rmax), jnp.abs(rmin)))
    spread = (rmax - rmin) > _TIE_RTOL * jnp.where(jnp.isfinite(scale), scale, 1.0)
    r_hat = jnp.where(spread, (rw - rmin) / jnp.where(spread, rmax - rmin, 1.0), 0.5)  # Eq. 8
    adv = a_base + beta * (jnp.clip(r_hat, 0.0, 1.0) - 0.5)  # Eq. 9
    adv = jnp.where(mask, adv, 0.0)
    if normalize == "center":
        adv, _ = C.group_zscore(adv, mask, eps=0.0, scale_by_std=False)
    elif normalize == "zscore":
        adv, _ = C.group_zscore(adv, mask, eps=eps)
    ok = C.group_ok(mask)
    okf = ok[..., 0].astype(jnp.float32)
    n_ok = jnp.maximum(jnp.sum(okf), 1.0)
    metrics = C.group_metrics(mask)
    metrics["pareto/num_fronts"] = jnp.sum(n_rank[..., 0] * okf) / n_ok
    n_valid = jnp.maximum(jnp.sum(mask * ok), 1)
    metrics["pareto/front0_frac"] = jnp.sum((front == 0) & ok) / n_valid
    metrics.update(_reordered(front, rw, mask & ok))
    return C.AdvantageOutput(C.finalize(adv, mask & ok), None, metrics, None)


def _reordered(front, rw, mask) -> dict:
    """``pareto/reordered_pairs`` and ``pareto/reordered_group_frac`` (module docstring) over the
    groups with >= 2 valid samples (``mask`` already False elsewhere): a pair ``i, j`` with
    ``front_i < front_j`` is reordered when ``rw_i <= rw_j`` up to Eq. 8's tie tolerance."""
    both = mask[..., :, None] & mask[..., None, :]  # [P, G, G]
    better = both & (front[..., :, None] < front[..., None, :])
    diff = rw[..., :, None] - rw[..., None, :]
    scale = jnp.maximum(1.0, jnp.maximum(jnp.abs(rw[..., :, None]), jnp.abs(rw[..., None, :])))
    reordered = better & (diff <= _TIE_RTOL * scale)
    n = jnp.sum(mask, axis=-1).astype(jnp.float32)  # [P]
    pairs = jnp.sum(n * (n - 1.0) / 2.0)
    per_group = jnp.sum(reordered, axis=(-2, -1))
    n_groups = jnp.sum(n >= 2.0)
    return {
        "pareto/reordered_pairs": jnp.sum(per_group) / jnp.maximum(pairs, 1.0),
        "pareto/reordered_group_frac": jnp.sum(per_group > 0) / jnp.maximum(n_groups, 1),
    }


_jit = jax.jit(_impl, static_argnames=("normalize",))


def pareto_rank(
    rewards,
    valid=None,
    *,
    weights=(0.6, 0.4),
    beta: float = 0.5,
    normalize: str = "none",
    eps: float = 1e-6,
) -> C.AdvantageOutput:
    """Pareto-rank advantages (ParetoPO Eqs. 7-9).

    Args:
      rewards: float ``[P, G, M]`` (ParetoPO: ``(r_task, r_tool)``).
      valid: bool ``[P, G]`` or None.
      weights: ``[M]`` preference used only inside a rank (Eq. 8); default ``(0.6, 0.4)``.
      beta: within-rank spread (Eq. 9); the rank-order guarantee needs ``beta <= 1``.
      normalize: ``"none"`` (default), ``"center"`` or ``"zscore"``.
      eps: std offset for ``"zscore"``.
    """
    C.check_choice("normalize", normalize, NORMALIZE_MODES)
    rewards, valid = C.check_batch(rewards, valid)
    w = C.check_weights(weights, rewards.shape[-1], default=1.0)
    return _jit(rewards, valid, w, beta, eps, normalize=normalize)


PARETO_RANK = Method("pareto_rank", pareto_rank, sections=(ParetoPOSpec,), hooks=make_hooks)
