"""GRPO and Dr.GRPO on a scalarized reward ``s = w . r``.

GRPO (SAW, arXiv:2606.07705, Eqs. 1 and 3; Shao et al. 2024): ``A = (s - mean_g s) / (std_g s +
eps)`` per group, population std by default (methods.md; switch ``std_ddof=1`` for verl / TRL).
Dr.GRPO: ``A = s - mean_g s`` (no std; pair it with the ``seq-mean-token-sum-norm`` loss).

``reward_scale`` multiplies the scalar reward per sample (or uniformly) before normalisation;
ParetoPO Stage 1 uses it for ``r_tilde = r_pareto * r_w`` (ParetoPO, arXiv:2606.16111, Eq. 6). A uniform
scale cancels in GRPO (up to ``eps``) but not in Dr.GRPO -- a documented property, tested.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mojax.advantages import _common as C
from mojax.advantages._method import Method

__all__ = ["GRPO", "DR_GRPO", "grpo", "dr_grpo", "scalar_group_advantages"]


def scalar_group_advantages(rewards, valid, weights, scale, eps, *, std_ddof, scale_by_std):
    """Traceable core shared by GRPO-family estimators; returns an AdvantageOutput."""
    r, mask = C.effective_mask(rewards, valid)
    if weights.ndim == 1:
        s = r @ weights  # [P, G]
    else:
        s = jnp.einsum("pgm,pm->pg", r, weights)
    s = jnp.where(mask, s * scale, 0.0)
    adv, std = C.group_zscore(s, mask, eps=eps, ddof=std_ddof, scale_by_std=scale_by_std)
    metrics = C.group_metrics(mask, std)
    metrics["reward/scalar/mean"] = jnp.sum(s) / jnp.maximum(jnp.sum(mask), 1)
    return C.AdvantageOutput(C.finalize(adv, mask & C.group_ok(mask)), None, metrics, None)


_scalar_jit = jax.jit(scalar_group_advantages, static_argnames=("std_ddof", "scale_by_std"))


def _prepare(rewards, valid, weights, reward_scale):
    rewards, valid = C.check_batch(rewards, valid)
    p, g, m = rewards.shape
    w = C.check_weights(weights, m, default=1.0 / m, rows=p)
    scale = 1.0 if reward_scale is None else reward_scale
    scale = C.check_per_sample(scale, (p, g), "reward_scale")
    return rewards, valid, w, scale


def grpo(
    rewards, valid=None, *, weights=None, std_ddof: int = 0, eps: float = 1e-6, reward_scale=None
) -> C.AdvantageOutput:
    """GRPO advantages of the scalar reward ``w . r`` (SAW Eq. 3 with SAW Eq. 1).

    Args:
      rewards: float ``[P, G, M]``, every objective higher-is-better.
      valid: bool ``[P, G]`` or None (all valid).
      weights: ``[M]`` (or per-group ``[P, M]``, e.g. goal-conditioned GRPO); None = uniform mean
        ``1/M`` (VPO's ``w*``).
      std_ddof: 0 (population std; methods.md default) or 1 (verl / TRL).
      eps: added to the std.
      reward_scale: scalar or ``[P, G]`` multiplier of ``s`` (ParetoPO Stage 1 ``r_pareto``).

    Returns:
      :class:`AdvantageOutput` with ``state=None``, ``clip_eps=None``.
    """
    C.check_choice("std_ddof", std_ddof, (0, 1))
    rewards, valid, w, scale = _prepare(rewards, valid, weights, reward_scale)
    return _scalar_jit(rewards, valid, w, scale, eps, std_ddof=std_ddof, scale_by_std=True)


def dr_grpo(rewards, valid=None, *, weights=None, reward_scale=None) -> C.AdvantageOutput:
    """Dr.GRPO advantages ``A = s - mean_g s`` (no std division; methods.md "Baselines").

    Args: as :func:`grpo` (no ``std_ddof`` / ``eps``).
    """
    rewards, valid, w, scale = _prepare(rewards, valid, weights, reward_scale)
    return _scalar_jit(rewards, valid, w, scale, 0.0, std_ddof=0, scale_by_std=False)


GRPO = Method("grpo", grpo, per_prompt_weights=True)
DR_GRPO = Method("dr_grpo", dr_grpo, per_prompt_weights=True)
