"""Peer conformance: GRPO group normalisation (std ddof, eps placement) vs verl, TRL and NeMo-RL.

mojax default: ``(s - mean_g) / (std_g + 1e-6)`` with the population std (ddof 0, methods.md).
Peers use Bessel's correction (``torch.std``); the switch ``std_ddof=1`` (and ``eps``) reproduces
them. Expected numbers come from the peers' tests where they have numeric cases (NeMo-RL, SkyRL);
where a peer's suite has none (verl's GRPO, TRL) they are computed by hand from the peer's code,
as each case's comment says.
"""

import numpy as np
import pytest

from mojax.advantages import dr_grpo, grpo


def _one_objective(groups):
    return np.asarray(groups, np.float32)[..., None]  # [P, G, 1]


def test_verl_grpo_bessel_std_and_eps_outside():
    """verl ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage``: per group
    ``(score - mean) / (torch.std(scores) + epsilon)``, ``torch.std`` unbiased, epsilon 1e-6.
    verl's suite has no numeric GRPO case; the input is SkyRL's GRPO case (two groups [6, 3] and
    [9, 12]). By hand: std_1 = sqrt(2 * 1.5^2 / 1) = 2.1213203 -> 1.5 / (2.1213203 + 1e-6) =
    0.70710645; mojax's population std 1.5 gives 1.5 / 1.500001 = 0.99999933."""
    r = _one_objective([[6.0, 3.0], [9.0, 12.0]])
    verl = np.array([[0.70710645, -0.70710645], [-0.70710645, 0.70710645]])
    np.testing.assert_allclose(grpo(r, std_ddof=1, eps=1e-6).advantages, verl, rtol=1e-6)
    np.testing.assert_allclose(grpo(r).advantages, np.sign(verl) * 0.99999933, rtol=1e-6)


def test_skyrl_and_verl_dr_grpo_no_std():
    """SkyRL ``skyrl-train/tests/cpu/utils/test_ppo_utils.py::
    test_compute_grpo_outcome_advantage_norm_std_false`` (verl's ``norm_adv_by_std_in_grpo=False``
    is the same Dr.GRPO path): groups [6, 3] and [9, 12] -> [1.5, -1.5, -1.5, 1.5]."""
    r = _one_objective([[6.0, 3.0], [9.0, 12.0]])
    np.testing.assert_allclose(dr_grpo(r).advantages, [[1.5, -1.5], [-1.5, 1.5]], atol=1e-6)


def test_verl_single_sample_group_is_a_documented_difference():
    """verl's GRPO gives a one-sample group mean 0 and std 1, i.e. advantage = raw score / (1 +
    1e-6) (5.0 -> 4.999995). mojax gives 0 on purpose (methods.md: no signal without a group);
    there is no switch for verl's behaviour."""
    r = _one_objective([[5.0, 0.0]])
    out = grpo(r, np.array([[True, False]]), std_ddof=1)
    np.testing.assert_array_equal(out.advantages, 0.0)


def test_trl_grpo_scale_rewards_group():
    """TRL ``trl/trainer/grpo_trainer.py::_generate_and_score_completions`` with
    ``scale_rewards="group"``: ``(r - mean_g) / (std_g + 1e-4)``, ``std`` = ``torch.std`` (ddof 1).
    TRL's suite has no numeric case; by hand for rewards [1, 0, 0.5, 0.5]: mean 0.5, std_1 =
    sqrt(0.5 / 3) = 0.40824829 -> 0.5 / 0.40834829 = 1.22444494. ``scale_rewards="none"`` is
    ``r - mean_g`` (mojax ``dr_grpo``)."""
    r = _one_objective([[1.0, 0.0, 0.5, 0.5]])
    trl = [[1.22444494, -1.22444494, 0.0, 0.0]]
    np.testing.assert_allclose(grpo(r, std_ddof=1, eps=1e-4).advantages, trl, rtol=1e-6)
    np.testing.assert_allclose(dr_grpo(r).advantages, [[0.5, -0.5, 0.0, 0.0]], atol=1e-7)
    default = grpo(r).advantages  # population std 0.35355339 + 1e-6
    np.testing.assert_allclose(default, [[1.41420956, -1.41420956, 0.0, 0.0]], rtol=1e-6)


@pytest.mark.parametrize(
    "rewards,expected",
    [
        # NVIDIA-NeMo/RL tests/unit/algorithms/test_grpo.py::test_grpo_advantage_estimator_zero_std:
        # prompt 0 rewards [2, 2] (std 0 -> advantage 0), prompt 1 [1, 3] (Bessel: std sqrt(2))
        ([[2.0, 2.0], [1.0, 3.0]], [[0.0, 0.0], [-(2**-0.5), 2**-0.5]]),
        # ...::test_grpo_advantage_estimator_tensor_shapes: [1, 3] -> -/+ 1/sqrt(2)
        ([[1.0, 3.0]], [[-(2**-0.5), 2**-0.5]]),
        # ...::test_grpo_advantage_estimator_zero_std_and_zero_advantage: all equal -> 0
        ([[5.0, 5.0, 5.0, 5.0]], [[0.0, 0.0, 0.0, 0.0]]),
    ],
)
def test_nemo_rl_grpo_estimator(rewards, expected):
    """NeMo-RL normalises with the Bessel-corrected std (``std_ddof=1``); NeMo-RL's tests use
    rtol 1e-4 against 1/sqrt(2), mojax meets 1e-5 (its eps 1e-6 is the only difference)."""
    got = grpo(_one_objective(rewards), std_ddof=1).advantages
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    if np.ptp(rewards) > 0:  # the default population std gives -/+ 1 for two samples instead
        default = grpo(_one_objective(rewards)).advantages
        assert abs(abs(float(default[-1, -1])) - 1.0) < 1e-5
