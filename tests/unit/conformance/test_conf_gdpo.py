"""Peer conformance: GDPO (per-objective group z-scores, sum, batch normalisation) vs verl (token
whitening), TRL (sample normalisation) and NeMo-RL.

mojax default: population std at both levels, batch normalisation over samples, eps 1e-6 outside
the std. The switches ``std_ddof``, ``batch_std_ddof``, ``batch_norm="token"`` + ``token_counts``
and ``eps`` reproduce each peer.
"""

import numpy as np

from mojax.advantages import gdpo

# verl tests/trainer/ppo/test_gdpo_on_cpu.py::_gdpo_inputs: groups a = rows 0-1, b = rows 2-3;
# accuracy [1, 0, 0, 1], format [0, 1, 0, 1], two response tokens each.
VERL_R = np.array(
    [[[1.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [1.0, 1.0]]], np.float32
)  # [P=2, G=2, M=2] (accuracy, format)


def test_verl_gdpo_token_whitening():
    """verl ``compute_gdpo_outcome_advantage`` (verl/trainer/ppo/core_algos.py): per key GRPO
    (``torch.std``, eps 1e-6), sum, then ``verl_F.masked_whiten`` over tokens (unbiased variance,
    ``rsqrt(var + 1e-8)``). verl's test asserts group a = 0, group b signs and mean 0; the values
    by hand: group b sums -/+ x (x = 1.4142126), tokens [0, 0, 0, 0, -x, -x, x, x]: unbiased var
    4x^2 / 7 -> -/+ sqrt(7/4) = 1.3228757. mojax's default (ddof 0, samples) gives -/+ sqrt(2)."""
    tc = np.full((2, 2), 2.0)
    out = gdpo(VERL_R, batch_norm="token", token_counts=tc, std_ddof=1, batch_std_ddof=1)
    a = np.asarray(out.advantages)
    np.testing.assert_allclose(a, [[0.0, 0.0], [-1.3228757, 1.3228757]], rtol=2e-6, atol=1e-6)
    assert a[0].tolist() == [0.0, 0.0] and a[1, 0] < 0 < a[1, 1] and abs(a.mean()) < 1e-6
    np.testing.assert_allclose(
        gdpo(VERL_R).advantages, [[0.0, 0.0], [-1.4142126, 1.4142126]], rtol=2e-6, atol=1e-6
    )


def test_verl_gdpo_token_whitening_unequal_lengths():
    """Same inputs with response lengths [2, 2, 1, 3] (by hand from ``masked_whiten``): tokens
    [0, 0, 0, 0, -x, x, x, x], mean x/4, unbiased var 0.5 x^2 -> advantages -sqrt(2)/4 (rows of
    group a), -5 sqrt(2)/4, 3 sqrt(2)/4. Sample normalisation would ignore the lengths."""
    tc = np.array([[2.0, 2.0], [1.0, 3.0]])
    out = gdpo(VERL_R, batch_norm="token", token_counts=tc, std_ddof=1, batch_std_ddof=1)
    s2 = np.sqrt(2.0)
    want = [[-s2 / 4, -s2 / 4], [-5 * s2 / 4, 3 * s2 / 4]]
    np.testing.assert_allclose(out.advantages, want, rtol=2e-6, atol=1e-6)


def test_trl_gdpo_normalize_then_sum():
    """TRL ``trl/trainer/grpo_trainer.py`` with ``multi_objective_aggregation="normalize_then_sum"``:
    per reward ``(r - mean_g) / (nanstd_g + 1e-4)`` (Bessel), weighted sum, then
    ``(s - mean) / (s.std() + 1e-4)`` over the batch (ddof 1). No numeric case in TRL's suite; by
    hand on verl's inputs: group b -/+ 0.5 / (0.70710678 + 1e-4) per key, sum -/+ y = 1.4140136,
    batch std_1 = y sqrt(2/3) -> -/+ y / (0.81649658 y + 1e-4) = 1.2246388."""
    out = gdpo(VERL_R, std_ddof=1, batch_std_ddof=1, eps=1e-4)
    np.testing.assert_allclose(out.advantages, [[0.0, 0.0], [-1.2246388, 1.2246388]], rtol=2e-6)
    # reward_weights [2, 0.5] (by hand): per-key z = 0.5 / (sqrt(0.5) + 1e-4) = 0.70700675;
    # sums [1.5z, -1.5z, -2.5z, 2.5z] -> batch-normalised [0.6300886, -0.6300886, -1.0501477, ...]
    out_w = gdpo(VERL_R, weights=[2.0, 0.5], std_ddof=1, batch_std_ddof=1, eps=1e-4)
    want_w = [[0.6300886, -0.6300886], [-1.0501477, 1.0501477]]
    np.testing.assert_allclose(out_w.advantages, want_w, rtol=2e-6)


def test_nemo_rl_gdpo_multiple_rewards():
    """NVIDIA-NeMo/RL tests/unit/algorithms/test_grpo.py::
    test_gdpo_advantage_estimator_multiple_rewards: one group of two samples, reward1 [1, 1],
    reward2 [1, -1], reward3 [1, 0] -> [0.7071, -0.7071] (checked there with torch.allclose's
    default rtol 1e-5, atol 1e-8). mojax's default (population std at both levels) gives -/+ 1."""
    r = np.array([[[1.0, 1.0, 1.0], [1.0, -1.0, 0.0]]], np.float32)
    got = np.asarray(gdpo(r, std_ddof=1, batch_std_ddof=1).advantages)[0]
    np.testing.assert_allclose(got, [0.7071, -0.7071], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(got, [2**-0.5, -(2**-0.5)], rtol=2e-6)
    np.testing.assert_allclose(gdpo(r).advantages[0], [1.0, -1.0], rtol=2e-6)
