"""GDPO and MO-GRPO: normalise each objective within its group, then aggregate.

GDPO (SAW, arXiv:2606.07705, Eqs. 5-7; Liu et al. 2026): ``A_k = groupnorm(r_k)``,
``A = sum_k w_k A_k``, then a batch normalisation of ``A`` over all valid samples (Eq. 7). Switch
``batch_norm``: ``"sample"`` (paper, TRL; default) gives every sample equal weight, ``"token"``
(verl) weights each sample by its number of response tokens (``token_counts``). ``std_ddof`` and
``batch_std_ddof`` (default 0, population) select Bessel's correction at the group and the batch
level (1 reproduces verl, TRL and NeMo-RL; see tests/conformance).
MO-GRPO: the same sum without the batch normalisation.

Decisions (docs/methods.md): ``groupnorm`` uses the population std plus ``eps = 1e-6``; samples of
groups with < 2 valid samples are 0 and excluded from the batch statistics; ``weights=None`` means
``w_k = 1`` (Eq. 6 sums the z-scores).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mojax.advantages import _common as C
from mojax.advantages._method import Method

__all__ = ["GDPO", "MO_GRPO", "gdpo", "mo_grpo", "objective_group_advantages", "BATCH_NORMS"]

BATCH_NORMS = ("sample", "token")


def objective_group_advantages(
    r, mask, weights, token_counts, eps, *, batch_norm, token_weighted, std_ddof=0, batch_ddof=0
):
    """Traceable core: ``sum_k w_k groupnorm(r_k)`` (+ batch norm). ``r`` already masked."""
    per_obj, std = C.group_zscore(jnp.moveaxis(r, -1, 0), mask, eps=eps, ddof=std_ddof)
    adv = jnp.einsum("m,mpg->pg", weights, per_obj)  # per_obj: [M, P, G]
    keep = mask & C.group_ok(mask)
    if batch_norm:
        tc = token_counts if token_weighted else None
        adv = C.batch_normalize(adv, keep, eps=eps, token_counts=tc, ddof=batch_ddof)
    metrics = C.group_metrics(mask)
    ok = C.group_ok(mask)[..., 0]
    zero_all = jnp.all(std[..., 0] <= 0.0, axis=0) & ok
    metrics["adv/zero_std_group_frac"] = jnp.sum(zero_all) / jnp.maximum(jnp.sum(ok), 1)
    return C.finalize(adv, keep), metrics


def _impl(rewards, valid, weights, token_counts, eps, *, batch_norm, token_weighted, ddofs):
    r, mask = C.effective_mask(rewards, valid)
    adv, metrics = objective_group_advantages(
        r, mask, weights, token_counts, eps, batch_norm=batch_norm, token_weighted=token_weighted,
        std_ddof=ddofs[0], batch_ddof=ddofs[1],
    )  # fmt: skip
    return C.AdvantageOutput(adv, None, metrics, None)


_jit = jax.jit(_impl, static_argnames=("batch_norm", "token_weighted", "ddofs"))


def check_token_counts(batch_norm, token_counts, shape):
    """Validates the ``batch_norm`` switch and returns ``[P, G]`` token counts (ones if unused)."""
    C.check_choice("batch_norm", batch_norm, BATCH_NORMS)
    if batch_norm == "token":
        if token_counts is None:
            raise ValueError('batch_norm="token" needs token_counts [P, G] (response lengths)')
        return C.check_per_sample(token_counts, shape, "token_counts", nonnegative=True)
    return jnp.ones(shape, dtype=jnp.float32)


def gdpo(
    rewards,
    valid=None,
    *,
    weights=None,
    batch_norm: str = "sample",
    token_counts=None,
    eps: float = 1e-6,
    std_ddof: int = 0,
    batch_std_ddof: int = 0,
) -> C.AdvantageOutput:
    """GDPO advantages (SAW Eqs. 5-7).

    Args:
      rewards: float ``[P, G, M]``.
      valid: bool ``[P, G]`` or None.
      weights: ``[M]`` objective weights; None = all 1 (Eq. 6).
      batch_norm: ``"sample"`` (default) or ``"token"`` (needs ``token_counts``).
      token_counts: ``[P, G]`` response lengths in tokens, for ``batch_norm="token"``.
      eps: added to every std.
      std_ddof: ddof of the per-objective group std (0 = population, methods.md; 1 = verl, TRL,
        NeMo-RL).
      batch_std_ddof: ddof of the batch normalisation's std (0; 1 = TRL's ``rewards.std()``,
        NeMo-RL, verl's unbiased ``masked_whiten`` over tokens).
    """
    C.check_choice("std_ddof", std_ddof, (0, 1))
    C.check_choice("batch_std_ddof", batch_std_ddof, (0, 1))
    rewards, valid = C.check_batch(rewards, valid)
    p, g, m = rewards.shape
    w = C.check_weights(weights, m, default=1.0)
    tc = check_token_counts(batch_norm, token_counts, (p, g))
    return _jit(
        rewards, valid, w, tc, eps, batch_norm=True, token_weighted=batch_norm == "token",
        ddofs=(int(std_ddof), int(batch_std_ddof)),
    )  # fmt: skip


def mo_grpo(
    rewards, valid=None, *, weights=None, eps: float = 1e-6, std_ddof: int = 0
) -> C.AdvantageOutput:
    """MO-GRPO advantages ``A = sum_k w_k groupnorm(r_k)`` (GDPO without Eq. 7).

    Args: as :func:`gdpo` without the batch normalisation switches.
    """
    C.check_choice("std_ddof", std_ddof, (0, 1))
    rewards, valid = C.check_batch(rewards, valid)
    p, g, m = rewards.shape
    w = C.check_weights(weights, m, default=1.0)
    ones = jnp.ones((p, g), dtype=jnp.float32)
    return _jit(
        rewards, valid, w, ones, eps, batch_norm=False, token_weighted=False,
        ddofs=(int(std_ddof), 0),
    )  # fmt: skip


GDPO = Method("gdpo", gdpo)
MO_GRPO = Method("mo_grpo", mo_grpo)
