"""ParetoPO's two ablations (arXiv:2606.16111, Table 3) as switches of its hooks: "w/o dynamic
weighting" is Stage 1 with ``r_pareto = 1`` (a static ``w·r`` scalarization), "w/o Pareto ranking" is
Stage 1's scalarized estimator in Stage 2 too. Reference: the plain estimators called directly."""

import dataclasses

import numpy as np

from mojax import advantages as adv
from mojax.advantages.paretopo import ParetoPOHooks
from mojax.pareto import stage1_init


def _batch(seed=0, p=4, g=6):
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 3, (p, g, 2)).astype(np.float32) / 2
    return rewards, np.ones((p, g), bool)


class _Controller:
    """The hooks' ``advantages`` on bare rewards (state as a ``Stage1State``)."""

    def __init__(self, **kw):
        self.hooks = ParetoPOHooks(
            stage1_steps=2,
            weights=(0.6, 0.4),
            stage2=adv.pareto_rank,
            stage1_estimator="dr_grpo",
            **kw,
        )

    def advantages(self, step, state, rewards, valid):
        inputs = adv.AdvantageInputs(rewards, valid)
        state = None if state is None else state.to_state()
        out, _, metrics = self.hooks.advantages(step, state, inputs, None)
        return out, metrics


def _controller(**kw):
    return _Controller(**kw)


def test_without_dynamic_weighting_stage1_is_the_static_scalarization():
    rewards, valid = _batch()
    state = stage1_init(np.array([0.2, 0.4]))
    state = dataclasses.replace(state, r_pareto=1.7)  # a non-trivial scale
    full, _ = _controller().advantages(0, state, rewards, valid)
    ablated, m = _controller(dynamic_weighting=False).advantages(0, state, rewards, valid)
    want = adv.dr_grpo(rewards, valid, weights=(0.6, 0.4)).advantages
    np.testing.assert_allclose(ablated.advantages, want, rtol=1e-6)
    assert m["pareto/r_pareto"] == 1.0
    assert not np.allclose(full.advantages, want)  # dr_grpo is not scale-invariant: r_pareto acts


def test_without_pareto_ranking_stage2_is_the_scalarized_estimator():
    rewards, valid = _batch(1)
    ablated, m = _controller(pareto_ranking=False).advantages(5, None, rewards, valid)
    want = adv.dr_grpo(rewards, valid, weights=(0.6, 0.4)).advantages
    np.testing.assert_allclose(ablated.advantages, want, rtol=1e-6)
    ranked, _ = _controller().advantages(5, None, rewards, valid)
    np.testing.assert_allclose(ranked.advantages, adv.pareto_rank(rewards, valid).advantages)
    assert m["pareto/stage"] == 2
