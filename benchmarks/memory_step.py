"""Peak resident memory of one GRPO step on the CPU: rollout (KV-cached sampler) + PPO update.

The step: a random-init Qwen3 of 25.2M parameters (``SHAPE``: E=512, F=1536, L=8, H=8, K=4, D=64,
vocabulary 64, untied head), P=16 prompts x G=8 samples = 128 rows, prompts of 40 random tokens,
up to 192 new tokens per row (token 1 is the stop token and may be sampled), GRPO advantages of
random rewards, the rollout batch assembled as the RL loop does (``mojax.rl.step``, T = prompt
bucket + 192), and one PPO update with the default ``ppo`` and ``optimizer`` config sections
(``mojax.defaults``), the run's layouts for this backend, one device.

Peak resident memory is the kernel's high-water mark of this process (``VmHWM`` of
``/proc/self/status``), read after each phase; per token = peak / (rows x (40 + 192)). It is a
memory measurement, not a timing: other processes on the machine do not change it. A watchdog
thread stops the process (exit 3) when its resident set passes ``--limit_gb``, so a step that
would not fit never pushes a shared machine into swapping or the OOM killer::

    python benchmarks/memory_step.py                        # the 128-row step
    python benchmarks/memory_step.py --rows 32 --new 56     # 32 rows x 96 tokens
    python benchmarks/memory_step.py --phase rollout        # the rollout alone
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

SHAPE = dict(
    model_type="qwen3",
    vocab_size=64,
    hidden_size=512,
    intermediate_size=1536,
    num_layers=8,
    num_heads=8,
    num_kv_heads=4,
    head_dim=64,
    tie_word_embeddings=False,
    max_position_embeddings=1024,
    rope_theta=10000.0,
    bos_token_id=None,
    eos_token_id=1,
    pad_token_id=0,
)
STOP_ID = 1


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_gb() -> float:
    return _status_kb("VmRSS") / 2**20


def peak_gb() -> float:
    return _status_kb("VmHWM") / 2**20


def watchdog(limit_gb: float) -> None:
    """Exits the process (code 3) as soon as its resident set passes ``limit_gb``."""

    def run():
        while True:
            if rss_gb() > limit_gb:
                print(
                    f"memory_step: resident set passed --limit_gb={limit_gb}; stopping", flush=True
                )
                os._exit(3)
            time.sleep(0.05)

    threading.Thread(target=run, daemon=True).start()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=128, help="B = P x G (G = 8)")
    ap.add_argument("--prompt", type=int, default=40, help="prompt tokens")
    ap.add_argument("--new", type=int, default=192, help="new tokens at most per row")
    ap.add_argument("--phase", default="all", choices=("all", "rollout", "train"))
    ap.add_argument("--limit_gb", type=float, default=12.0, help="stop above this resident set")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    watchdog(a.limit_gb)

    import jax
    import numpy as np

    from mojax import defaults, learner, models
    from mojax import sharding as sharding_lib
    from mojax.advantages.grpo import grpo
    from mojax.rl.step import assemble_batch
    from mojax.sampling import InGraphSampler, bucket_length

    g = 8
    p = a.rows // g
    cfg = models.layouts.resolve(models.QwenConfig(**SHAPE))
    mesh = sharding_lib.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    rules = sharding_lib.logical_axis_rules()
    ppo = learner.PPOConfig.from_config(defaults.base_config().ppo)
    opt = learner.OptimizerConfig.from_config(defaults.base_config().optimizer)
    tx = learner.make_optimizer(opt)
    state = learner.create_train_state(cfg, tx, seed=a.seed, mesh=mesh, rules=rules)
    out = {"params": models.param_count(cfg), "rows": a.rows, "tokens_per_row": a.prompt + a.new}
    out["rss_start_gb"] = rss_gb()

    rng = np.random.default_rng(a.seed)
    prompts = rng.integers(2, SHAPE["vocab_size"], size=(p, a.prompt)).astype(np.int32)
    total_len = bucket_length(a.prompt) + a.new
    if a.phase in ("all", "rollout"):
        sampler = InGraphSampler(cfg, mesh=mesh, rules=rules)
        sampler.update_weights(state.params)
        r = sampler.generate(
            prompts,
            key=jax.random.PRNGKey(a.seed),
            max_new_tokens=a.new,
            num_samples=g,
            stop_token_ids=[STOP_ID],
            temperature=1.0,
        )
        toks, lps, mask, lengths = jax.device_get((r.tokens, r.logprobs, r.loss_mask, r.lengths))
        del r, sampler
        out["rollout_peak_gb"] = peak_gb()
        out["response_tokens_mean"] = float(np.mean(lengths))
    else:  # the train phase alone: responses of the full budget
        toks = rng.integers(2, SHAPE["vocab_size"], size=(a.rows, a.new)).astype(np.int32)
        lps = np.full((a.rows, a.new), -4.0, np.float32)
        mask = np.ones((a.rows, a.new), bool)
        lengths = np.full((a.rows,), a.new, np.int32)
    if a.phase in ("all", "train"):
        rewards = rng.normal(size=(p, g, 1)).astype(np.float32)
        adv = grpo(rewards, np.ones((p, g), bool)).advantages
        batch = assemble_batch(
            list(prompts), g, toks, lps, mask, lengths, total_len, advantages=adv
        )
        step = learner.make_train_step(cfg, tx, ppo, mesh, rules)
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics)
        out["train_T"] = total_len
        out["loss_finite"] = bool(np.isfinite(float(metrics["loss"])))
    out["peak_gb"] = peak_gb()
    out["peak_mb_per_token"] = out["peak_gb"] * 1024 / (a.rows * (a.prompt + a.new))
    print("RESULT_JSON " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
