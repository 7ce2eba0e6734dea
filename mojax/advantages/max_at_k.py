"""Max@k training: advantages from the unbiased on-policy max@k gradient (VPO's baseline).

Bagirov et al., "The Best of N Worlds: Aligning Reinforcement Learning with Best-of-N Sampling via
max@k Optimisation" (arXiv:2510.23393), Sec. 3.2, Eq. 9, and the "BoN mean" variance reduction of
App. A (the estimator VPO, arXiv:2605.22817, trains its Max-at-K baseline with). Per group, with the
``n`` valid scalar rewards ``s = w* . r`` sorted ascending ``s_(1) <= ... <= s_(n)`` (1-based),
every sample gets the transformed reward

``r~_(i) = [C(i-1, k-1) s_(i) + sum_{j > i} C(j-2, k-2) s_(j)] / C(n, k)``

which equals ``(1 / C(n, k)) sum_{I ∋ i, |I| = k} max_{j in I} s_j`` (the credit of sample i over
all k-subsets that contain it; ties give the same value whatever their order). Then
``normalize="zscore"`` (default; the paper's "BoN mean": GRPO's group z-score of ``r~``),
``"center"`` (``r~ - mean_g r~``) or ``"none"`` (raw ``r~``, the plain unbiased gradient weights).

mojax decisions: the off-policy correction of the paper's Sec. 3.3 (first order in ``rho - 1``) is
not applied; with one PPO epoch per batch (VPO's recipe) the update is on-policy and it vanishes.
A group with fewer than ``k`` (or 2) valid samples cannot form a k-subset and gets advantage 0.
The binomial weights are tabulated on the host in float64 for every possible ``n <= G``.
"""

from __future__ import annotations

from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from mojax.advantages import _common as C
from mojax.advantages._method import Method

__all__ = ["MAX_AT_K", "max_at_k", "max_at_k_coefficients", "NORMALIZE_MODES"]

NORMALIZE_MODES = ("zscore", "center", "none")


def max_at_k_coefficients(g: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(diag, off)``, float64 ``[G + 1, G]``: for ``n`` valid samples (row n) and sorted position
    ``i`` (column ``i - 1``), ``diag = C(i-1, k-1) / C(n, k)`` and ``off = C(i-2, k-2) / C(n, k)``
    (0 where ``i > n``, ``n < k`` or the binomial is empty)."""
    diag = np.zeros((g + 1, g))
    off = np.zeros((g + 1, g))
    for n in range(k, g + 1):
        total = comb(n, k)
        for i in range(1, n + 1):
            diag[n, i - 1] = comb(i - 1, k - 1) / total
            if k >= 2 and i >= 2:
                off[n, i - 1] = comb(i - 2, k - 2) / total
    return diag, off


def _impl(rewards, valid, weights, diag, off, eps, *, k, normalize, std_ddof):
    r, mask = C.effective_mask(rewards, valid)
    s = r @ weights  # [P, G]
    n = jnp.sum(mask, axis=-1)  # [P]
    order = jnp.argsort(jnp.where(mask, s, jnp.inf), axis=-1, stable=True)  # valid first, ascending
    s_sorted = jnp.take_along_axis(jnp.where(mask, s, 0.0), order, axis=-1)
    d, o = diag[n], off[n]  # [P, G] coefficients of each sorted position
    contrib = o * s_sorted
    after = jnp.cumsum(contrib[..., ::-1], axis=-1)[..., ::-1] - contrib  # sum over j > i
    tilde_sorted = d * s_sorted + after
    inv = jnp.argsort(order, axis=-1)
    tilde = jnp.take_along_axis(tilde_sorted, inv, axis=-1)
    enough = (n >= max(k, 2))[:, None]
    keep = mask & enough
    if normalize == "zscore":
        adv, std = C.group_zscore(tilde, keep, eps=eps, ddof=std_ddof)
    elif normalize == "center":
        adv, std = C.group_zscore(tilde, keep, eps=eps, scale_by_std=False)
    else:
        adv, std = tilde, None
    metrics = C.group_metrics(mask, std)
    est = jnp.sum(jnp.where(mask, tilde, 0.0), axis=-1) / k  # = the group's unbiased max@k
    n_groups = jnp.maximum(jnp.sum(enough), 1)
    metrics["max_at_k/estimate/mean"] = jnp.sum(jnp.where(enough[:, 0], est, 0.0)) / n_groups
    metrics["max_at_k/short_group_frac"] = 1.0 - jnp.mean(enough.astype(jnp.float32))
    return C.AdvantageOutput(C.finalize(adv, keep), None, metrics, None)


_jit = jax.jit(_impl, static_argnames=("k", "normalize", "std_ddof"))


def max_at_k(
    rewards,
    valid=None,
    *,
    k: int = 3,
    weights=None,
    normalize: str = "zscore",
    std_ddof: int = 0,
    eps: float = 1e-6,
) -> C.AdvantageOutput:
    """Max@k advantages (Bagirov et al., arXiv:2510.23393, Eq. 9 + "BoN mean").

    Args:
      rewards: float ``[P, G, M]`` (single-answer rollouts); valid: bool ``[P, G]`` or None.
      k: the best-of-k budget, ``1 <= k <= G`` (mojax default 3 = VPO's m answers; the VPO paper
        does not give the k of its Max-at-K baseline). ``k = 1`` reduces to GRPO.
      weights: ``w*`` ``[M]`` scalarizing each sample (None = uniform mean).
      normalize: ``"zscore"`` (paper's "BoN mean"), ``"center"`` or ``"none"``.
      std_ddof, eps: the z-score's std ddof and offset (as :func:`grpo`).
    """
    C.check_choice("normalize", normalize, NORMALIZE_MODES)
    C.check_choice("std_ddof", std_ddof, (0, 1))
    rewards, valid = C.check_batch(rewards, valid)
    _, g, m = rewards.shape
    if not 1 <= int(k) <= g:
        raise ValueError(f"k must be in [1, G={g}] for max_at_k; got {k}")
    w = C.check_weights(weights, m, default=1.0 / m)
    diag, off = max_at_k_coefficients(g, int(k))
    return _jit(
        rewards, valid, w, jnp.asarray(diag, jnp.float32), jnp.asarray(off, jnp.float32), eps,
        k=int(k), normalize=normalize, std_ddof=std_ddof,
    )  # fmt: skip


MAX_AT_K = Method("max_at_k", max_at_k)
