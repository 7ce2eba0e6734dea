"""The non-dominated archive ``B`` of ParetoPO Stage 1 as pure functions over ``[N, M]`` arrays.

Algorithm 1 of ParetoPO, arXiv:2606.16111 (lines 2 and 16-17) keeps the best-so-far validation vectors:
a new vector enters if no member dominates it. mojax additionally drops the members the new vector
dominates (methods.md; the paper's Algorithm 1 only adds), so the archive is always a mutually
non-dominated set; this changes no hypervolume, because dominated members add no volume.
"""

from __future__ import annotations

import numpy as np

__all__ = ["archive_add", "is_dominated_by", "nondominated_filter"]


def _check(archive, point) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(point, dtype=np.float64)
    if p.ndim != 1 or p.shape[0] == 0:
        raise ValueError(f"point must have shape [M] with M >= 1; got {p.shape}")
    a = np.asarray(archive, dtype=np.float64)
    if a.size == 0:
        a = a.reshape(0, p.shape[0])
    if a.ndim != 2 or a.shape[1] != p.shape[0]:
        raise ValueError(f"archive must have shape [N, {p.shape[0]}]; got {a.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"point must be finite; got {p}")
    return a, p


def is_dominated_by(point, archive) -> bool:
    """True iff some archive member weakly dominates ``point`` (>= everywhere, incl. equality)."""
    a, p = _check(archive, point)
    return bool(a.shape[0] and np.any(np.all(a >= p, axis=1)))


def archive_add(archive, point) -> tuple[np.ndarray, bool]:
    """Adds ``point`` if no member dominates or equals it, and drops the members it dominates.

    Args:
      archive: ``[N, M]`` mutually non-dominated vectors (maximisation).
      point: ``[M]``.

    Returns:
      ``(new_archive [N', M], added)``; the input is not modified. An exact duplicate of a member is
      not added (it would add no hypervolume and only grow the archive).
    """
    a, p = _check(archive, point)
    if a.shape[0] and np.any(np.all(a >= p, axis=1)):
        return a.copy(), False
    dominated = np.all(p >= a, axis=1) & np.any(p > a, axis=1)
    return np.concatenate([a[~dominated], p[None]], axis=0), True


def nondominated_filter(points) -> np.ndarray:
    """The non-dominated rows of ``points [N, M]`` (duplicates kept once), in input order."""
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2:
        raise ValueError(f"points must have shape [N, M]; got {pts.shape}")
    out = np.zeros((0, pts.shape[1]))
    for row in pts:
        out, _ = archive_add(out, row)
    return out
