"""Jit-compiled non-dominated sorting (Pareto ranks) over batched groups.

ParetoPO Stage 2 (000_e6cfe11db36d6d54, Sec. 3.2, Algorithm 1 line 26) ranks the G samples of
every prompt by Pareto dominance (Def. 2.1, Eq. 2). This module computes those ranks for a whole
batch at once: one dominance matrix per group (``[..., G, G]``, built objective by objective so
that nothing of size ``G * G * M`` is materialised), then front peeling in a ``lax.while_loop``
that stops as soon as every group is sorted. All objectives are maximised.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["dominance_matrix", "nondominated_rank"]


def dominance_matrix(points: jax.Array, valid: jax.Array) -> jax.Array:
    """``D[..., i, j]`` is True iff row ``i`` Pareto-dominates row ``j`` (maximisation).

    ``i`` dominates ``j`` when it is no worse in every objective and strictly better in at least
    one (000_e6cfe11db36d6d54, Eq. 2). Exact duplicates therefore never dominate each other, so
    they share a front. Invalid rows neither dominate nor are dominated.

    Args:
      points: ``[..., G, M]`` objective values, higher is better.
      valid: ``[..., G]`` bool.

    Returns:
      bool ``[..., G, G]``.
    """
    num_objectives = points.shape[-1]
    ge = None
    gt = None
    # A Python loop over M keeps every intermediate at [..., G, G]; XLA fuses it into one kernel.
    for m in range(num_objectives):
        col = points[..., m]
        a = col[..., :, None]  # [..., G, 1] row i
        b = col[..., None, :]  # [..., 1, G] row j
        ge = (a >= b) if ge is None else (ge & (a >= b))
        gt = (a > b) if gt is None else (gt | (a > b))
    both_valid = valid[..., :, None] & valid[..., None, :]
    return ge & gt & both_valid


def _rank_impl(points: jax.Array, valid: jax.Array) -> jax.Array:
    """Front peeling on ``[N, G, M]``; see :func:`nondominated_rank`."""
    finite = (
        jnp.all(jnp.isfinite(points), axis=-1)
        if jnp.issubdtype(points.dtype, jnp.floating)
        else True
    )
    valid = valid & finite
    dom = dominance_matrix(points, valid).astype(jnp.float32)  # [N, G, G]
    ranks0 = jnp.full(valid.shape, -1, dtype=jnp.int32)

    def cond(carry):
        _, remaining, _ = carry
        return jnp.any(remaining)

    def body(carry):
        ranks, remaining, front = carry
        # Number of still-unranked rows that dominate each row j: [N, G] = remaining @ dom.
        dominators = jnp.einsum("ni,nij->nj", remaining.astype(jnp.float32), dom)
        current = remaining & (dominators == 0)
        ranks = jnp.where(current, front, ranks)
        return ranks, remaining & ~current, front + 1

    ranks, _, _ = jax.lax.while_loop(cond, body, (ranks0, valid, jnp.int32(0)))
    return ranks


_rank_jit = jax.jit(_rank_impl)


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def nondominated_rank(points, valid=None) -> jax.Array:
    """Pareto rank of every row within its group: 0 = non-dominated front, 1 = next front, ...

    Implements the non-dominated sorting of ParetoPO Stage 2 (000_e6cfe11db36d6d54, Sec. 3.2;
    the paper's rank ``rho`` is this value + 1). Exact duplicates share a front. Rows that are
    invalid, or contain a non-finite value, get -1 and take no part in the sorting (neither
    dominate nor are dominated). Jit-compiled; leading axes are batch axes.

    Args:
      points: ``[..., G, M]`` objective values (float, int or bool), higher is better. ``M >= 1``.
      valid: optional bool ``[..., G]``; None means every row is valid.

    Returns:
      int32 ``[..., G]``.

    Raises:
      ValueError: ``points`` has fewer than 2 dimensions or ``M == 0``; ``valid`` has the wrong
        shape; (outside jit) ``points`` has a non-finite value in a row marked valid.
    """
    points = jnp.asarray(points)
    if points.ndim < 2:
        raise ValueError(f"points must have shape [..., G, M]; got shape {points.shape}")
    if points.shape[-1] == 0:
        raise ValueError("points has M = 0 objectives; need at least one")
    if points.dtype == jnp.bool_:
        points = points.astype(jnp.int32)
    batch_shape = points.shape[:-1]
    if valid is None:
        valid = jnp.ones(batch_shape, dtype=bool)
    else:
        valid = jnp.asarray(valid)
        if valid.shape != batch_shape:
            raise ValueError(
                f"valid must have shape {batch_shape} (points.shape[:-1]); got {valid.shape}"
            )
        valid = valid.astype(bool)
    if _is_concrete(points) and _is_concrete(valid) and jnp.issubdtype(points.dtype, jnp.floating):
        bad = np.asarray(valid) & ~np.all(np.isfinite(np.asarray(points)), axis=-1)
        if bad.any():
            raise ValueError(
                f"points has non-finite values in {int(bad.sum())} row(s) marked valid; "
                "mark them invalid (valid=False)"
            )
    group = batch_shape[-1]
    if group == 0 or points.size == 0:
        return jnp.full(batch_shape, -1, dtype=jnp.int32)
    flat_points = points.reshape((-1, group, points.shape[-1]))
    flat_valid = valid.reshape((-1, group))
    return _rank_jit(flat_points, flat_valid).reshape(batch_shape)
