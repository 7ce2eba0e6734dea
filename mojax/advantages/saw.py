"""SAW: stage-aware dynamic weighting by the batch coefficient of variation (SAW, arXiv:2606.07705).

Over the **whole batch** (all valid samples, Sec. 4.1), per objective k (Algorithm 1):

* ``r~_k = r_k - min_k + delta`` (lines 2-4, Sec. 4.4) with ``min_k`` the theoretical minimum
  (``reward_min``; None, or a None entry, falls back to the batch minimum);
* ``CV_k = std(r~_k) / (mean(r~_k) + delta)`` (Eq. 2, lines 6-10), population std, ``delta=1e-8``;
* ``S = sum_k CV_k``; ``S < delta`` -> ``omega_k = 1`` (lines 13-14; switch ``fallback=False``
  mirrors the authors' code, which has no fallback -- there ``S = 0`` gives ``omega = 0`` instead of
  0/0); else ``omega_k = CV_k / S`` (Eq. 8), times M in advantage mode (lines 18-19);
* optional static priorities ``alpha_k``: weights ``omega_k * alpha_k``.

Reward mode (:func:`saw_grpo`, Eq. 9): ``s = sum_k omega_k alpha_k r_k``, then GRPO (Eq. 3).
Advantage mode (:func:`saw_gdpo`, Eq. 10): ``A = sum_k omega_k alpha_k groupnorm(r_k)``, then GDPO's
batch normalisation (Eq. 7). The weights are data computed from the batch, not parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mojax.advantages import _common as C
from mojax.advantages._method import Method
from mojax.advantages.gdpo import check_token_counts, objective_group_advantages

__all__ = ["SAW_GRPO", "SAW_GDPO", "saw_grpo", "saw_gdpo", "saw_weights", "saw_task_kwargs"]


def saw_task_kwargs(task_or_objectives) -> dict:
    """``{"reward_min", "objective_names"}`` from a task's declared objectives (or the objectives).

    SAW offsets each objective by its *theoretical* minimum (Algorithm 1, line 3); the task
    declares it (:class:`mojax.tasks.framework.base.Objective`). Trainers pass ``**saw_task_kwargs(task)``
    so that the weights are logged as ``saw/weight/<objective name>``.
    """
    objectives = getattr(task_or_objectives, "objectives", task_or_objectives)
    objectives = tuple(objectives)
    if not objectives or not all(hasattr(o, "min") and hasattr(o, "name") for o in objectives):
        raise ValueError(
            "saw_task_kwargs needs a task or a sequence of Objective (with .name and .min); "
            f"got {task_or_objectives!r}"
        )
    return {
        "reward_min": tuple(float(o.min) for o in objectives),
        "objective_names": tuple(str(o.name) for o in objectives),
    }


def saw_weights(r, mask, reward_min, priorities, delta, *, fallback, advantage_mode):
    """Traceable SAW weights. ``r`` masked ``[P, G, M]``; ``reward_min [M]`` (NaN = batch min).

    Returns ``(weights [M] = omega * alpha, cv [M], fell_back scalar bool)``.
    """
    num_obj = r.shape[-1]
    m = mask[..., None]
    any_valid = jnp.any(mask)
    batch_min = jnp.min(jnp.where(m, r, jnp.inf), axis=(0, 1))
    batch_min = jnp.where(any_valid, batch_min, 0.0)
    mins = jnp.where(jnp.isnan(reward_min), batch_min, reward_min)
    shifted = r - mins + delta  # [P, G, M]
    count = jnp.maximum(jnp.sum(mask), 1)
    mean = jnp.sum(jnp.where(m, shifted, 0.0), axis=(0, 1)) / count
    flat = shifted.reshape(-1, num_obj).T  # [M, P*G]
    _, std, _, _ = C.masked_moments(flat, mask.reshape(-1), axis=-1)
    var = std[:, 0] ** 2
    # mean + delta > 0 whenever min_k is a true lower bound; the floor only guards misuse in jit.
    cv = jnp.sqrt(var) / jnp.maximum(mean + delta, delta)
    total = jnp.sum(cv)
    omega = cv / jnp.maximum(total, 1e-30)
    if advantage_mode:
        omega = omega * num_obj
    fell_back = total < delta
    if fallback:
        omega = jnp.where(fell_back, jnp.ones_like(omega), omega)
    return omega * priorities, cv, fell_back


def _impl(
    rewards,
    valid,
    reward_min,
    priorities,
    token_counts,
    delta,
    eps,
    *,
    fallback,
    mode,
    names,
    std_ddof,
):
    r, mask = C.effective_mask(rewards, valid)
    w, cv, fell_back = saw_weights(
        r, mask, reward_min, priorities, delta, fallback=fallback, advantage_mode=mode != "reward"
    )
    if mode == "reward":
        s = jnp.where(mask, r @ w, 0.0)
        adv, std = C.group_zscore(s, mask, eps=eps, ddof=std_ddof)
        adv = C.finalize(adv, mask & C.group_ok(mask))
        metrics = C.group_metrics(mask, std)
    else:
        adv, metrics = objective_group_advantages(
            r, mask, w, token_counts, eps, batch_norm=True, token_weighted=mode == "advantage-token"
        )
    for k, name in enumerate(names):
        metrics[f"saw/weight/{name}"] = w[k]
        metrics[f"saw/cv/{name}"] = cv[k]
    metrics["saw/fallback"] = fell_back.astype(jnp.float32)
    return C.AdvantageOutput(adv, None, metrics, None)


_jit = jax.jit(_impl, static_argnames=("fallback", "mode", "names", "std_ddof"))


def _prepare(rewards, valid, reward_min, priorities, objective_names):
    rewards, valid = C.check_batch(rewards, valid)
    m = rewards.shape[-1]
    if reward_min is None:
        mins = jnp.full((m,), jnp.nan, dtype=jnp.float32)
    elif isinstance(reward_min, (list, tuple)):
        if len(reward_min) != m:
            raise ValueError(f"reward_min must have M = {m} entries; got {len(reward_min)}")
        mins = jnp.asarray([np.nan if v is None else float(v) for v in reward_min], jnp.float32)
    else:
        mins = jnp.broadcast_to(jnp.asarray(reward_min, dtype=jnp.float32), (m,))
    if C.is_concrete(mins, rewards, valid):
        lo = np.asarray(mins)
        r = np.where(np.asarray(valid)[..., None], np.asarray(rewards), np.inf)
        below = ~np.isnan(lo) & (r.min(axis=(0, 1)) < lo) if r.size else np.zeros(m, bool)
        if below.any():
            k = int(np.argmax(below))
            raise ValueError(
                f"reward_min[{k}] = {lo[k]} is above the batch minimum {r.min(axis=(0, 1))[k]} of "
                "that objective; reward_min must be each objective's theoretical minimum"
            )
    prio = C.check_weights(priorities, m, default=1.0, name="priorities")
    names = tuple(str(k) for k in range(m)) if objective_names is None else tuple(objective_names)
    if len(names) != m:
        raise ValueError(f"objective_names must have M = {m} entries; got {len(names)}")
    return rewards, valid, mins, prio, names


def saw_grpo(
    rewards,
    valid=None,
    *,
    reward_min=None,
    priorities=None,
    fallback: bool = True,
    std_ddof: int = 0,
    eps: float = 1e-6,
    delta: float = 1e-8,
    objective_names=None,
) -> C.AdvantageOutput:
    """SAW in reward mode: CV-weighted scalar reward, then GRPO (SAW Eqs. 2, 8, 9, 3).

    Args:
      rewards: float ``[P, G, M]``.
      valid: bool ``[P, G]`` or None.
      reward_min: theoretical minimum per objective (sequence of M floats or None entries, a
        scalar, or None = batch minimum of every objective).
      priorities: static priorities ``alpha_k`` ``[M]`` (None = 1).
      fallback: equal weights when ``sum CV < delta`` (paper); False = authors' code.
      std_ddof: GRPO std ddof (0 or 1).
      eps: added to GRPO's std.
      delta: SAW's stability constant.
      objective_names: names used in the metric keys ``saw/weight/<name>``, ``saw/cv/<name>``.
    """
    C.check_choice("std_ddof", std_ddof, (0, 1))
    rewards, valid, mins, prio, names = _prepare(
        rewards, valid, reward_min, priorities, objective_names
    )
    ones = jnp.ones(rewards.shape[:2], dtype=jnp.float32)
    return _jit(
        rewards, valid, mins, prio, ones, delta, eps,
        fallback=bool(fallback), mode="reward", names=names, std_ddof=std_ddof,
    )  # fmt: skip


def saw_gdpo(
    rewards,
    valid=None,
    *,
    reward_min=None,
    priorities=None,
    fallback: bool = True,
    batch_norm: str = "sample",
    token_counts=None,
    eps: float = 1e-6,
    delta: float = 1e-8,
    objective_names=None,
) -> C.AdvantageOutput:
    """SAW in advantage mode: ``M * CV``-share weights on per-objective z-scores, then GDPO's batch
    normalisation (SAW Eqs. 2, 5, 8, 10, 7).

    Args: as :func:`saw_grpo`, plus ``batch_norm`` / ``token_counts`` as in GDPO.
    """
    rewards, valid, mins, prio, names = _prepare(
        rewards, valid, reward_min, priorities, objective_names
    )
    tc = check_token_counts(batch_norm, token_counts, rewards.shape[:2])
    mode = "advantage-token" if batch_norm == "token" else "advantage"
    return _jit(
        rewards, valid, mins, prio, tc, delta, eps,
        fallback=bool(fallback), mode=mode, names=names, std_ddof=0,
    )  # fmt: skip


SAW_GRPO = Method("saw_grpo", saw_grpo, task_facts=saw_task_kwargs)
SAW_GDPO = Method("saw_gdpo", saw_gdpo, task_facts=saw_task_kwargs)
