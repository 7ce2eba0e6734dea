"""Child of tests/system/rl/test_dry_run.py: the dry run's estimate of a run's update step and what the
process allocates when it runs that step (peak resident set above the resident set just before
the call; the peak is reset through ``/proc/self/clear_refs``). Prints one JSON line."""

import json
import sys

import jax
import numpy as np


def rss_kb(key):
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith(key + ":"))


def main(config_arg, *overrides):
    from mojax_test_utils import load_config

    from mojax import learner
    from mojax import sharding as sharding_lib
    from mojax import spec as spec_lib
    from mojax.learner.batch import shard
    from mojax.rl import dry_run
    from mojax.spec.model_config import qwen_config

    c = load_config("awpo", config_arg)
    for kv in overrides:
        key, value = kv.split("=")
        section, name = key.split(".")
        c[section][name] = type(c[section][name])(value)
    spec = spec_lib.validate(c)
    est = dry_run.dry_run(spec, sampler=False)
    mesh = sharding_lib.mesh_from_config(spec.mesh.as_dict())
    mc, rules = qwen_config(spec), spec.rules
    tx = learner.make_optimizer(spec.optimizer)
    state = learner.create_train_state(mc, tx, mesh=mesh, rules=rules)
    b, t = dry_run.batch_shape(spec)
    rng = np.random.default_rng(0)
    loss_mask = np.zeros((b, t), np.float32)
    loss_mask[:, -spec.rollout.max_response_len :] = 1.0
    batch = learner.PPOBatch(
        tokens=rng.integers(0, mc.vocab_size, (b, t)).astype(np.int32),
        attention_mask=np.ones((b, t), np.int32),
        loss_mask=loss_mask,
        old_logprobs=np.full((b, t), -5.0, np.float32) * loss_mask,
        advantages=rng.normal(size=b).astype(np.float32),
    )
    step = learner.make_train_step(mc, tx, spec.ppo, mesh, rules)
    batch = shard(step.check_batch(batch), mesh, rules)
    compiled = step.jitted(batch).lower(state, batch).compile()
    jax.block_until_ready((state, batch))
    # the runtime's own first-use costs (its thread pools) before the measurement
    x = jax.numpy.ones((512, 512))
    jax.block_until_ready(jax.jit(lambda a: jax.nn.softmax(a @ a).sum())(x))
    # the first call: the runtime allocates the temporaries then (and its allocator keeps them
    # for later calls, which therefore add nothing)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    before = rss_kb("VmRSS")
    state, m = compiled(state, batch)
    jax.block_until_ready((state, m))
    peak = rss_kb("VmHWM")
    ma = compiled.memory_analysis()
    out = {
        "xla": {k: getattr(ma, k) / 2**30 for k in dir(ma) if k.endswith("_in_bytes")},
        "estimate_gib": est["train_temp_gib_per_device"],
        "measured_gib": (peak - before) / 2**20,
        "T": t,
        "loss": float(m["loss"]),
    }
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
