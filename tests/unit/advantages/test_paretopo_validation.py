"""ParetoPO's validation vector options (issue 47): sampled rollouts (several per problem, a
temperature) scored with the fixed ``N_opt``, and a hypervolume reference below ``v_0``. ``BASE``
pins the earlier settings (the greedy single-sample vector, the reference ``v_0``); the defaults are
the sampled vector and the reference below ``v_0`` (test_defaults_are_the_sampled_vector_below_v0)."""

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from mojax import advantages as adv
from mojax import pareto
from mojax.advantages import MethodContext
from mojax.advantages.paretopo import ParetoPOSpec
from mojax.config import ConfigError
from mojax.pareto import NOptimalTracker
from mojax.rewards import ToolEfficiency, score_rollouts, with_options
from mojax.rl import trainer
from mojax.rl.evaluate import validation_vector
from mojax.rl.state import HostState
from mojax.tasks.calculator import CalculatorTask

BASE = dict(
    enabled=True,
    stage1_steps=4,
    stage1_estimator="grpo",
    weights=(0.6, 0.4),
    mode="global",
    gamma=0.5,
    reference="initial",
    validation_samples=1,
    validation_temperature=0.0,
    validation_n_opt="tracked",
    validate_every=1,
    dynamic_weighting=True,
    pareto_ranking=True,
)


def _hooks(**changes):
    spec = ParetoPOSpec(**{**BASE, **changes})
    return adv.PARETO_RANK.make_hooks(MethodContext(adv.PARETO_RANK, {}, {"paretopo": spec}, 10, 2))


def test_the_validation_settings_reach_validation_vector(monkeypatch):
    seen = []

    def fake_vector(run, host, params, step, **settings):
        seen.append(settings)
        return host, np.array([0.5, 0.5]), {}

    monkeypatch.setattr(trainer, "validation_vector", fake_vector)
    run = SimpleNamespace(hooks=_hooks())
    trainer._with_validation(run, HostState(), None, 0, lambda v: run.hooks.start(None, v))
    run.hooks = _hooks(validation_samples=4, validation_temperature=1.0, validation_n_opt="fixed")
    host, _ = trainer._with_validation(
        run, HostState(), None, 0, lambda v: run.hooks.start(None, v)
    )
    trainer._with_validation(run, host, None, 1, lambda v: run.hooks.after_step(1, host.method, v))
    want = {"num_samples": 4, "temperature": 1.0, "n_opt": "fixed"}
    assert seen == [{}, want, want]  # the default: today's call, with no keywords


def test_defaults_are_the_sampled_vector_below_v0():
    spec = ParetoPOSpec(enabled=True)
    assert (spec.validation_samples, spec.validation_temperature) == (4, 1.0)
    assert spec.reference == "below_initial" and spec.validation_n_opt == "tracked"


def test_a_reference_below_v0_credits_a_trade_that_v0_as_reference_ignores():
    v0, vt = np.array([0.6, 0.9]), np.array([0.7, 0.85])
    at_v0 = _hooks()
    below = _hooks(reference="below_initial", reference_margin=0.1)
    s0, m0 = at_v0.start(None, lambda: v0)
    s1, m1 = below.start(None, lambda: v0)
    assert m0["pareto/hv"] == 0.0 and m1["pareto/hv"] == pytest.approx(0.1 * 0.1)
    np.testing.assert_allclose(pareto.Stage1State.from_state(s1).ref, [0.5, 0.8])
    _, a = at_v0.after_step(1, s0, lambda: vt)
    _, b = below.after_step(1, s1, lambda: vt)
    assert a["pareto/dhv"] == 0.0 and a["pareto/r_pareto"] == pytest.approx(0.5)
    # by hand: v_t's box 0.2 x 0.05 minus its overlap with v_0's box, 0.1 x 0.05
    assert b["pareto/dhv"] == pytest.approx(0.2 * 0.05 - 0.1 * 0.05)
    assert b["pareto/r_pareto"] == pytest.approx(0.5 + 1.5 * math.tanh(0.5 * 0.005))
    zeros = _hooks(reference="zeros")
    s2, _ = zeros.start(None, lambda: v0)
    np.testing.assert_array_equal(pareto.Stage1State.from_state(s2).ref, [0.0, 0.0])


@pytest.mark.parametrize(
    "change, key",
    [
        ({"validation_samples": 0}, "paretopo.validation_samples"),
        ({"validation_temperature": -1.0}, "paretopo.validation_temperature"),
        ({"validation_n_opt": "rule"}, "paretopo.validation_n_opt"),
        ({"reference_margin": 0.0}, "paretopo.reference_margin"),
        ({"reference": "below"}, "paretopo.reference"),
    ],
)
def test_bad_validation_settings_are_refused_naming_the_key(change, key):
    with pytest.raises(ConfigError, match=f"config.{key}"):
        ParetoPOSpec(**{**BASE, **change})


@dataclasses.dataclass
class _Runner:
    """Rolls out nothing: sample g of a problem answers it right with g % 3 calls (so the tracked
    N_opt of every problem is 0), scored by the real ``score_rollouts``."""

    task: CalculatorTask
    calls: list = dataclasses.field(default_factory=list)

    def run(self, params, examples, *, key, num_samples, temperature, states, stats, options=None):
        self.calls.append((num_samples, temperature, (options or {}).get("n_opt")))
        texts, n_calls = [], []
        for ex in examples:
            for g in range(num_samples):
                c = g % 3
                texts.append(
                    f"<calc>{ex.meta['expr']}</calc>" * c + f"<answer>{ex.target}</answer>"
                )
                n_calls.append(c)
        sources = with_options([ToolEfficiency()], options)
        rb = score_rollouts(
            self.task, examples, texts, n_calls, num_samples, sources=sources, states=states,
            stats=stats,
        )  # fmt: skip
        return SimpleNamespace(rewards=rb.rewards, valid=rb.valid), rb.states


def test_validation_vector_of_several_samples_scored_with_the_fixed_n_opt():
    task = CalculatorTask(problems="rule")
    val = task.load("validation", 40, seed=0, mix={"rule": 0.5, "hard": 0.5})
    runner = _Runner(task)
    run = SimpleNamespace(
        spec=SimpleNamespace(seed=0),
        runner=runner,
        splits=SimpleNamespace(validation=val),
        task=task,
    )
    host, v, metrics = validation_vector(
        run, HostState(), None, 2, num_samples=4, temperature=1.0, n_opt="fixed"
    )
    assert runner.calls == [(4, 1.0, "fixed")]
    want = [math.exp(-0.7 * abs(g % 3 - task.optimal_calls(ex))) for ex in val for g in range(4)]
    np.testing.assert_allclose(v, [1.0, np.mean(want)], rtol=1e-6)
    assert metrics["val/r_tool"] == pytest.approx(np.mean(want))
    val_state = host.reward_state["tool_efficiency"]["validation"]
    assert NOptimalTracker.from_state(val_state).table == {ex.id: 0 for ex in val}  # still tracked
    _, tracked, _ = validation_vector(run, HostState(), None, 2)  # the default: greedy, tracked
    assert runner.calls[-1] == (1, 0.0, None)
    np.testing.assert_allclose(tracked, [1.0, 1.0])  # one sample, 0 calls: saturates at (1, 1)
