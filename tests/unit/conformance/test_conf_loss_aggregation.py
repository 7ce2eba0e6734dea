"""Peer conformance: loss aggregation modes vs verl's ``agg_loss`` and SkyRL's ``reduce_loss``.

mojax writes every mode as per-token weights (``aggregation_weights``); ``num_seqs`` fixes the
sequence count (verl's ``global_batch_size``) and ``max_len`` the Dr.GRPO constant
(verl's ``loss_scale_factor``, SkyRL's ``max_seq_len``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax.learner.losses import aggregation_weights

LOSS = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]])
MASK = np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


def agg(loss, mask, mode, max_len=None, num_seqs=None):
    w = aggregation_weights(jnp.asarray(mask), mode, max_len, num_seqs)
    return float(jnp.sum(w * jnp.asarray(loss, jnp.float32)))


def test_verl_seq_mean_token_sum_norm():
    """verl tests/trainer/ppo/test_loss_aggregation_on_cpu.py: ``_drgrpo_oracle`` = sum of the
    masked sequence sums / (batch_size * normaliser). Sequence sums 3, 18, 9:
    test_seq_mean_token_sum_norm_matches_single_dp_oracle (normaliser T = 4) -> 30 / 12 = 2.5;
    test_seq_mean_token_sum_norm_respects_loss_scale_factor (10) -> 30 / 30 = 1.0."""
    assert agg(LOSS, MASK, "seq-mean-token-sum-norm") == pytest.approx(2.5)
    assert agg(LOSS, MASK, "seq-mean-token-sum-norm", max_len=10) == pytest.approx(1.0)


def test_verl_seq_mean_token_sum_norm_gradient():
    """...::test_seq_mean_token_sum_norm_gradient_scale: d loss / d loss_mat = mask / (3 * 8)."""
    grad = jax.grad(lambda x: jnp.sum(aggregation_weights(MASK, "seq-mean-token-sum-norm", 8) * x))
    np.testing.assert_allclose(grad(jnp.asarray(LOSS, jnp.float32)), MASK / 24, rtol=1e-6)


def test_verl_empty_rows_fallback_vs_global_batch():
    """...::test_seq_mean_token_sum_norm_empty_rows_are_explicit: mask [[1,1,0],[0,0,0],[1,0,0]],
    loss_scale_factor 3. verl's fallback counts the 2 non-empty rows -> 10 / 6; with
    ``global_batch_size=3`` all rows count -> 10 / 9. mojax's default is the fallback; the switch
    ``num_seqs=3`` gives the constant normaliser (independent of how many rows are masked)."""
    loss = np.arange(1.0, 10.0).reshape(3, 3)
    mask = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert agg(loss, mask, "seq-mean-token-sum-norm", max_len=3) == pytest.approx(10 / 6)
    assert agg(loss, mask, "seq-mean-token-sum-norm", max_len=3, num_seqs=3) == pytest.approx(
        10 / 9
    )


def test_verl_other_modes_by_hand():
    """verl ``agg_loss`` (verl/trainer/ppo/core_algos.py), single data-parallel rank, by hand
    from its definitions on the same batch: token-mean = 30 / 6 = 5.0; seq-mean-token-mean =
    mean(1.5, 6, 9) = 5.5; seq-mean-token-sum = mean(3, 18, 9) = 10.0."""
    assert agg(LOSS, MASK, "token-mean") == pytest.approx(5.0)
    assert agg(LOSS, MASK, "seq-mean-token-mean") == pytest.approx(5.5)
    assert agg(LOSS, MASK, "seq-mean-token-sum") == pytest.approx(10.0)


def test_skyrl_reduce_loss():
    """NovaSky-AI/SkyRL skyrl-train/tests/cpu/utils/test_ppo_utils.py::test_reduce_loss: loss
    [[1,2,3],[4,5,6]], mask [[1,1,1],[1,0,0]]: token_mean 2.5, sequence_mean 3.0,
    seq_mean_token_sum_norm (max_seq_len 4) 1.25."""
    loss = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert agg(loss, mask, "token-mean") == pytest.approx(2.5)
    assert agg(loss, mask, "seq-mean-token-mean") == pytest.approx(3.0)
    assert agg(loss, mask, "seq-mean-token-sum-norm", max_len=4) == pytest.approx(1.25)
