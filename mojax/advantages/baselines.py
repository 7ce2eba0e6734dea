"""Baselines from VPO's comparison (VPO, arXiv:2605.22817, Sec. 4.2): Random-w GRPO and Multi-RLVR.

* Random-w GRPO: ``w ~ Dir(alpha 1)`` drawn per step from ``key``, one per group (shared by its G
  samples), then GRPO on ``w . r``.
* Multi-RLVR (Puri et al. 2026): multi-answer sets scored with the fixed ``w*``: set reward =
  ``(1/S) sum_{s=1..S} w* . r_s`` where a missing/invalid answer **and** a repeat of an earlier
  answer of the same set score 0 but keep their slot in the denominator S (VPO footnote 1 and the
  authors' code), so three copies of an answer score exactly like that answer plus two empty
  slots; then GRPO. ``dedup=False`` scores repeats like any other answer. Identity is judged by
  ``answer_ids [P, G, S]`` (e.g. a hash of the normalised answer text) when given, else by exact
  equality of the reward vectors.
Goal-conditioned GRPO needs no estimator of its own: :func:`mojax.advantages.grpo` with per-group
``weights [P, M]`` (the weights written into each prompt).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mojax.advantages import _common as C
from mojax.advantages._method import Method
from mojax.advantages.grpo import scalar_group_advantages
from mojax.advantages.vpo import check_key, dirichlet_weights

__all__ = ["RANDOM_W", "MULTI_RLVR", "random_w", "multi_rlvr"]


def _random_w_impl(rewards, valid, key, alpha, eps, *, std_ddof):
    p, g, m = rewards.shape
    w = dirichlet_weights(key, p, 1, m, alpha)[:, 0]  # [P, M]
    out = scalar_group_advantages(
        rewards, valid, w, jnp.ones((p, g)), eps, std_ddof=std_ddof, scale_by_std=True
    )
    for k in range(m):
        out.metrics[f"random_w/weight_mean/{k}"] = jnp.mean(w[:, k])
    return out


_random_w_jit = jax.jit(_random_w_impl, static_argnames=("std_ddof", "alpha"))


def random_w(
    rewards, valid=None, *, key, alpha: float = 1.0, std_ddof: int = 0, eps: float = 1e-6
) -> C.AdvantageOutput:
    """Random-weighting GRPO: per-group ``w ~ Dir(alpha 1)`` from ``key``, then GRPO.

    Args:
      rewards: float ``[P, G, M]``; valid: bool ``[P, G]`` or None.
      key: jax random key (fresh every step); same key -> same weights.
      alpha: Dirichlet concentration; std_ddof, eps: as :func:`grpo`.
    """
    C.check_choice("std_ddof", std_ddof, (0, 1))
    if not float(alpha) > 0:
        raise ValueError(f"alpha must be > 0; got {alpha}")
    rewards, valid = C.check_batch(rewards, valid)
    return _random_w_jit(rewards, valid, check_key(key), float(alpha), eps, std_ddof=std_ddof)


def _distinct(ids, smask):
    """``[P, G, S]`` True for the first valid occurrence of each answer id among valid answers."""
    s = ids.shape[-2]
    eq = jnp.all(ids[..., :, None, :] == ids[..., None, :, :], axis=-1)  # [P, G, S(i), S(j)]
    earlier = jnp.tril(jnp.ones((s, s), dtype=bool), k=-1)  # j < i
    dup = jnp.any(eq & earlier & smask[..., None, :], axis=-1)
    return smask & ~dup


def _multi_impl(set_rewards, set_valid, valid, ids, weights, eps, *, dedup, std_ddof):
    r, smask = C.effective_mask(set_rewards, set_valid)
    if ids is None:
        ids = r  # identity by the reward vector
    counted = _distinct(ids, smask) if dedup else smask
    score = r @ weights  # [P, G, S]
    # VPO footnote 1: (1/S) sum over the S slots; missing answers and repeats score 0 but keep
    # their slot in the denominator, so a duplicate never pays more than an empty slot.
    reward = jnp.sum(jnp.where(counted, score, 0.0), -1) / score.shape[-1]
    p, g = reward.shape
    out = scalar_group_advantages(
        reward[..., None], valid, jnp.ones((1,)), jnp.ones((p, g)), eps,
        std_ddof=std_ddof, scale_by_std=True,
    )  # fmt: skip
    out.metrics["multi_rlvr/set_reward/mean"] = jnp.sum(reward * valid) / jnp.maximum(
        jnp.sum(valid), 1
    )
    out.metrics["multi_rlvr/distinct_frac"] = jnp.sum(counted) / jnp.maximum(jnp.sum(smask), 1)
    return out


_multi_jit = jax.jit(_multi_impl, static_argnames=("dedup", "std_ddof"))


def multi_rlvr(
    set_rewards,
    set_valid=None,
    *,
    weights=None,
    dedup: bool = True,
    answer_ids=None,
    valid=None,
    std_ddof: int = 0,
    eps: float = 1e-6,
) -> C.AdvantageOutput:
    """Multi-RLVR: ``(1/S) sum_s w* . r_s`` (repeats and missing answers score 0), then GRPO.

    Args:
      set_rewards: float ``[P, G, S, M]``; set_valid: bool ``[P, G, S]`` or None.
      weights: ``w*`` ``[M]`` (None = uniform mean ``1/M``).
      dedup: a repeat of an earlier answer of the set scores 0 (its slot still counts in S).
      answer_ids: optional int ``[P, G, S]`` answer identities for ``dedup``.
      valid: bool ``[P, G]`` rollout validity or None.
      std_ddof, eps: as :func:`grpo`.
    """
    C.check_choice("std_ddof", std_ddof, (0, 1))
    set_rewards, set_valid = C.check_batch(
        set_rewards, set_valid, name="set_rewards", valid_name="set_valid", ndim=4
    )
    p, g, s, m = set_rewards.shape
    w = C.check_weights(weights, m, default=1.0 / m)
    valid = C.check_batch(jnp.zeros((p, g, 1)), valid)[1]
    if answer_ids is not None:
        answer_ids = jnp.asarray(answer_ids)
        if answer_ids.shape != (p, g, s):
            raise ValueError(f"answer_ids must have shape {(p, g, s)}; got {answer_ids.shape}")
        answer_ids = answer_ids[..., None]
    return _multi_jit(
        set_rewards, set_valid, valid, answer_ids, w, eps, dedup=bool(dedup), std_ddof=std_ddof
    )


RANDOM_W = Method("random_w", random_w, needs_key=True)
MULTI_RLVR = Method("multi_rlvr", multi_rlvr, inputs="sets")
