"""Peer conformance: PPO clip, dual clip and the k1/k2/k3 KL estimators vs NeMo-RL, SkyRL, Tunix.

mojax: ``o = min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)``, dual clip ``o = max(o, c A)``
for ``A < 0`` (off by default: ``dual_clip=None``), loss ``-o``; KL with ``q = logpi_ref - logpi``:
``k1 = -q``, ``k2 = q^2 / 2``, ``k3 = exp(q) - q - 1`` (clamped to [-10, 10]).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax.learner.losses import kl_penalty, ppo_clip_loss

f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731


def test_nemo_rl_ppo_clipping():
    """NVIDIA-NeMo/RL tests/unit/algorithms/test_loss_functions.py::
    test_clipped_pg_loss_ppo_clipping: A = [1, -1, 2], logpi_old = [-1, -1, -1], logpi =
    [-1.69315, -1.0, -0.59453] (ratios 0.5, 1, 1.5), clip 0.2, token-level mean -> -0.6333
    (per token [-0.5, 1.0, -2.4])."""
    loss, m = ppo_clip_loss(
        f32([[-1.69315, -1.0, -0.59453]]), f32([[-1.0, -1.0, -1.0]]), f32([[1.0, -1.0, 2.0]]),
        f32([[1.0, 1.0, 1.0]]), clip_low=0.2, clip_high=0.2, agg="token-mean",
    )  # fmt: skip
    assert float(loss) == pytest.approx(-0.6333, rel=1e-3)  # NeMo-RL's tolerance
    assert float(loss) == pytest.approx(-1.9 / 3, abs=2e-6)  # -0.5 + 1.0 - 2.4, exactly
    assert float(m["clip_frac_high"]) == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "peer",
    [
        "NVIDIA-NeMo/RL tests/unit/algorithms/test_loss_functions.py::test_clipped_pg_loss_dual_clip",
        "NovaSky-AI/SkyRL skyrl-train/tests/cpu/algorithms/test_losses.py::test_policy_loss_dual_clip",
    ],
)
def test_dual_clip(peer):
    """A = [1, -1, -4], logpi_old = [-1, -1, -3], logpi = [-1.69315, -1.0, -0.69741] (ratios 0.5,
    1, 10), clip 0.2, c = 3 -> per token [-0.5, 1.0, 12.0], mean 4.1667 (both peers). Without
    the dual clip (mojax's default ``dual_clip=None``) the last token costs 40 -> mean 13.5."""
    args = (
        f32([[-1.69315, -1.0, -0.69741]]), f32([[-1.0, -1.0, -3.0]]), f32([[1.0, -1.0, -4.0]]),
        f32([[1.0, 1.0, 1.0]]),
    )  # fmt: skip
    loss, m = ppo_clip_loss(*args, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    assert float(loss) == pytest.approx(4.1667, abs=1e-4), peer
    assert float(m["dual_clip_frac"]) == pytest.approx(1 / 3)
    plain, _ = ppo_clip_loss(*args, clip_low=0.2, clip_high=0.2)
    assert float(plain) == pytest.approx((-0.5 + 1.0 + 40.0) / 3, rel=1e-4)


def test_nemo_rl_k3_kl_penalty():
    """NVIDIA-NeMo/RL tests/unit/algorithms/test_loss_functions.py::
    test_clipped_pg_loss_kl_penalty: A = 0, logpi = [0, -1, -2], logpi_ref = [-1, -1, -1], beta
    0.1: k3 per token [0.368, 0.0, 0.718], mean 0.362, loss 0.0362 (exactly 0.03620538)."""
    lp = f32([[0.0, -1.0, -2.0]])
    loss, m = ppo_clip_loss(
        lp, f32([[0.0, 0.0, 0.0]]), f32([[0.0, 0.0, 0.0]]), f32([[1.0, 1.0, 1.0]]),
        ref_logprobs=f32([[-1.0, -1.0, -1.0]]), kl_coef=0.1, kl_type="k3",
    )  # fmt: skip
    assert float(loss) == pytest.approx(0.0362, rel=1e-3)
    assert float(loss) == pytest.approx(0.03620538, rel=1e-6)
    assert float(m["kl"]) == pytest.approx(0.3620538, rel=1e-6)


def test_skyrl_approx_kl_k1_k2_k3():
    """NovaSky-AI/SkyRL skyrl-train/tests/cpu/utils/test_ppo_utils.py::test_compute_approx_kl:
    logpi = [0.2, 0.3, 0.5], logpi_base = [0.1, 0.2, 0.4], mask [1, 1, 0]: k1 = 0.1, k2 = 0.005,
    k3 = exp(-0.1) - 1 + 0.1 = 0.00483742 on the first two tokens, 0 on the masked one."""
    lp, base = f32([[0.2, 0.3, 0.5]]), f32([[0.1, 0.2, 0.4]])
    mask = np.array([[1.0, 1.0, 0.0]])
    want = {"k1": 0.1, "k2": 0.005, "k3": 0.004837418}
    for kind, value in want.items():
        got = np.asarray(kl_penalty(lp, base, kind)) * mask
        np.testing.assert_allclose(got, [[value, value, 0.0]], rtol=2e-5, atol=1e-8)


# google/tunix tests/rl/common_test.py::test_compute_kl_divergence: logpi and logpi_ref are
# jax.random.uniform(k, (2, 2, 4)) for (k1, k2) = split(PRNGKey(0)) with
# jax_threefry_partitionable=False; expected values copied from the test.
TUNIX = {
    "kl": [
        [[0.38486493, 0.7469206, 0.3495195, 0.5621129],
         [-0.4474684, -0.13095665, 0.46064317, -0.19887352]],
        [[0.43108296, 0.53564644, -0.25296474, 0.44137287],
         [-0.06834459, -0.12115264, -0.61533415, 0.15468943]],
    ],
    "mse_kl": [
        [[0.07406051, 0.27894518, 0.06108194, 0.15798548],
         [0.10011399, 0.00857482, 0.10609607, 0.01977534]],
        [[0.09291626, 0.14345856, 0.03199558, 0.09740501],
         [0.00233549, 0.00733898, 0.18931806, 0.01196441]],
    ],
    "low_var_kl": [
        [[0.0654075, 0.220744, 0.0545462, 0.1321163],
         [0.1168784, 0.0089617, 0.0915209, 0.0211542]],
        [[0.080888, 0.1209372, 0.0348731, 0.0845257],
         [0.0023897, 0.0076445, 0.2349406, 0.0113707]],
    ],
}  # fmt: skip


def test_tunix_kl_methods_map_to_k1_k2_k3():
    """Tunix's ``kl`` / ``mse_kl`` / ``low_var_kl`` are mojax's ``k1`` / ``k2`` / ``k3`` (Tunix
    checks with atol 1e-5, rtol 1e-2; mojax matches to 1e-6)."""
    with jax.threefry_partitionable(False):
        k1, k2 = jax.random.split(jax.random.PRNGKey(0))
        lp = jax.random.uniform(k1, shape=(2, 2, 4))
        ref = jax.random.uniform(k2, shape=(2, 2, 4))
    for tunix, mine in (("kl", "k1"), ("mse_kl", "k2"), ("low_var_kl", "k3")):
        got = kl_penalty(lp, ref, mine)
        np.testing.assert_allclose(got, TUNIX[tunix], atol=1e-6, rtol=1e-5, err_msg=tunix)
