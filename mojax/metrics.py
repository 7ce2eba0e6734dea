"""Evaluation metrics of multi-answer, multi-objective pools (host-side numpy).

From VPO (arXiv:2605.22817, Sec. 4.3 and App. F) and Chen et al. (2021):

* ``best@k`` = max over the first k answers of ``w* . r`` -- k counts answers, not chains
  (multi-answer chains are concatenated in draw order, so ``S_k`` for ``k <= S`` is one chain);
  ``best_at_k_unbiased`` is its expectation over every k-subset of the n answers (the same
  order-statistics estimator as ``max@k``), which uses all n samples instead of the first k;
* ``pass@k`` = the unbiased estimator ``1 - C(n - c, k) / C(n, k)``;
* reward-space diversity = mean pairwise L1 distance between the reward vectors of the pool's
  **valid** answers (``include_padding=True`` also counts invalid rows as zero vectors, as the
  authors' code does with its zero padding);
* collinearity ``rho_bar`` = mean off-diagonal Pearson correlation between objectives over all
  responses, after dropping zero-variance objectives (App. F, step 2);
* ``E_w[best@k]`` (VPO Tables 5-6) = the expectation over ``w ~ Dir(alpha 1)`` of
  ``max_{s in first k answers} w . r_s``, a Monte-Carlo mean over ``num_weights`` draws from a
  seeded numpy generator (or over given ``weight_samples``);
* ``max@k`` (Bagirov et al., arXiv:2510.23393, App. C.1) = the unbiased estimator
  ``sum_{i >= k} C(i-1, k-1) / C(n, k) r_(i)`` over the ascending-sorted rewards of n samples.
"""

from __future__ import annotations

from math import comb

import numpy as np

__all__ = [
    "best_at_k",
    "best_at_k_unbiased",
    "expected_best_at_k",
    "max_at_k",
    "pass_at_k",
    "reward_diversity",
    "collinearity",
    "flatten_sets",
]


def _pool(rewards, valid, name="rewards"):
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim < 2 or r.shape[-1] == 0:
        raise ValueError(f"{name} must have shape [..., N, M] with M >= 1; got {r.shape}")
    if valid is None:
        v = np.all(np.isfinite(r), axis=-1)
    else:
        v = np.asarray(valid, dtype=bool)
        if v.shape != r.shape[:-1]:
            raise ValueError(f"valid must have shape {r.shape[:-1]}; got {v.shape}")
        if np.any(v & ~np.all(np.isfinite(r), axis=-1)):
            raise ValueError(f"{name} has non-finite values in rows marked valid")
    return np.where(v[..., None], r, 0.0), v


def flatten_sets(set_rewards, set_valid=None):
    """``[..., C, S, M]`` chains of S answers -> ``[..., C*S, M]`` answers in draw order."""
    r = np.asarray(set_rewards)
    if r.ndim < 3:
        raise ValueError(f"set_rewards must have shape [..., C, S, M]; got {r.shape}")
    flat = r.reshape(r.shape[:-3] + (-1, r.shape[-1]))
    if set_valid is None:
        return flat, None
    sv = np.asarray(set_valid, dtype=bool)
    if sv.shape != r.shape[:-1]:
        raise ValueError(f"set_valid must have shape {r.shape[:-1]}; got {sv.shape}")
    return flat, sv.reshape(sv.shape[:-2] + (-1,))


def best_at_k(rewards, k: int, *, weights=None, valid=None, empty: float = 0.0) -> np.ndarray:
    """``max_{s in first k answers} w* . r_s`` per pool (VPO Sec. 4.3).

    Args:
      rewards: ``[..., N, M]`` answers in draw order (use :func:`flatten_sets` for chains).
      k: number of answers, ``1 <= k <= N``.
      weights: ``w*`` ``[M]``; None = uniform mean.
      valid: ``[..., N]``; invalid answers are skipped.
      empty: value for a pool with no valid answer among the first k (a missing answer scores as
        the zero vector in VPO, hence 0.0).

    Returns:
      ``[...]`` float64.
    """
    s, _ = _scores(rewards, k, weights, valid)
    s = s[..., : int(k)]
    best = s.max(axis=-1)
    return np.where(np.isfinite(best), best, empty)


def _scores(rewards, k: int, weights, valid) -> tuple[np.ndarray, int]:
    """``(w* . r_s`` per answer ``[..., N]`` with invalid answers ``-inf``, ``N)``; checks k and
    the shape of ``weights``."""
    r, v = _pool(rewards, valid)
    n, m = r.shape[-2:]
    if not 1 <= int(k) <= n:
        raise ValueError(f"k must be in [1, N={n}]; got {k}")
    w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (m,):
        raise ValueError(f"weights must have shape ({m},); got {w.shape}")
    return np.where(v, r @ w, -np.inf), n


def best_at_k_unbiased(
    rewards, k: int, *, weights=None, valid=None, empty: float = 0.0
) -> np.ndarray:
    """``E_{S ~ k-subsets of the n answers}[max_{s in S} w* . r_s]`` per pool.

    Sorting the n scores ascending, the maximum of a uniformly drawn k-subset is the i-th one with
    probability ``C(i-1, k-1) / C(n, k)``. Invalid answers sort lowest (``-inf``); a subset whose
    maximum is invalid holds only invalid answers and scores ``empty``, as :func:`best_at_k` scores
    a pool with no valid answer among its first k.

    Args:
      rewards: ``[..., N, M]`` answers; k: ``1 <= k <= N``; weights: ``w*`` ``[M]`` (None =
        uniform mean); valid: ``[..., N]``; empty: the value of an all-invalid subset.

    Returns:
      ``[...]`` float64.
    """
    s, n = _scores(rewards, k, weights, valid)
    s = np.sort(s, axis=-1)
    s = np.where(np.isfinite(s), s, empty)
    coef = np.array([comb(i - 1, int(k) - 1) for i in range(1, n + 1)], dtype=np.float64)
    return s @ (coef / comb(n, int(k)))


def expected_best_at_k(
    rewards,
    k: int,
    *,
    valid=None,
    alpha: float = 1.0,
    num_weights: int = 10_000,
    seed: int = 0,
    weight_samples=None,
    empty: float = 0.0,
) -> np.ndarray:
    """``E_{w ~ Dir(alpha 1)}[max_{s in first k answers} w . r_s]`` per pool (VPO Tables 5-6).

    Args:
      rewards: ``[..., N, M]`` answers in draw order; k: answers counted, ``1 <= k <= N``.
      valid: ``[..., N]``; invalid answers are skipped (as in :func:`best_at_k`).
      alpha, num_weights, seed: the Monte-Carlo draws ``w_1..w_K ~ Dir(alpha 1_M)`` from
        ``numpy.random.default_rng(seed)`` (the same draws for every pool, so pools are compared
        under the same weights).
      weight_samples: ``[K, M]`` explicit weights instead of the draws (each row a weighting).
      empty: value for a pool with no valid answer among the first k.

    Returns:
      ``[...]`` float64: the mean over the K weights of the best weighted score.
    """
    r, v = _pool(rewards, valid)
    n, m = r.shape[-2:]
    if not 1 <= int(k) <= n:
        raise ValueError(f"k must be in [1, N={n}]; got {k}")
    if weight_samples is None:
        if not float(alpha) > 0 or int(num_weights) < 1:
            raise ValueError(f"need alpha > 0 and num_weights >= 1; got {alpha}, {num_weights}")
        w = np.random.default_rng(seed).dirichlet(np.full(m, float(alpha)), size=int(num_weights))
    else:
        w = np.asarray(weight_samples, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != m or not np.all(np.isfinite(w)):
            raise ValueError(f"weight_samples must be finite with shape [K, {m}]; got {w.shape}")
    scores = np.einsum("...nm,km->...kn", r[..., : int(k), :], w)  # [..., K, k]
    scores = np.where(v[..., None, : int(k)], scores, -np.inf)
    best = scores.max(axis=-1)  # [..., K]
    any_valid = v[..., : int(k)].any(axis=-1)
    mean = np.where(np.isfinite(best), best, 0.0).mean(axis=-1)
    return np.where(any_valid, mean, empty)


def max_at_k(rewards, k: int) -> np.ndarray:
    """Unbiased ``max@k`` from ``n`` i.i.d. scalar rewards ``[..., n]`` (arXiv:2510.23393, App. C.1):
    the mean over all k-subsets of their maximum, ``sum_i C(i-1, k-1) / C(n, k) r_(i)``."""
    r = np.sort(np.asarray(rewards, dtype=np.float64), axis=-1)
    n = r.shape[-1]
    if not 1 <= int(k) <= n:
        raise ValueError(f"k must be in [1, n={n}]; got {k}")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    coef = np.array([comb(i - 1, int(k) - 1) for i in range(1, n + 1)], dtype=np.float64)
    return r @ (coef / comb(n, int(k)))


def pass_at_k(n, c, k) -> np.ndarray:
    """Unbiased ``pass@k = 1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021), elementwise.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which is exact and overflow-free.

    Args:
      n: samples drawn; c: correct samples (``0 <= c <= n``); k: budget (``1 <= k <= n``).
    """
    n, c, k = np.broadcast_arrays(np.asarray(n), np.asarray(c), np.asarray(k))
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("c must satisfy 0 <= c <= n")
    if np.any(k < 1) or np.any(k > n):
        raise ValueError("k must satisfy 1 <= k <= n")
    out = np.empty(n.shape, dtype=np.float64)
    for idx in np.ndindex(n.shape):
        ni, ci, ki = int(n[idx]), int(c[idx]), int(k[idx])
        if ni - ci < ki:
            out[idx] = 1.0
        else:
            out[idx] = 1.0 - np.prod(1.0 - ki / np.arange(ni - ci + 1, ni + 1))
    return out


def reward_diversity(rewards, valid=None, *, include_padding: bool = False) -> np.ndarray:
    """Mean pairwise L1 distance between reward vectors in each pool (VPO Sec. 4.3, Fig. 6).

    Args:
      rewards: ``[..., N, M]``.
      valid: ``[..., N]`` or None (all finite rows valid).
      include_padding: also count invalid rows, as zero vectors (authors' code); default False.

    Returns:
      ``[...]``; 0.0 for a pool with fewer than 2 counted answers (no spread).
    """
    r, v = _pool(rewards, valid)
    if include_padding:
        v = np.ones_like(v)
    dist = np.abs(r[..., :, None, :] - r[..., None, :, :]).sum(-1)  # [..., N, N]
    pair = v[..., :, None] & v[..., None, :]
    n = v.sum(-1)
    num_pairs = n * (n - 1)  # ordered pairs i != j (the diagonal is 0)
    total = np.where(pair, dist, 0.0).sum((-1, -2))
    return np.where(num_pairs > 0, total / np.maximum(num_pairs, 1), 0.0)


def collinearity(rewards, valid=None) -> float:
    """``rho_bar``: mean off-diagonal Pearson correlation of the objectives (VPO App. F).

    Args:
      rewards: ``[..., M]`` responses (flattened over all leading axes).
      valid: ``[...]`` or None.

    Returns:
      The mean of the ``D (D - 1)`` off-diagonal entries of ``np.corrcoef`` over the ``D``
      objectives with non-zero variance; NaN when fewer than 2 such objectives remain (undefined).
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim < 1 or r.shape[-1] == 0:
        raise ValueError(f"rewards must have shape [..., M] with M >= 1; got {r.shape}")
    r = r.reshape(-1, r.shape[-1])
    keep = np.all(np.isfinite(r), axis=-1)
    if valid is not None:
        v = np.asarray(valid, dtype=bool).reshape(-1)
        if v.shape[0] != r.shape[0]:
            raise ValueError(f"valid must have {r.shape[0]} entries; got {v.shape[0]}")
        if np.any(v & ~keep):
            raise ValueError("rewards has non-finite values in rows marked valid")
        keep &= v
    r = r[keep]
    if r.shape[0] < 2:
        return float("nan")
    r = r[:, r.std(axis=0) > 0]
    d = r.shape[1]
    if d < 2:
        return float("nan")
    corr = np.corrcoef(r, rowvar=False)
    return float((corr.sum() - np.trace(corr)) / (d * (d - 1)))
