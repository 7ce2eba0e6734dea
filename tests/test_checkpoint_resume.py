"""Exact resume: N steps straight == N/2 steps, save, NEW PROCESS, restore, N/2 steps — bitwise on
CPU, host state included.

The run is a miniature RL loop: the batch is a pure function of the data-iterator position (host
state), and each step updates host state the way a multi-objective trainer does (a growing archive
of float64 points, a smoothed ΔHV, an N_optimal table keyed by prompt id, AWPO's running peak). The
PPO step shuffles mini-batches with the state RNG and uses a cosine schedule, so a resume that lost
the RNG, the optimizer count or the data position would diverge.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 4

_LIB = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    import mojax.rl as rl
    from mojax import sharding as shl
    from mojax.checkpoint import Checkpointer, encode_host_state
    from mojax.models import get_variant

    CFG = get_variant("tiny-qwen3")
    OPT = rl.OptimizerConfig(learning_rate=1e-3, schedule="cosine", warmup_steps=1, total_steps=40)
    PPO = rl.PPOConfig(clip_high=0.28, ppo_epochs=2, num_minibatches=2, kl_coef=0.02)
    B, T = 8, 16


    def setup():
        mesh = shl.make_mesh(1, 1, 1, devices=jax.devices()[:1])
        tx = rl.make_optimizer(OPT)
        step = rl.make_train_step(CFG, tx, PPO, mesh, lr_schedule=rl.make_schedule(OPT))
        return mesh, tx, step


    def initial_host():
        return {"data": {"position": 0}, "pareto": {"archive": np.zeros((1, 2)), "dhv": 0.0},
                "n_optimal": {}, "awpo": {"running_peak": np.float32(0.0)}}


    def batch_at(position):
        rng = np.random.RandomState(1000 + position)
        tokens = rng.randint(0, CFG.vocab_size, (B, T)).astype(np.int32)
        mask = (np.arange(T)[None] >= 6).astype(np.float32) * (rng.rand(B, T) < 0.9)
        old = (-5.5 + 0.2 * rng.randn(B, T)).astype(np.float32)
        return {"tokens": tokens, "loss_mask": mask, "old_logprobs": old,
                "ref_logprobs": old + np.float32(0.1), "advantages": rng.randn(B).astype(np.float32)}


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


    def dump(state, host, path):
        np.savez(path, *[np.asarray(x) for x in jax.tree.leaves(state)])
        with open(path + ".json", "w") as f:
            json.dump(encode_host_state(host), f)


    if __name__ == "__main__":
        ckdir, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
        mesh, tx, step = setup()
        with Checkpointer(ckdir) as ck:
            target = rl.abstract_train_state(CFG, tx, mesh, shl.logical_axis_rules())
            state, host, saved_step = ck.restore(target)
        assert saved_step == int(state.step), (saved_step, int(state.step))
        state, host = run(state, host, step, n)
        assert step.trace_count == 1
        dump(state, host, out)
        print("RESUMED-OK")
    """
)


def test_resume_in_new_process_is_bitwise_identical(tmp_path):
    lib_path = tmp_path / "resume_lib.py"
    lib_path.write_text(_LIB)
    spec = importlib.util.spec_from_file_location("resume_lib", lib_path)
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    from mojax.checkpoint import Checkpointer
    from mojax.rl import create_train_state

    mesh, tx, step = lib.setup()
    state0 = create_train_state(lib.CFG, tx, seed=0, mesh=mesh)
    # straight run (on a copy: the step donates its input state)
    straight, host_a = lib.run(jax.tree.map(jnp.copy, state0), lib.initial_host(), step, N)
    # half run, then save
    half, host_b = lib.run(state0, lib.initial_host(), step, N // 2)
    assert step.trace_count == 1
    with Checkpointer(tmp_path / "ck") as ck:
        ck.save(int(half.step), half, host_b)
    # resume in a fresh interpreter
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
    out = str(tmp_path / "resumed")
    proc = subprocess.run(
        [sys.executable, str(lib_path), str(tmp_path / "ck"), out, str(N - N // 2)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "RESUMED-OK" in proc.stdout, proc.stderr[-4000:]
    resumed = np.load(out + ".npz")
    leaves = jax.tree.leaves(straight)
    assert len(resumed.files) == len(leaves)
    for i, x in enumerate(leaves):
        x = np.asarray(x)
        y = resumed[f"arr_{i}"]
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), f"leaf {i} differs after resume"
    assert int(straight.step) == 2 * 2 * N  # epochs x mini-batches per call
    from mojax.checkpoint import encode_host_state

    with open(out + ".json") as f:
        assert json.load(f) == json.loads(json.dumps(encode_host_state(host_a)))
    assert host_a["data"]["position"] == N and host_a["pareto"]["archive"].shape == (N + 1, 2)
