"""VPO: Dirichlet-scalarized set maximum over multi-answer completions (VPO, arXiv:2605.22817).

Each completion holds S answers with reward vectors ``set_rewards [P, G, S, M]``; missing or
unparseable answers are zero vectors (``set_valid = False``). Per group, K weights
``w_k ~ Dir(alpha 1)`` (Sec. 3.2, Eq. 1; ``alpha = 1``) are drawn from ``key`` and shared by the
group's G rollouts so that all sets are compared under the same draws; a fresh key each step gives
fresh weights (K = 100: the authors' code default; the paper does not say). The Monte-Carlo set
reward (Sec. 3.2, "Reward estimation") is

``R_hat(S) = (1/K) sum_k max_{s in S} w_k . r(x, s)``

followed by a group z-score with population std + 1e-6, and 0 for the whole group if its std is
below 1e-6 (authors' code). The advantage applies to every token of the completion.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mojax.advantages import _common as C
from mojax.advantages._method import Method

__all__ = ["VPO", "vpo", "dirichlet_weights", "set_max_reward"]


def dirichlet_weights(key, num_groups: int, num_weights: int, num_objectives: int, alpha=1.0):
    """``[P, K, M]`` weights on the simplex, ``Dir(alpha * 1_M)``; deterministic in ``key``.

    For ``alpha == 1`` (the papers' choice) the draw is normalised i.i.d. Exp(1) variables, which is
    exactly ``Dir(1)`` without the gamma sampler behind ``jax.random.dirichlet`` (used for any
    other ``alpha``).
    """
    shape = (num_groups, num_weights, num_objectives)
    if isinstance(alpha, (int, float)) and float(alpha) == 1.0:
        e = jax.random.exponential(key, shape, dtype=jnp.float32)
        return e / jnp.sum(e, axis=-1, keepdims=True)
    conc = jnp.full((num_objectives,), alpha, dtype=jnp.float32)
    return jax.random.dirichlet(key, conc, shape=shape[:2])


def set_max_reward(r, weights):
    """``(1/K) sum_k max_s w_k . r_s``: ``r [P, G, S, M]``, ``weights [P, K, M]`` -> ``[P, G]``."""
    scores = jnp.einsum("pgsm,pkm->pgks", r, weights)
    return jnp.mean(jnp.max(scores, axis=-1), axis=-1)


def _impl(set_rewards, set_valid, valid, key, alpha, eps, min_std, *, num_weights):
    p, _, _, m = set_rewards.shape
    r, smask = C.effective_mask(set_rewards, set_valid)  # invalid answers -> zero vectors
    w = dirichlet_weights(key, p, num_weights, m, alpha)
    reward = set_max_reward(r, w)
    adv, std = C.group_zscore(reward, valid, eps=eps, min_std=min_std)
    keep = valid & C.group_ok(valid) & (std >= min_std)
    metrics = C.group_metrics(valid, std)
    metrics["vpo/set_reward/mean"] = jnp.sum(reward * valid) / jnp.maximum(jnp.sum(valid), 1)
    metrics["vpo/answer_valid_frac"] = jnp.mean(smask.astype(jnp.float32))
    metrics["vpo/flat_group_frac"] = jnp.mean((std[..., 0] < min_std).astype(jnp.float32))
    return C.AdvantageOutput(C.finalize(adv, keep), None, metrics, None)


_jit = jax.jit(_impl, static_argnames=("num_weights", "alpha"))


def check_key(key):
    if key is None:
        raise ValueError("key is required (a jax.random key; pass a fresh one every step)")
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape != (2,):
        raise ValueError(f"key must be a jax.random key; got dtype {key.dtype} shape {key.shape}")
    return key


def vpo(
    set_rewards,
    set_valid=None,
    *,
    key,
    num_weights: int = 100,
    alpha: float = 1.0,
    valid=None,
    eps: float = 1e-6,
    min_std: float = 1e-6,
) -> C.AdvantageOutput:
    """VPO advantages from multi-answer set rewards (VPO Eq. 1 and Sec. 3.2).

    Args:
      set_rewards: float ``[P, G, S, M]``.
      set_valid: bool ``[P, G, S]`` (False = missing / unparseable answer, scored as a zero vector).
      key: jax random key for the ``[P, K, M]`` Dirichlet weights (fresh per step).
      num_weights: K.
      alpha: Dirichlet concentration.
      valid: bool ``[P, G]`` rollout validity (None = all valid; a rollout whose answers are all
        invalid is still a valid rollout with set reward 0).
      eps: std offset; min_std: groups with std below it get 0.
    """
    set_rewards, set_valid = C.check_batch(
        set_rewards, set_valid, name="set_rewards", valid_name="set_valid", ndim=4
    )
    if int(num_weights) < 1:
        raise ValueError(f"num_weights must be >= 1; got {num_weights}")
    if not float(alpha) > 0:
        raise ValueError(f"alpha must be > 0; got {alpha}")
    p, g = set_rewards.shape[:2]
    valid = C.check_batch(jnp.zeros((p, g, 1)), valid)[1]
    return _jit(
        set_rewards, set_valid, valid, check_key(key), float(alpha), eps, min_std,
        num_weights=int(num_weights),
    )  # fmt: skip


VPO = Method("vpo", vpo, inputs="sets", needs_key=True)
