"""ParetoPO Stage 1: hypervolume-guided dynamic scalarization as pure functions over plain data.

ParetoPO, arXiv:2606.16111, Sec. 3.1 and Algorithm 1 (lines 1-19):

* archive ``B`` starts as ``{v_0}``, the validation vector of the initial policy, which is also the
  hypervolume reference point (``ref``; methods.md switch: a fixed reference such as zeros);
* after each update, ``dHV_t = HV(B u {v_t}) - HV(B)`` (Sec. 3.1), smoothed by Eq. 5:
  ``dHV_bar_t = gamma * dHV_bar_{t-1} + (1 - gamma) * dHV_t``, ``gamma = 0.5``,
  ``dHV_bar_0 = 0``;
* ``r_pareto = 0.5 + 1.5 * tanh(dHV_bar_t)`` (Eq. 6; 1.0 before the first update, Alg. 1 line 2);
* the training reward is ``r_tilde = r_pareto * (w . r)`` (Eq. 6), ``w = (0.6, 0.4)``;
* ``v_t`` enters ``B`` if non-dominated (line 16); mojax also drops what it dominates.

Two modes (methods.md ``stage1.mode``):

* ``"global"`` (Algorithm 1): one ``r_pareto`` per step from the validation vector. It multiplies
  every reward of the step by the same positive number, so it **cancels** under std-normalised
  advantages (GRPO / DAPO: ``(c s - c mean) / (c std) = (s - mean) / std`` up to ``eps``) and acts
  only with mean-only estimators such as Dr.GRPO. :func:`stage1_cancellation_warning` says so.
* ``"per_trajectory"`` (Eq. 6 read per rollout): each sample ``i`` gets
  ``0.5 + 1.5 tanh(gamma * dHV_bar_{t-1} + (1 - gamma) * dHV(r_i, B))`` -- its own contribution
  against the archive, smoothed with the step's running ``dHV_bar``.

The state is a frozen dataclass of numpy arrays and floats with ``to_state`` / ``from_state``,
so that a checkpoint can save it as plain data.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mojax.pareto.archive import archive_add
from mojax.pareto.hypervolume import hv_contribution, hypervolume

__all__ = [
    "Stage1State",
    "r_pareto_from_dhv",
    "stage1_init",
    "stage1_update",
    "stage1_sample_scales",
    "stage1_cancellation_warning",
    "STAGE1_MODES",
]

STAGE1_MODES = ("global", "per_trajectory")
# Estimators whose std normalisation cancels a uniform positive reward scale.
_STD_NORMALISED = (
    "grpo",
    "dapo",
    "random_w",
    "multi_rlvr",
    "gdpo",
    "mo_grpo",
    "saw_grpo",
    "saw_gdpo",
)


def r_pareto_from_dhv(dhv_bar):
    """``r_pareto = 0.5 + 1.5 tanh(dHV_bar)`` (ParetoPO, arXiv:2606.16111, Eq. 6); works on arrays."""
    return 0.5 + 1.5 * np.tanh(dhv_bar)


@dataclasses.dataclass(frozen=True)
class Stage1State:
    """Host-side Stage-1 state (checkpointed as plain data).

    Attributes:
      archive: ``[N, M]`` mutually non-dominated validation vectors ``B``.
      ref: ``[M]`` hypervolume reference point.
      dhv_bar: smoothed contribution ``dHV_bar_t`` (Eq. 5).
      r_pareto: current meta-level reward scale (Eq. 6).
      gamma: EMA factor of Eq. 5.
      step: number of updates applied.
    """

    archive: np.ndarray
    ref: np.ndarray
    dhv_bar: float = 0.0
    r_pareto: float = 1.0
    gamma: float = 0.5
    step: int = 0

    def to_state(self) -> dict:
        """Plain, JSON-able dict (lists and floats)."""
        return {
            "archive": np.asarray(self.archive, dtype=np.float64).tolist(),
            "ref": np.asarray(self.ref, dtype=np.float64).tolist(),
            "dhv_bar": float(self.dhv_bar),
            "r_pareto": float(self.r_pareto),
            "gamma": float(self.gamma),
            "step": int(self.step),
        }

    @classmethod
    def from_state(cls, state: dict) -> Stage1State:
        """Inverse of :meth:`to_state`; unknown or missing keys are a ValueError naming them."""
        keys = {"archive", "ref", "dhv_bar", "r_pareto", "gamma", "step"}
        if set(state) != keys:
            raise ValueError(
                f"Stage1State state keys: missing {sorted(keys - set(state))}, "
                f"unknown {sorted(set(state) - keys)}"
            )
        ref = np.asarray(state["ref"], dtype=np.float64)
        archive = np.asarray(state["archive"], dtype=np.float64).reshape(-1, ref.shape[0])
        return cls(
            archive=archive,
            ref=ref,
            dhv_bar=float(state["dhv_bar"]),
            r_pareto=float(state["r_pareto"]),
            gamma=float(state["gamma"]),
            step=int(state["step"]),
        )


def stage1_init(v0, *, ref=None, gamma: float = 0.5) -> Stage1State:
    """Algorithm 1 lines 1-2: ``B = {v_0}``, ``dHV_bar_0 = 0``, ``r_pareto = 1``.

    Args:
      v0: ``[M]`` validation vector of the initial policy.
      ref: ``[M]`` fixed reference point; None uses ``v0`` (the paper's choice).
      gamma: EMA factor of Eq. 5, in [0, 1).
    """
    v0 = np.asarray(v0, dtype=np.float64)
    if v0.ndim != 1 or v0.shape[0] == 0 or not np.all(np.isfinite(v0)):
        raise ValueError(f"v0 must be a finite vector [M] with M >= 1; got {v0}")
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1); got {gamma}")
    ref = v0.copy() if ref is None else np.asarray(ref, dtype=np.float64)
    if ref.shape != v0.shape:
        raise ValueError(f"ref must have shape {v0.shape} like v0; got {ref.shape}")
    return Stage1State(archive=v0[None].copy(), ref=ref, gamma=float(gamma))


def stage1_update(state: Stage1State, v_t) -> tuple[Stage1State, dict]:
    """One step of Algorithm 1 lines 13-18 (global mode) after a policy update.

    Args:
      state: current :class:`Stage1State`.
      v_t: ``[M]`` validation vector of the updated policy.

    Returns:
      ``(new_state, metrics)`` with ``pareto/hv`` (of the new archive), ``pareto/dhv``,
      ``pareto/dhv_bar``, ``pareto/r_pareto``, ``pareto/archive_size``, ``pareto/added``.
    """
    v_t = np.asarray(v_t, dtype=np.float64)
    if v_t.shape != state.ref.shape or not np.all(np.isfinite(v_t)):
        raise ValueError(f"v_t must be a finite vector of shape {state.ref.shape}; got {v_t}")
    dhv = hv_contribution(v_t, state.archive, state.ref)
    dhv_bar = state.gamma * state.dhv_bar + (1.0 - state.gamma) * dhv
    r_pareto = float(r_pareto_from_dhv(dhv_bar))
    archive, added = archive_add(state.archive, v_t)
    new = dataclasses.replace(
        state, archive=archive, dhv_bar=float(dhv_bar), r_pareto=r_pareto, step=state.step + 1
    )
    metrics = {
        "pareto/hv": hypervolume(archive, state.ref),
        "pareto/dhv": float(dhv),
        "pareto/dhv_bar": float(dhv_bar),
        "pareto/r_pareto": r_pareto,
        "pareto/archive_size": int(archive.shape[0]),
        "pareto/added": bool(added),
    }
    return new, metrics


def stage1_sample_scales(state: Stage1State, rewards, valid=None) -> np.ndarray:
    """Per-trajectory ``r_pareto`` (``stage1.mode = "per_trajectory"``): float32 ``[P, G]``.

    Each valid sample's reward vector ``r_i`` gets ``dHV(r_i, B)`` against the archive, smoothed
    with the step's running ``dHV_bar`` (Eq. 5 with ``dHV_t := dHV(r_i, B)``), then Eq. 6.
    Invalid samples get 1.0 (their advantage is 0 anyway). Identical reward vectors are evaluated
    once (rewards are often discrete), so the host cost is one HV call per distinct vector.

    Args:
      state: current :class:`Stage1State` (not modified).
      rewards: ``[P, G, M]``.
      valid: optional bool ``[P, G]``.
    """
    r = np.asarray(rewards, dtype=np.float64)
    m = state.ref.shape[0]
    if r.ndim != 3 or r.shape[-1] != m:
        raise ValueError(f"rewards must have shape [P, G, {m}]; got {r.shape}")
    ok = np.all(np.isfinite(r), axis=-1)
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        if valid.shape != r.shape[:2]:
            raise ValueError(f"valid must have shape {r.shape[:2]}; got {valid.shape}")
        ok &= valid
    scales = np.ones(r.shape[:2], dtype=np.float32)
    if not ok.any():
        return scales
    uniq, inverse = np.unique(r[ok], axis=0, return_inverse=True)
    dhv = np.array([hv_contribution(u, state.archive, state.ref) for u in uniq])
    smoothed = state.gamma * state.dhv_bar + (1.0 - state.gamma) * dhv
    scales[ok] = r_pareto_from_dhv(smoothed)[inverse.reshape(-1)].astype(np.float32)
    return scales


def stage1_cancellation_warning(mode: str, estimator: str) -> str | None:
    """The documented caveat of global mode, as a message (None when it does not apply).

    In global mode ``r_pareto`` is one positive number per step; std-normalised estimators divide it
    out, so Stage 1 then trains exactly like its base estimator. Trainers warn once with this text.
    """
    if mode not in STAGE1_MODES:
        raise ValueError(f"stage1.mode must be one of {STAGE1_MODES}; got {mode!r}")
    if mode == "global" and estimator in _STD_NORMALISED:
        return (
            f"ParetoPO stage1.mode='global' with estimator {estimator!r}: r_pareto is a uniform "
            "positive scale of every reward in the step and cancels under std-normalised "
            "advantages (it only acts with mean-only estimators such as dr_grpo). Use "
            "stage1.mode='per_trajectory' or estimator 'dr_grpo' for it to have an effect."
        )
    return None
