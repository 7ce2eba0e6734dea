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
- ``test_default_grpo_matches_one_device``: ``configs/grpo.py`` end to end (SFT warm start, RL
  steps with rollouts, evaluation, checkpoints) on (2, 2, 2) against one device. Its self-built
  vocabulary (159 pieces) is padded to 256 model rows, so tensor=2 divides it (before: "2 does not
  divide 159", exit 2). This was also a command-line run of its own (``mojax.main`` on (2, 2, 2),
  2 steps) until 2026-12-06: the same config, mesh and loop in-process, which is what the command
  line calls (``mojax.main.main`` -> ``trainer.run``).

The whole 500-step default warm start on (2, 2, 2) was a test of its own until 2026-12-03 (~470 s
of the slow set): the deadlock it guarded is ``test_unread_steps_do_not_deadlock``'s (1000 steps),
and its 20-step comparison with one device is ``test_default_grpo_matches_one_device``'s. Its one
check no other test makes, that the 500 mesh steps learn (last tenth's mean loss below half the
first step's), went with it.
"""

import importlib.util
import json
import os
import pathlib

import jax
import jax.extend.core as jax_core
import numpy as np
import pytest

from conftest import run_with_devices

REPO = pathlib.Path(__file__).resolve().parents[3]


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
        state, m = step(state, learner.SFTBatch(tokens=tokens, loss_mask=np.ones_like(tokens)))
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
        state, m = step(state, learner.SFTBatch(tokens=tokens, loss_mask=np.ones_like(tokens)))
        out.append(m["loss"])
        assert all(x.is_ready() for x in out[: i + 1 - step.max_in_flight]), i
    with pytest.raises(ValueError, match="max_in_flight"):
        ShardedStep(None, None, mesh, rules, max_in_flight=0)


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
    tokens = jax.ShapeDtypeStruct((8, 16), np.int32)
    batch = learner.SFTBatch(tokens=tokens, loss_mask=rows)
    adv = jax.ShapeDtypeStruct((8,), np.float32)
    ppo = learner.PPOBatch(tokens=tokens, loss_mask=rows, old_logprobs=rows, advantages=adv)
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


def grpo_run(workdir: str, mesh_shape, sft_steps: int, steps: int) -> dict:
    """``configs/grpo.py`` on ``mesh_shape`` (its self-built vocabulary padded to 256 model rows,
    which tensor=2 divides), with fewer rows: SFT batches of 16, 4 prompts x 4 samples per step,
    8 held-out problems (the defaults, 64, 16 x 8 and 128, made the two runs take 7 minutes); the
    SFT and RL metrics it wrote."""
    from mojax.rl import trainer

    spec = importlib.util.spec_from_file_location("cfg_grpo", REPO / "configs" / "grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config()
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh_shape
    c.sft.steps, c.steps = sft_steps, steps
    c.sft.batch_size, c.task.num_eval, c.task.num_validation = 16, 8, 0
    c.rollout.prompts_per_step, c.rollout.num_samples = 4, 4
    trainer.run(c, workdir)

    def read(name):
        if not os.path.exists(os.path.join(workdir, name)):  # steps=0 may write no RL metrics
            return []
        with open(os.path.join(workdir, name)) as f:
            return [json.loads(line) for line in f]

    return {"sft": read("sft_metrics.jsonl"), "rl": read("metrics.jsonl")}


@pytest.mark.slow
def test_default_grpo_matches_one_device(tmp_path):
    # 20 SFT steps: two runs drift apart chaotically from about step 25 of the warm start on (its
    # learning rate peaks at step 20), 8-device runs among themselves too (see the report of
    # issue 12); RL steps sample from the warmed-up policy, so they compare exactly only before.
    sft_steps, steps = 20, 2
    eight = run_with_devices(
        grpo_run, str(tmp_path / "8"), (2, 2, 2), sft_steps, steps, devices=8, timeout=1800
    )
    one = run_with_devices(
        grpo_run, str(tmp_path / "1"), (1, 1, 1), sft_steps, steps, devices=1, timeout=1800
    )
    assert [r["step"] for r in eight["rl"]] == list(range(steps + 1))
    for a, b in zip(eight["sft"], one["sft"], strict=True):
        assert a["step"] == b["step"]
        assert a["sft/loss"] == pytest.approx(b["sft/loss"], abs=1e-4)
    keys = ("loss", "pg_loss", "reward/scalar/mean", "reward/r_task/mean", "eval/accuracy")
    for a, b in zip(eight["rl"], one["rl"], strict=True):
        for k in keys:
            if k in b:
                assert a[k] == pytest.approx(b[k], abs=1e-4), (a["step"], k)
    assert "loss" in eight["rl"][-1] and "eval/accuracy" in eight["rl"][-1]
    assert (tmp_path / "8" / "checkpoints" / str(steps)).is_dir()
