"""Peer conformance: the sampler-learner mismatch and its corrections vs verl and Tunix.

mojax (``mojax.learner.correction``): ``δ = logπ_old − logμ`` (learner − sampler), ``ρ = exp(δ)``;
token TIS ``min(ρ_t, C)``, sequence TIS ``min(exp(Σ_t δ_t), C)``, token masking (keep
``low <= ρ_t <= high``), geometric rejection (keep a response when ``low <= exp(mean_t δ_t) <=
high``), k3 ``E[ρ − log ρ − 1]``. The golden values are worked out by hand from each peer's
formula (the ratios are chosen so they are exact); the cases cite the function they mirror:

* verl: ``volcengine/verl verl/trainer/ppo/rollout_corr_helper.py`` --
  ``compute_rollout_correction_weights`` (``rollout_is`` "token" / "sequence", truncation after
  zeroing padding, ``rollout_is_ratio_fraction_high`` before truncation),
  ``compute_rollout_rejection_mask`` (``rollout_rs`` "token" / "geometric": keep ``lower <= w <=
  upper``, ``response_mask * mask``), ``compute_offpolicy_metrics`` (``k3_kl``, ``kl``), and
  ``verl/trainer/ppo/core_algos.py`` ``compute_policy_loss_vanilla`` (``pg_losses *
  rollout_is_weights``, then ``agg_loss`` over the modified ``response_mask``);
* Tunix: ``google/tunix tunix/rl/common.py`` ``compute_sampler_trainer_agreement_jax`` /
  ``_compute_is_rs_weights`` (``sampler_is="token"``: ``min(token_ratio, sampler_is_threshold)``
  with threshold 2.0; ``sampler_rs`` "token" (IcePop band) / "geometric": weight 0 outside
  ``[sampler_rs_min, sampler_rs_max]``), applied in the agentic GRPO learner's loss before
  aggregation (google/tunix PR 1523 "Agentic GRPO: TIS correction").

The ratios stay away from the band edges (an fp32 ``exp(log 0.5)`` may land on either side).
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from mojax.learner.correction import CorrectionConfig, correct, mismatch_metrics
from mojax.learner.losses import ppo_clip_loss

f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731


def _logs(ratios):
    """Sampler log-probs ``μ`` and learner log-probs with ``π_old / μ = ratios`` (a 0 ratio: a
    padded position, both log-probs 0)."""
    r = np.asarray(ratios, np.float64)
    behave = np.where(r > 0, -1.3, 0.0)
    old = np.where(r > 0, behave + np.log(np.where(r > 0, r, 1.0)), 0.0)
    return f32(old), f32(behave), f32((r > 0).astype(np.float32))


RATIOS = [[0.4, 1.0, 1.6, 3.0, 0.0]]  # the last token is padding


def test_verl_token_tis():
    """verl ``compute_rollout_correction_weights(rollout_is="token", rollout_is_threshold=2.0)``:
    weights ``exp(δ) * response_mask`` truncated at 2 -> [0.4, 1.0, 1.6, 2.0, 0];
    ``rollout_is_ratio_fraction_high`` (before truncation) = 1/4."""
    old, behave, mask = _logs(RATIOS)
    w, m, met = correct(old, behave, mask, CorrectionConfig(is_level="token", is_cap=2.0))
    np.testing.assert_allclose(np.asarray(w), [[0.4, 1.0, 1.6, 2.0, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(m), np.asarray(mask))  # no rejection
    assert float(met["is_truncated_frac"]) == pytest.approx(0.25)
    assert float(met["is_weight_mean"]) == pytest.approx((0.4 + 1.0 + 1.6 + 2.0) / 4, rel=1e-6)


def test_tunix_token_tis_cap_two():
    """Tunix ``_compute_is_rs_weights(sampler_is="token", sampler_is_threshold=2.0)``:
    ``where(valid_tok, min(token_ratio, 2.0), 0)`` -> [0.4, 1.0, 1.6, 2.0, 0] (padding 0);
    ``sampler_is/frac_clipped_at_threshold`` = 1/4."""
    old, behave, mask = _logs(RATIOS)
    w, m, met = correct(old, behave, mask, CorrectionConfig(is_level="token"))  # default cap 2
    np.testing.assert_allclose(np.asarray(w * m), [[0.4, 1.0, 1.6, 2.0, 0.0]], rtol=1e-6)
    assert float(met["is_truncated_frac"]) == pytest.approx(0.25)


def test_verl_sequence_tis():
    """verl ``compute_rollout_correction_weights(rollout_is="sequence", threshold=2.0)``:
    ``exp(Σ_t m δ_t)`` per response, truncated at 2, on every token: row 0 ratios (2, 1.5) ->
    product 3 -> 2; row 1 (0.5, 1.2) -> 0.6; ``rollout_is_ratio_fraction_high`` = 1/2."""
    old, behave, mask = _logs([[2.0, 1.5, 0.0], [0.5, 1.2, 0.0]])
    w, _, met = correct(old, behave, mask, CorrectionConfig(is_level="sequence", is_cap=2.0))
    np.testing.assert_allclose(np.asarray(w), [[2.0, 2.0, 0.0], [0.6, 0.6, 0.0]], rtol=1e-6)
    assert float(met["is_truncated_frac"]) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "peer",
    [
        "verl compute_rollout_rejection_mask(rollout_rs='token', threshold=2.0, lower=0.5)",
        "Tunix _compute_is_rs_weights(sampler_rs='token', sampler_rs_min=0.5, sampler_rs_max=2.0)",
    ],
)
def test_token_masking(peer):
    """Keep ``0.5 <= ρ_t <= 2``: ratios [0.4, 1.0, 1.6, 3.0] -> mask [0, 1, 1, 0]: two of four
    tokens masked, the one response lost tokens."""
    old, behave, mask = _logs(RATIOS)
    _, m, met = correct(old, behave, mask, CorrectionConfig(reject="token", low=0.5, high=2.0))
    np.testing.assert_array_equal(np.asarray(m), [[0.0, 1.0, 1.0, 0.0, 0.0]], err_msg=peer)
    assert float(met["masked_token_frac"]) == pytest.approx(0.5)
    assert float(met["rejected_seq_frac"]) == pytest.approx(1.0)


def test_tunix_icepop_weights():
    """IcePop (Ring-1T, arXiv:2510.18855) as Tunix composes it: ``sampler_is="token"`` with
    ``sampler_rs="token"`` -> ``where(keep, min(ρ, 2), 0)`` = [0, 1.0, 1.6, 0, 0]: the kept tokens
    carry their ratio, the others drop out."""
    old, behave, mask = _logs(RATIOS)
    cfg = CorrectionConfig(is_level="token", is_cap=2.0, reject="token", low=0.5, high=2.0)
    w, m, _ = correct(old, behave, mask, cfg)
    np.testing.assert_allclose(np.asarray(w * m), [[0.0, 1.0, 1.6, 0.0, 0.0]], rtol=1e-6)


@pytest.mark.parametrize(
    "peer",
    [
        "verl compute_rollout_rejection_mask(rollout_rs='geometric', threshold=2.0, lower=0.5)",
        "Tunix _compute_is_rs_weights(sampler_rs='geometric', min=0.5, max=2.0)",
    ],
)
def test_geometric_rejection(peer):
    """Geometric mean ``exp(mean_t δ_t)`` per response: (9, 1) -> 3 (rejected), (1.21, 1) -> 1.1
    (kept), (0.09, 1) -> 0.3 (rejected); a rejected response loses every token."""
    old, behave, mask = _logs([[9.0, 1.0], [1.21, 1.0], [0.09, 1.0]])
    _, m, met = correct(old, behave, mask, CorrectionConfig(reject="geometric"))
    np.testing.assert_array_equal(np.asarray(m), [[0, 0], [1, 1], [0, 0]], err_msg=peer)
    assert float(met["rejected_seq_frac"]) == pytest.approx(2 / 3)
    assert float(met["masked_token_frac"]) == pytest.approx(4 / 6)


def test_verl_offpolicy_metrics_k3_and_k1():
    """verl ``compute_offpolicy_metrics``: ``k3_kl = masked_mean(exp(δ) − δ − 1)``, ``kl =
    masked_mean(logμ − logπ_old)``. Ratios (0.5, 1, 2): k3 per token (0.5 + ln 2 − 1, 0,
    2 − ln 2 − 1) -> mean 1/6 exactly; k1 = 0."""
    old, behave, mask = _logs([[0.5, 1.0, 2.0, 0.0]])
    m = mismatch_metrics(old, behave, mask, low=0.6, high=1.9)
    assert float(m["kl_k3"]) == pytest.approx(1 / 6, rel=1e-5)
    assert float(m["kl_k1"]) == pytest.approx(0.0, abs=1e-6)
    assert float(m["ratio_mean"]) == pytest.approx(3.5 / 3, rel=1e-6)
    assert float(m["ratio_max"]) == pytest.approx(2.0, rel=1e-6)
    assert float(m["ratio_min"]) == pytest.approx(0.5, rel=1e-6)
    assert float(m["frac_outside"]) == pytest.approx(2 / 3)  # 0.5 < 0.6 and 2 > 1.9
    # numpy's linear percentile of (0.5, 1, 2): 1 + 0.98 * (2 - 1)
    assert float(m["ratio_p99"]) == pytest.approx(1.98, rel=1e-6)
    assert float(m["logprob_abs_diff"]) == pytest.approx(2 * math.log(2) / 3, rel=1e-6)


def test_verl_vanilla_policy_loss_with_is_weights_and_rejection():
    """verl ``compute_policy_loss_vanilla`` with ``rollout_is_weights`` and a rejection-modified
    ``response_mask``, ``loss_agg_mode="token-mean"``, clip 0.2 / 0.28, dual clip c = 3:
    ``pg = where(A < 0, min(−cA, max(−Aρ, −A clip(ρ))), max(−Aρ, −A clip(ρ))) * w`` averaged
    over the kept tokens. Tokens: (ρ_θ, A, w, kept) = (1.5, 1, 0.8, 1) -> −1.28 · 0.8 = −1.024;
    (0.5, −1, 1.5, 1) -> 0.8 · 1.5 = 1.2; (5.0, −1, 2.0, 1) -> min(3, 5) · 2 = 6; (1.0, 2, 1, 0)
    rejected. Loss (−1.024 + 1.2 + 6) / 3 = 2.058667. mojax gets it by scaling A by w (the
    update's ``is_weights``) and masking the rejected token."""
    rho = np.array([[1.5, 0.5, 5.0, 1.0]])
    lp, old = f32(np.log(rho) - 1.0), f32(np.full((1, 4), -1.0))
    adv = np.array([[1.0, -1.0, -1.0, 2.0]])
    w = np.array([[0.8, 1.5, 2.0, 1.0]])
    kept = f32([[1.0, 1.0, 1.0, 0.0]])
    loss, _ = ppo_clip_loss(
        lp, old, f32(adv * w), kept, clip_low=0.2, clip_high=0.28, dual_clip=3.0
    )
    assert float(loss) == pytest.approx((-1.024 + 1.2 + 6.0) / 3, rel=1e-5)
