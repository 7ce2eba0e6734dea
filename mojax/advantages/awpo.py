"""AWPO: variance-aware gating of a reasoning reward, difficulty weights, dynamic clip radius.

AWPO (arXiv:2512.19126), Sec. "Algorithm Design" and Algorithm 1 (App. C). Inputs per sample:
``rewards[..., 0] = R_out`` (outcome reward, Eqs. 14-19) and ``rewards[..., 1] = R_reason`` in
[0, 1] (judge); ``R_mix = R_out + R_reason`` (Eq. 20). Per group g (valid samples only):

* ``sigma_out, sigma_mix``: population std (Eqs. 21-23);
* ``r_g = sigma_mix / (sigma_out + sigma_mix + eps_std)`` (Eq. 24);
* ``w_g = 1[mean_g R_out < R_max] * 1[r_g < eps_mix] * r_g`` (Eq. 25);
* ``A_out, A_mix``: group z-scores with ``eps`` (Eq. 26);
* ``d_g = alpha_prio if tau_low < mean_g R_out / r_max < tau_high else alpha_base`` (Eq. 27; the
  paper thresholds the raw mean, methods.md the mean normalised by the theoretical max ``r_max``);
* ``A = d_g [(1 - w_g) A_out + w_g A_mix]`` (Eq. 28);
* batch clip radius ``eps_clip = clip_min + (1 - mean_g w_g)(clip_max - clip_min)`` (Eq. 29), used
  symmetrically ``(1 - eps, 1 + eps)`` by the loss (Eq. 30).

A failed judge score invalidates only the reasoning objective (``reason_valid``): the sample keeps
its outcome advantage, and ``R_mix`` statistics use the samples with a judge score.

``R_max`` in the saturation gate (Eq. 25): ``r_max_mode="theoretical"`` (default) uses ``r_max``;
``"running_peak"`` uses the highest group mean of ``R_out`` seen so far, current batch included
(the paper: "the peak group-mean"), carried in ``state``. Note: when ``sigma_out = 0`` and
``sigma_mix > 0``, ``r_g -> 1`` and the gate closes for any ``eps_mix < 1``.

``awpo/gated_out_frac``: the share of groups that Eq. 25's variance term closes and mixing without
it (``eps_mix = 1``, where every unsaturated group has ``w_g = r_g``) would mix: unsaturated, with
judge scores, ``r_g >= eps_mix`` and ``r_g > 0``. Only in these groups do the two differ, so a
setting where it is 0 cannot tell the gate from mixing without it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mojax.advantages import _common as C
from mojax.advantages._method import Method

__all__ = ["AWPO", "awpo", "R_MAX_MODES"]

R_MAX_MODES = ("theoretical", "running_peak")


def _impl(rewards, valid, reason_valid, peak, hp, *, running_peak):
    r, mask = C.effective_mask(rewards, valid)
    rmask = mask & reason_valid  # samples with a judge score: the only ones R_mix is defined on
    r_out = r[..., 0]
    r_mix = r[..., 0] + r[..., 1]
    mean_out, sd_out, _, dev_out = C.masked_moments(r_out, mask, axis=-1)
    _, sd_mix, _, dev_mix = C.masked_moments(r_mix, rmask, axis=-1)
    ok = C.group_ok(mask)  # [P, 1]
    ratio = sd_mix / (sd_out + sd_mix + hp["eps_std"])  # Eq. 24
    if running_peak:
        batch_peak = jnp.max(jnp.where(ok, mean_out, -jnp.inf))
        peak = jnp.maximum(peak, batch_peak)
        sat_max = peak
    else:
        sat_max = hp["r_max"]
    unsaturated = (mean_out < sat_max) & ok & C.group_ok(rmask)
    gate = unsaturated & (ratio < hp["eps_mix"])
    # where mixing without the gate (eps_mix = 1: w_g = r_g > 0) differs from this gate
    gated_out = unsaturated & (ratio >= hp["eps_mix"]) & (ratio > 0)
    w = jnp.where(gate, ratio, 0.0)  # Eq. 25
    a_out = dev_out / (sd_out + hp["eps"])  # Eq. 26
    a_mix = dev_mix / (sd_mix + hp["eps"])
    norm_mean = mean_out / hp["r_max"]
    prio = (hp["tau_low"] < norm_mean) & (norm_mean < hp["tau_high"])
    d = jnp.where(prio, hp["alpha_prio"], hp["alpha_base"])  # Eq. 27
    w_s = jnp.where(rmask, w, 0.0)  # a sample without judge score keeps the outcome view only
    adv = d * ((1.0 - w_s) * a_out + w_s * a_mix)  # Eq. 28
    okf = ok[..., 0].astype(jnp.float32)
    n_ok = jnp.maximum(jnp.sum(okf), 1.0)
    w_bar = jnp.sum(w[..., 0] * okf) / n_ok
    clip_eps = hp["clip_min"] + (1.0 - w_bar) * (hp["clip_max"] - hp["clip_min"])  # Eq. 29
    metrics = C.group_metrics(mask, sd_out)
    metrics.update(
        {
            "awpo/w_mean": w_bar,
            "awpo/gate_frac": jnp.sum(gate[..., 0] * okf) / n_ok,
            "awpo/gated_out_frac": jnp.sum(gated_out[..., 0] * okf) / n_ok,
            "awpo/r_mean": jnp.sum(ratio[..., 0] * okf) / n_ok,
            "awpo/prio_frac": jnp.sum(prio[..., 0] * okf) / n_ok,
            "awpo/clip_eps": clip_eps,
            "awpo/r_max": jnp.asarray(sat_max, jnp.float32),
        }
    )
    state = {"peak": peak} if running_peak else None
    return C.AdvantageOutput(
        C.finalize(adv, mask & ok), state, metrics, clip_eps.astype(jnp.float32)
    )


_jit = jax.jit(_impl, static_argnames=("running_peak",))


def awpo(
    rewards,
    valid=None,
    *,
    r_max: float,
    eps_mix: float = 0.5,
    tau_low: float = 0.2,
    tau_high: float = 0.8,
    alpha_base: float = 1.0,
    alpha_prio: float = 1.5,
    clip_min: float = 0.1,
    clip_max: float = 0.2,
    eps_std: float = 1e-6,
    eps: float = 1e-6,
    r_max_mode: str = "theoretical",
    state=None,
    reason_valid=None,
) -> C.AdvantageOutput:
    """AWPO advantages and dynamic clip radius (AWPO Eqs. 20-29).

    Args:
      rewards: float ``[P, G, 2]``: ``R_out`` and ``R_reason``.
      valid: bool ``[P, G]`` or None.
      r_max: theoretical maximum of ``R_out`` (> 0; normalises the difficulty thresholds and is the
        saturation level in ``"theoretical"`` mode).
      eps_mix, tau_low, tau_high, alpha_base, alpha_prio, clip_min, clip_max, eps_std, eps: Eqs.
        24-29 (defaults are mojax's choices; the paper gives no numbers).
      r_max_mode: ``"theoretical"`` or ``"running_peak"``.
      state: ``{"peak": float}`` from the previous step in ``"running_peak"`` mode (None = start);
        pass the previous call's ``out.state`` (a plain float after a checkpoint round trip is
        fine). Ignored in ``"theoretical"`` mode, which returns ``state=None``.
      reason_valid: bool ``[P, G]`` or None (all True): False where the judge failed. Such a
        sample stays valid for ``R_out``; ``R_mix`` statistics (Eqs. 23-24, 26) use the samples
        with a judge score only, and the sample's advantage is ``d_g A_out`` (its reward column 1
        may hold anything, NaN included). A group with < 2 judge scores gets ``w_g = 0``.

    Returns:
      :class:`AdvantageOutput` with ``clip_eps`` (scalar) and, in running-peak mode,
      ``state = {"peak": ...}``.
    """
    C.check_choice("r_max_mode", r_max_mode, R_MAX_MODES)
    rewards = jnp.asarray(rewards, jnp.float32)
    if reason_valid is None:
        reason_valid = jnp.ones(rewards.shape[:-1], bool)
    else:
        reason_valid = jnp.asarray(reason_valid).astype(bool)
        if reason_valid.shape != rewards.shape[:-1]:
            raise ValueError(
                f"reason_valid must have shape {rewards.shape[:-1]} (rewards.shape[:-1]); got "
                f"{reason_valid.shape}"
            )
        if rewards.ndim == 3 and rewards.shape[-1] == 2:  # a failed judge score is no data
            rewards = rewards.at[..., 1].set(jnp.where(reason_valid, rewards[..., 1], 0.0))
    rewards, valid = C.check_batch(rewards, valid)
    if rewards.shape[-1] != 2:
        raise ValueError(
            f"rewards must have M = 2 objectives (R_out, R_reason) for awpo; got {rewards.shape}"
        )
    if not np.isfinite(r_max) or r_max <= 0:
        raise ValueError(f"r_max must be a finite positive number; got {r_max}")
    if not clip_min <= clip_max:
        raise ValueError(f"clip_min ({clip_min}) must be <= clip_max ({clip_max})")
    if not tau_low < tau_high:
        raise ValueError(f"tau_low ({tau_low}) must be < tau_high ({tau_high})")
    running = r_max_mode == "running_peak"
    if state is None:
        peak = jnp.float32(-jnp.inf)
    else:
        if not isinstance(state, dict) or set(state) != {"peak"}:
            raise ValueError(f'state must be None or {{"peak": float}}; got {state!r}')
        peak = jnp.asarray(state["peak"], jnp.float32)
    hp = {
        k: jnp.float32(v)
        for k, v in dict(
            r_max=r_max, eps_mix=eps_mix, tau_low=tau_low, tau_high=tau_high,
            alpha_base=alpha_base, alpha_prio=alpha_prio, clip_min=clip_min, clip_max=clip_max,
            eps_std=eps_std, eps=eps,
        ).items()
    }  # fmt: skip
    return _jit(rewards, valid, reason_valid, peak, hp, running_peak=running)


AWPO = Method(
    "awpo",
    awpo,
    stateful=True,
    objectives=("r_out", "r_reason"),
    requirement="task.name='toolrl' with task.kwargs.mode='awpo'",
    validity_inputs=(("reason_valid", "r_reason"),),
    reward_sources=("judge",),
)
