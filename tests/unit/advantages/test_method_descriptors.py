"""Method descriptors (``mojax.advantages.Method``): each descriptor's flags say what its function
takes (checked against the signature), the default hooks call the function exactly as a direct
call would, and ParetoPO's hooks run Algorithm 1's schedule (validation at the start, after each
due Stage-1 step, none in Stage 2) against the Pareto primitives called directly."""

import inspect

import numpy as np
import pytest

from mojax import advantages as adv
from mojax import pareto
from mojax.advantages import AdvantageInputs, MethodContext


@pytest.mark.parametrize("name", sorted(adv.METHODS))
def test_descriptor_flags_match_the_signature(name):
    m = adv.METHODS[name]
    params = inspect.signature(m.fn).parameters
    assert m.name == name and adv.ESTIMATORS[name] is m.fn
    assert list(params)[:2] == (
        ["set_rewards", "set_valid"] if m.inputs == "sets" else ["rewards", "valid"]
    )
    assert ("key" in params) == m.needs_key
    assert ("state" in params) == m.stateful
    assert all(x in params for x in m.sample_inputs)
    assert all(kw in params and obj in m.objectives for kw, obj in m.validity_inputs)
    assert not m.per_prompt_weights or "weights" in params
    assert not set(m.data_args) & m.hyperparameters()


def _batch(seed, p=3, g=5, m=2):
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 3, (p, g, m)).astype(np.float32) / 2
    valid = rng.random((p, g)) > 0.1
    return rewards, valid


@pytest.mark.parametrize("name", ["grpo", "gdpo", "saw_gdpo", "pareto_rank", "random_w", "awpo"])
def test_default_hooks_equal_a_direct_call(name):
    import jax

    m = adv.METHODS[name]
    kwargs = {"awpo": {"r_max": 1.0, "r_max_mode": "running_peak"}}.get(name, {})
    hooks = m.make_hooks(MethodContext(m, kwargs))
    rewards, valid = _batch(1)
    key = jax.random.key(3)
    out, state, metrics = hooks.advantages(0, None, AdvantageInputs(rewards, valid), key)
    direct = m.fn(rewards, valid, **kwargs, **({"key": key} if m.needs_key else {}))
    np.testing.assert_array_equal(np.asarray(out.advantages), np.asarray(direct.advantages))
    assert metrics == {}
    if m.stateful:
        assert state == {"peak": pytest.approx(float(direct.state["peak"]))}
    else:
        assert state is None


def _paretopo_hooks(stage1_steps=2, validate_every=1):
    from mojax.advantages.paretopo import ParetoPOSpec

    spec = ParetoPOSpec(
        enabled=True,
        stage1_steps=stage1_steps,
        stage1_estimator="dr_grpo",
        weights=(0.6, 0.4),
        mode="global",
        gamma=0.5,
        reference="initial",
        validate_every=validate_every,
        dynamic_weighting=True,
        pareto_ranking=True,
    )
    ctx = MethodContext(adv.PARETO_RANK, {"beta": 0.5}, {"paretopo": spec}, 10, 2)
    return adv.PARETO_RANK.make_hooks(ctx)


def test_paretopo_hooks_run_algorithm_1():
    hooks = _paretopo_hooks(stage1_steps=2)
    vs = iter([np.array([0.2, 0.5]), np.array([0.4, 0.45]), np.array([0.5, 0.5])])
    calls = []

    def validate(**settings):
        calls.append(1)
        return next(vs)

    state, m0 = hooks.start(None, validate)
    ref = pareto.stage1_init(np.array([0.2, 0.5]), gamma=0.5)
    assert len(calls) == 1 and m0["pareto/archive_size"] == 1
    assert pareto.Stage1State.from_state(state).to_state() == ref.to_state()
    rewards, valid = _batch(2)
    out, state, m = hooks.advantages(0, state, AdvantageInputs(rewards, valid), None)
    want = adv.dr_grpo(rewards, valid, weights=(0.6, 0.4), reward_scale=float(ref.r_pareto))
    np.testing.assert_allclose(np.asarray(out.advantages), np.asarray(want.advantages))
    assert m["pareto/stage"] == 1
    state, m1 = hooks.after_step(1, state, validate)  # step 1 done: still Stage 1, validate
    ref, _ = pareto.stage1_update(ref, np.array([0.4, 0.45]))
    assert len(calls) == 2 and state == ref.to_state()
    state, _ = hooks.after_step(2, state, validate)  # step 2 done (the last Stage-1 step)
    assert len(calls) == 3
    state, extra = hooks.after_step(3, state, validate)  # Stage 2: no validation
    assert len(calls) == 3 and extra == {}
    out, _, m = hooks.advantages(3, state, AdvantageInputs(rewards, valid), None)
    want = adv.pareto_rank(rewards, valid, beta=0.5)
    np.testing.assert_array_equal(np.asarray(out.advantages), np.asarray(want.advantages))
    assert m == {"pareto/stage": 2}


def test_paretopo_section_off_is_the_plain_estimator():
    from mojax.advantages._method import EstimatorHooks
    from mojax.advantages.paretopo import ParetoPOSpec

    off = ParetoPOSpec(False, 0, "grpo", (0.6, 0.4), "global", 0.5, "initial", 1, True, True)
    ctx = MethodContext(adv.PARETO_RANK, {}, {"paretopo": off})
    assert isinstance(adv.PARETO_RANK.make_hooks(ctx), EstimatorHooks)


def test_objective_requirement_names_the_fix():
    errs = adv.AWPO.objective_errors(("r_task", "r_tool"))
    assert len(errs) == 1 and errs[0].startswith("config.task: estimator 'awpo' needs")
    assert "task.kwargs.mode='awpo'" in errs[0]
    assert adv.AWPO.objective_errors(("r_out", "r_reason")) == []
