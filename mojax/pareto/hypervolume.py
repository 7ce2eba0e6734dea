"""Hypervolume and hypervolume contribution (maximisation), computed on the host with moocore.

ParetoPO (arXiv:2606.16111) measures progress of the validation vector with the hypervolume
(Def. 2.2, Eq. 3) and drives Stage 1 with the contribution ``dHV(r, B) = HV(B u {r}) - HV(B)``
(Sec. 3.1). These are host-side computations on a handful of points per training step, so they use
moocore's exact algorithms rather than a jit kernel.

Convention: all objectives maximised; the reference point ``ref`` is dominated by every point that
counts. A point that is not strictly better than ``ref`` in every objective adds nothing (it is
"clipped to the reference": the volume it would span on the far side of ``ref`` is not counted).
"""

from __future__ import annotations

import numpy as np

__all__ = ["hypervolume", "hv_contribution"]


def _as_points(points, ref, name: str = "points") -> tuple[np.ndarray, np.ndarray]:
    ref = np.asarray(ref, dtype=np.float64)
    if ref.ndim != 1 or ref.shape[0] == 0:
        raise ValueError(f"ref must have shape [M] with M >= 1; got shape {ref.shape}")
    pts = np.asarray(points, dtype=np.float64)
    if pts.size == 0:
        pts = pts.reshape(0, ref.shape[0])
    if pts.ndim == 1:
        pts = pts[None, :]
    if pts.ndim != 2 or pts.shape[1] != ref.shape[0]:
        raise ValueError(
            f"{name} must have shape [N, {ref.shape[0]}] to match ref; got {pts.shape}"
        )
    if not np.all(np.isfinite(ref)):
        raise ValueError(f"ref must be finite; got {ref}")
    if not np.all(np.isfinite(pts)):
        raise ValueError(f"{name} has non-finite values; drop those rows first")
    return pts, ref


def hypervolume(points, ref) -> float:
    """Volume dominated by ``points`` and dominating ``ref`` (maximisation; ParetoPO Eq. 3).

    Args:
      points: ``[N, M]`` objective vectors (N may be 0).
      ref: ``[M]`` reference point.

    Returns:
      The hypervolume as a Python float (0.0 if no point is strictly better than ``ref`` in
      every objective).
    """
    pts, ref = _as_points(points, ref)
    pts = pts[np.all(pts > ref, axis=1)]
    if pts.shape[0] == 0:
        return 0.0
    if ref.shape[0] == 1:
        return float(pts[:, 0].max() - ref[0])
    import moocore  # host-only dependency, imported lazily (no import-time side effects)

    return float(moocore.hypervolume(pts, ref=ref, maximise=True))


def hv_contribution(point, archive, ref) -> float:
    """``dHV(p, B) = HV(B u {p}) - HV(B)`` (ParetoPO, arXiv:2606.16111, Sec. 3.1), never negative.

    Args:
      point: ``[M]`` candidate vector.
      archive: ``[N, M]`` current archive ``B`` (N may be 0).
      ref: ``[M]`` reference point.
    """
    arch, ref = _as_points(archive, ref, "archive")
    p, _ = _as_points(point, ref, "point")
    if p.shape[0] != 1:
        raise ValueError(f"point must have shape [M]; got {np.asarray(point).shape}")
    # A point dominated by (or equal to) an archive member adds no volume; skip the HV calls.
    if arch.shape[0] and np.any(np.all(arch >= p, axis=1)):
        return 0.0
    if not np.all(p > ref):
        return 0.0
    gain = hypervolume(np.concatenate([arch, p]), ref) - hypervolume(arch, ref)
    return max(gain, 0.0)
