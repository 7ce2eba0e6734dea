"""Training on 8 forced CPU devices with a (data, fsdp, tensor) = (2, 2, 2) mesh (issue 12, item 6).

The abort of issue 12 ("Termination timeout for collective permute ... Expected 8 threads to join
the rendezvous, but only 7 arrived") was a deadlock of unbounded asynchronous dispatch: a loop
that never reads its results (the SFT warm start) queued steps until PjRt's per-device in-flight
semaphore was full; on the CPU backend that semaphore is acquired inside the launch task on the
client's thread pool (one thread per device), so launches blocked on it and devices waiting in the
step's first collective (the embedding gather's collective permute) for a device whose queued step
could not get a thread took every thread. ``ShardedStep`` now waits for the step ``max_in_flight``
calls back before it dispatches a new one.

- ``test_unread_steps_do_not_deadlock``: 1000 unread SFT steps of a tiny Qwen3 on (2, 2, 2), the
  loop that deadlocked within ~500 steps before the fix (``max_in_flight`` unbounded), against the
  same steps on one device (the per-step losses agree within 5e-6 up to step 1000 and drift apart
  by round-off after that: 1.4e-4 by step 1500).
- the command line of the default's tiny model end to end on (2, 2, 2) (SFT warm start, RL steps
  with rollouts, evaluation, checkpoints) against the golden run on (2, 1, 1):
  ``tests/system/test_mesh_golden.py``.

The whole 500-step default warm start on (2, 2, 2) was a test of its own until 2026-12-03 (~470 s
of the slow set): the deadlock it guarded is ``test_unread_steps_do_not_deadlock``'s (1000 steps),
and its 20-step comparison is ``test_mesh_golden.py``'s. Its one check no other test makes, that
the 500 mesh steps learn (last tenth's mean loss below half the first step's), went with it.
"""

import pathlib

import jax
import jax.extend.core as jax_core
import numpy as np
import pytest

from conftest import run_with_devices

REPO = pathlib.Path(__file__).resolve().parents[2]


def unread_sft_loop(steps: int, mesh_shape=(2, 2, 2), max_in_flight=None):
    """``steps`` SFT steps of tiny-qwen3 on random tokens, no result read until the end; the
    per-step losses."""
    from mojax import learner, models
    from mojax import sharding as shl

    cfg = models.get_variant("tiny-qwen3", vocab_size=160)
    mesh, rules = shl.make_mesh(*mesh_shape), shl.logical_axis_rules()
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-3))
    state = learner.create_train_state(cfg, tx, seed=0, mesh=mesh, rules=rules)
    step = learner.make_sft_step(cfg, tx, mesh, rules)
    if max_in_flight is not None:
        step.max_in_flight = max_in_flight
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        tokens = rng.integers(3, 160, (16, 32)).astype(np.int32)
        state, m = step(state, {"tokens": tokens, "loss_mask": np.ones_like(tokens)})
        losses.append(m["loss"])
    return np.asarray(jax.device_get(losses))


def test_dispatch_is_bounded():
    """After call i returns, the results of calls <= i - max_in_flight are ready."""
    from mojax import learner, models
    from mojax import sharding as shl
    from mojax.learner.step import ShardedStep

    cfg = models.get_variant("tiny-qwen3", vocab_size=160)
    mesh, rules = shl.make_mesh(devices=jax.devices()[:1]), shl.logical_axis_rules()
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-3))
    state = learner.create_train_state(cfg, tx, seed=0, mesh=mesh, rules=rules)
    step = learner.make_sft_step(cfg, tx, mesh, rules)
    assert step.max_in_flight == 2
    tokens = np.full((4, 16), 5, np.int32)
    out = []
    for i in range(8):
        state, m = step(state, {"tokens": tokens, "loss_mask": np.ones_like(tokens)})
        out.append(m["loss"])
        assert all(x.is_ready() for x in out[: i + 1 - step.max_in_flight]), i
    with pytest.raises(ValueError, match="max_in_flight"):
        ShardedStep(None, None, mesh, rules, required=(), optional=(), max_in_flight=0)


def _constraint_specs(jaxpr) -> list[str]:
    """The partition specs of every ``sharding_constraint`` in ``jaxpr`` and its sub-jaxprs."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "sharding_constraint":
            out.append(str(eqn.params["sharding"].spec))
        for sub in jax_core.jaxprs_in_params(eqn.params):
            out += _constraint_specs(sub)
    return out


def traced_constraints(mesh_shape) -> list[list[str]]:
    """The partition specs of the sharding constraints in the traced SFT and PPO steps."""
    from mojax import learner, models
    from mojax import sharding as shl

    cfg = models.get_variant("tiny-qwen3", vocab_size=160)
    mesh, rules = shl.make_mesh(*mesh_shape), shl.logical_axis_rules()
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-3))
    state = learner.abstract_train_state(cfg, tx, mesh, rules)
    rows = jax.ShapeDtypeStruct((8, 16), np.float32)
    batch = {"tokens": jax.ShapeDtypeStruct((8, 16), np.int32), "loss_mask": rows}
    ppo = {**batch, "old_logprobs": rows, "advantages": jax.ShapeDtypeStruct((8,), np.float32)}
    steps = [
        (learner.make_sft_step(cfg, tx, mesh, rules), batch),
        (learner.make_train_step(cfg, tx, learner.PPOConfig(), mesh, rules), ppo),
    ]
    return [_constraint_specs(jax.make_jaxpr(st._traced)(state, b).jaxpr) for st, b in steps]


def test_activation_constraints_reach_the_step():
    """The model's logical activation constraints (heads, MLP width, vocab over "tensor") are in the
    traced steps; under ``with mesh:`` they were silently dropped, leaving only the row
    constraints."""
    for specs in run_with_devices(traced_constraints, (2, 2, 2), devices=8, timeout=600):
        tensor = [s for s in specs if "'tensor'" in s]
        assert len(tensor) >= 4, specs  # q, k/v, attention out, MLP hidden, logits


@pytest.mark.slow
def test_unread_steps_do_not_deadlock():
    steps = 1000
    eight = run_with_devices(unread_sft_loop, steps, (2, 2, 2), devices=8, timeout=1200)
    one = run_with_devices(unread_sft_loop, steps, (1, 1, 1), devices=1, timeout=1200)
    assert eight.shape == (steps,) and np.all(np.isfinite(eight))
    np.testing.assert_allclose(eight, one, atol=1e-5, rtol=0)
