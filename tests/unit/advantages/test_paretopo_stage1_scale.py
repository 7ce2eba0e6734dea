"""ParetoPO's global Stage 1 (arXiv:2606.16111, Algorithm 1) multiplies every reward of a step by one
scalar ``r_pareto`` in [0.5, 2). Does that scale survive the normalisations after it?

* GRPO (``A = (c s − mean) / (std(c s) + eps)``): algebraically ``A(c, eps) = A(1, eps / c)``: the
  scale cancels except through ``eps``. Measured on the batch below (64 groups × 16, float32, CPU):
  ``|A(c) − A(1)|`` up to 5.0e-5 (c = 0.25), 1.7e-5 (0.5), 8e-6 (1.9): not bit-exact, and not a
  rounding effect (it is ``eps``). The identity ``A(c, eps) = A(1, eps / c)`` holds **bit-exactly
  for powers of two** (scaling by 2^k commutes with every rounding: products, sums, sqrt, division)
  and up to rounding otherwise: measured max 7.2e-7 for c in {0.937, 1.9, 0.6, 1.37, 0.73}.
* Stage 2's min-max normalisation (Eq. 8, ``pareto_rank``): dominance and ``r_hat`` are invariant
  to a positive scale of the rewards: bit-exact for powers of two (all three ``normalize`` modes),
  measured max 1.2e-6 otherwise.

The tolerances for a scale that is not a power of two come from a first-order rounding analysis
(Higham's ``γ_n = n u``, float32 ``u = 2^-24``), not from the measurement (module's helpers)."""

import numpy as np
import pytest

from mojax.advantages.grpo import dr_grpo, grpo
from mojax.advantages.pareto_rank import pareto_rank

U = float(np.finfo(np.float32).eps) / 2  # unit roundoff 2^-24
W = (0.6, 0.4)
POW2 = (0.5, 2.0, 0.25, 4.0)
OTHER = (0.5 + 1.5 * np.tanh(0.3), 1.9, 0.6, 1.37, 0.73)  # r_pareto-like values


def _batch(p=64, g=16, m=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((p, g, m)).astype(np.float32), rng.random((p, g)) < 0.9


def _adv(fn, r, v, **kw):
    return np.asarray(fn(r, v, weights=W, **kw).advantages, np.float64)


def _grpo_tolerance(r, v, a):
    """Per sample, twice (two runs) the first-order bound on one run's rounding error relative to
    the exact ``A``: the rounded scaled reward ``fl(c s)`` is off by ``u |s|``; the shift by the group
    max, the mean (a sum of ``G`` terms), the deviation, the variance (``G`` terms), sqrt, ``+ eps``
    and the division add ``γ_{G+8}``; errors in ``dev`` and ``std`` carry ``R / σ`` (``R = max |s|``
    of the group, ``σ`` its std) into ``A`` as ``(1 + |A|)``."""
    s = np.where(v, r.astype(np.float64) @ np.asarray(W), np.nan)
    big = np.nanmax(np.abs(s), axis=-1, keepdims=True)
    sigma = np.nanstd(s, axis=-1, keepdims=True)
    g = r.shape[1]
    return 2 * (g + 8) * U * (big / sigma) * (1 + np.abs(a))


def test_global_scale_under_grpo_is_eps_over_scale_bit_exact_for_powers_of_two():
    r, v = _batch()
    for c in POW2:
        scaled = _adv(grpo, r, v, reward_scale=c)
        np.testing.assert_array_equal(scaled, _adv(grpo, r, v, eps=1e-6 / c))
        np.testing.assert_array_equal(
            _adv(grpo, r, v, reward_scale=c, eps=0.0), _adv(grpo, r, v, eps=0.0)
        )
        assert np.abs(scaled - _adv(grpo, r, v)).max() > 0  # eps: not the unscaled advantages


def test_global_scale_under_grpo_cancels_up_to_rounding_otherwise():
    r, v = _batch()
    for c in OTHER:
        c = float(np.float32(c))
        ref = _adv(grpo, r, v, eps=1e-6 / c)
        tol = _grpo_tolerance(r, v, ref)
        assert np.all(np.abs(_adv(grpo, r, v, reward_scale=c) - ref) <= tol), c
        ref0 = _adv(grpo, r, v, eps=0.0)
        assert np.all(np.abs(_adv(grpo, r, v, reward_scale=c, eps=0.0) - ref0) <= tol), c
    # what does act: a per-sample scale (per-trajectory mode) and Dr.GRPO (no std)
    scales = np.random.default_rng(1).uniform(0.5, 2.0, r.shape[:2]).astype(np.float32)
    assert np.abs(_adv(grpo, r, v, reward_scale=scales) - _adv(grpo, r, v)).max() > 0.1
    np.testing.assert_allclose(
        _adv(dr_grpo, r, v, reward_scale=0.5), 0.5 * _adv(dr_grpo, r, v), rtol=0, atol=0
    )  # Dr.GRPO: A = c (s − mean), exact for c = 1/2


def _fronts(r, v):
    """Non-dominated sorting by peeling, per group (maximisation; -1 for invalid samples)."""
    front = np.full(r.shape[:2], -1)
    for i in range(r.shape[0]):
        left, k = set(np.nonzero(v[i])[0]), 0
        while left:
            top = {a for a in left if not any(
                np.all(r[i, b] >= r[i, a]) and np.any(r[i, b] > r[i, a]) for b in left)}  # fmt: skip
            front[i, list(top)] = k
            left, k = left - top, k + 1
    return front


def _rank_tolerance(r, v, a, beta=0.5):
    """Per sample, for ``normalize="none"``: ``A = A_base + beta (r_hat − 1/2)`` with ``r_hat = (r_w −
    min) / (max − min)`` over the sample's Pareto rank. ``r_w = w · (c r)`` rounds with ``γ_{M+1}``
    relative to ``Σ |w_m r_m|``; numerator and denominator each carry two such errors, the division
    ``u``; over the rank's spread: ``4 γ_{M+1} S / spread + 3u`` per run, two runs, times ``beta``,
    plus the final sum's ``u |A|``."""
    m = r.shape[-1]
    rw = r.astype(np.float64) @ np.asarray(W)
    size = np.abs(r.astype(np.float64)) @ np.abs(np.asarray(W))
    front = _fronts(r, v)
    tol = np.zeros(r.shape[:2])
    for i, j in zip(*np.nonzero(v)):
        same = v[i] & (front[i] == front[i, j])
        spread = rw[i, same].max() - rw[i, same].min()
        if spread > 0:
            tol[i, j] = 2 * beta * (4 * (m + 1) * U * size[i, same].max() / spread + 3 * U)
    return tol + U * np.abs(a)


def test_global_scale_cancels_under_stage2_min_max():
    r, v = _batch()
    for c in POW2:
        for mode in ("none", "center", "zscore"):
            got = np.asarray(pareto_rank(np.float32(c) * r, v, normalize=mode).advantages)
            np.testing.assert_array_equal(
                got, np.asarray(pareto_rank(r, v, normalize=mode).advantages)
            )
    base = np.asarray(pareto_rank(r, v).advantages, np.float64)
    tol = _rank_tolerance(r, v, base)
    for c in OTHER:
        got = np.asarray(pareto_rank(np.float32(c) * r, v).advantages, np.float64)
        assert np.all(np.abs(got - base) <= tol), c


@pytest.mark.parametrize("c", [0.5, 1.9])
def test_the_tolerances_catch_a_scale_that_does_not_cancel(c):
    """The bounds are far below what a scale that acted would change: Dr.GRPO's advantages (which
    keep ``c``) fail the GRPO bound, and ``r_hat`` off by the scale fails the rank bound."""
    r, v = _batch()
    a = _adv(dr_grpo, r, v)
    assert not np.all(np.abs(_adv(dr_grpo, r, v, reward_scale=c) - a) <= _grpo_tolerance(r, v, a))
    base = np.asarray(pareto_rank(r, v).advantages, np.float64)
    moved = np.asarray(pareto_rank(r, v, beta=0.5 * c).advantages, np.float64)
    assert not np.all(np.abs(moved - base) <= _rank_tolerance(r, v, base))
