"""Exact resume: N steps straight == N/2 steps, save, NEW PROCESS, restore, N/2 steps — bitwise on
CPU, host state included.

The run is a miniature RL loop: the batch is a pure function of the data-iterator position (host
state), and each step updates host state the way a multi-objective trainer does (a growing archive
of float64 points, a smoothed ΔHV, an N_optimal table keyed by prompt id, AWPO's running peak). The
PPO step shuffles mini-batches with the state RNG and uses a cosine schedule, so a resume that lost
the RNG, the optimizer count or the data position would diverge.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np

N = 4

from mojax import learner  # noqa: E402
from mojax import sharding as shl  # noqa: E402
from mojax.infra.checkpoint import Checkpointer, encode_host_state  # noqa: E402
from mojax.models import get_variant  # noqa: E402

CFG = get_variant("tiny-qwen3")
OPT = learner.OptimizerConfig(learning_rate=1e-3, schedule="cosine", warmup_steps=1, total_steps=40)
PPO = learner.PPOConfig(clip_high=0.28, ppo_epochs=2, num_minibatches=2, kl_coef=0.02)
B, T = 8, 16


def setup():
    mesh = shl.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    tx = learner.make_optimizer(OPT)
    step = learner.make_train_step(CFG, tx, PPO, mesh, lr_schedule=learner.make_schedule(OPT))
    return mesh, tx, step


def initial_host():
    return {
        "data": {"position": 0},
        "pareto": {"archive": np.zeros((1, 2)), "dhv": 0.0},
        "n_optimal": {},
        "awpo": {"running_peak": np.float32(0.0)},
    }


def batch_at(position):
    rng = np.random.RandomState(1000 + position)
    tokens = rng.randint(0, CFG.vocab_size, (B, T)).astype(np.int32)
    mask = (np.arange(T)[None] >= 6).astype(np.float32) * (rng.rand(B, T) < 0.9)
    old = (-5.5 + 0.2 * rng.randn(B, T)).astype(np.float32)
    return learner.PPOBatch(
        tokens=tokens,
        loss_mask=mask,
        old_logprobs=old,
        ref_logprobs=old + np.float32(0.1),
        advantages=rng.randn(B).astype(np.float32),
    )


def host_update(host, m):
    pos = host["data"]["position"]
    host["data"]["position"] = pos + 1
    point = np.array([[float(m["loss"]), float(m["entropy"])]])
    host["pareto"]["archive"] = np.concatenate([host["pareto"]["archive"], point])
    host["pareto"]["dhv"] = 0.5 * host["pareto"]["dhv"] + 0.5 * float(m["approx_kl"])
    key = 100 + pos % 3
    host["n_optimal"][key] = min(host["n_optimal"].get(key, 99), pos)
    host["awpo"]["running_peak"] = max(host["awpo"]["running_peak"], np.float32(m["ratio_max"]))


def run(state, host, step, n):
    for _ in range(n):
        state, metrics = step(state, batch_at(host["data"]["position"]))
        host_update(host, jax.device_get(metrics))
    return state, host


def resume_in_fresh_process(ckdir: str, n: int) -> tuple[list, dict]:
    """In a new interpreter (``conftest.run_with_devices``): restore, run ``n`` more steps, and
    return the state's leaves and the encoded host state."""
    mesh, tx, step = setup()
    with Checkpointer(ckdir) as ck:
        target = learner.abstract_train_state(CFG, tx, mesh, shl.logical_axis_rules())
        state, host, saved_step = ck.restore(target)
    assert saved_step == int(state.step), (saved_step, int(state.step))
    state, host = run(state, host, step, n)
    assert step.trace_count == 1
    leaves = [np.asarray(x) for x in jax.tree.leaves(state)]
    return leaves, json.loads(json.dumps(encode_host_state(host)))


def test_resume_in_new_process_is_bitwise_identical(tmp_path):
    from conftest import run_with_devices

    mesh, tx, step = setup()
    state0 = learner.create_train_state(CFG, tx, seed=0, mesh=mesh)
    # straight run (on a copy: the step donates its input state)
    straight, host_a = run(jax.tree.map(jnp.copy, state0), initial_host(), step, N)
    # half run, then save
    half, host_b = run(state0, initial_host(), step, N // 2)
    assert step.trace_count == 1
    with Checkpointer(tmp_path / "ck") as ck:
        ck.save(int(half.step), half, host_b)
    # resume in a fresh interpreter
    resumed, host_c = run_with_devices(
        resume_in_fresh_process, str(tmp_path / "ck"), N - N // 2, devices=1, timeout=600
    )
    leaves = jax.tree.leaves(straight)
    assert len(resumed) == len(leaves)
    for i, x in enumerate(leaves):
        x = np.asarray(x)
        y = resumed[i]
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), f"leaf {i} differs after resume"
    assert int(straight.step) == 2 * 2 * N  # epochs x mini-batches per call
    assert host_c == json.loads(json.dumps(encode_host_state(host_a)))
    assert host_a["data"]["position"] == N and host_a["pareto"]["archive"].shape == (N + 1, 2)
