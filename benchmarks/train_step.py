"""Train-step throughput: mojax's jitted PPO update vs PyTorch eager on transformers' Qwen3.

CPU mode (default) runs both side by side in one process on the same model shape, batch and loss
(PPO-clip, token-mean, AdamW + global-norm clipping, fp32) and prints tokens/s and the ratio
(target ≥ 1.5x)::

    python benchmarks/train_step.py                         # CPU, both implementations
    python benchmarks/train_step.py --batch 8 --seq 256 --steps 5

GPU mode runs the mojax step alone on a real-size shape and reports tokens/s and MFU (model FLOPs
per token ``6 N + 12 L H D T`` as in PaLM, app. B; peak from ``--peak_tflops`` or the device kind)::

    python benchmarks/train_step.py --mode gpu --variant qwen2.5-1.5b --batch 8 --seq 1024 \\
        --dtype bfloat16 --remat full --logprob_chunk 256
    python benchmarks/train_step.py --mode gpu --variant tiny-qwen3 --steps 2   # smoke test on CPU

Tokens/s counts all B*T positions of the rollout batch (prompt and response) per optimizer update.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# dense bf16 peak TFLOP/s per device kind (vendor datasheets; no sparsity)
PEAK_TFLOPS = {
    "H100": 989.0,
    "H200": 989.0,
    "A100": 312.0,
    "L4": 121.0,
    "TPU v4": 275.0,
    "TPU v5 lite": 197.0,
    "TPU v5p": 459.0,
    "TPU v6 lite": 918.0,
}

# the CPU comparison shape: a small Qwen3 (GQA, qk-norm, untied head)
CPU_SHAPE = dict(
    vocab_size=8192,
    hidden_size=256,
    intermediate_size=768,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
)


def make_batch(b, t, vocab, seed=0):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, vocab, (b, t)).astype(np.int32)
    loss_mask = (np.arange(t)[None] >= t // 4).astype(np.float32).repeat(b, 0)
    old = (-np.log(vocab) + 0.1 * rng.randn(b, t)).astype(np.float32)
    return {
        "tokens": tokens,
        "loss_mask": loss_mask,
        "old_logprobs": old,
        "advantages": rng.randn(b).astype(np.float32),
    }


def flops_per_token(config, t):
    """6 N (matmul params incl. the head) + 12 L H D T (attention scores and values, fwd + bwd)."""
    e, f, h, k, d, layers = (
        config.hidden_size,
        config.intermediate_size,
        config.num_heads,
        config.num_kv_heads,
        config.head_dim,
        config.num_layers,
    )
    per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * f
    n = layers * per_layer + config.vocab_size * e
    return 6 * n + 12 * layers * h * d * t


# --------------------------------------------------------------------------------------------------
# mojax


def mojax_step_fn(config, params, batch, args):
    """A no-arg callable running one jitted mojax train step (compiled on the first call)."""
    import jax

    import mojax.rl as rl
    from mojax import sharding as shl

    mesh = shl.make_mesh(-1, 1, 1) if args.mode == "gpu" else shl.make_mesh(1, 1, 1)
    opt = rl.OptimizerConfig(learning_rate=1e-5, max_grad_norm=1.0, weight_decay=0.0)
    tx = rl.make_optimizer(opt)
    ppo = rl.PPOConfig(
        clip_high=0.28,
        num_microbatches=args.microbatches,
        logprob_chunk=args.logprob_chunk,
        log_entropy=False,
        shuffle=False,
    )
    step = rl.make_train_step(config, tx, ppo, mesh)
    state = rl.create_train_state(config, tx, seed=0, mesh=mesh, params=params)
    batch = shl.shard_batch(batch, mesh, shl.logical_axis_rules())
    box = {"state": state}

    def run():
        box["state"], m = step(box["state"], batch)
        return float(jax.block_until_ready(m)["loss"])

    return run


# --------------------------------------------------------------------------------------------------
# PyTorch eager (transformers), the same loss and optimizer


def torch_step_fn(hf_model, batch):
    """A no-arg callable running one eager PyTorch step of the same loss and optimizer."""
    import torch

    tokens = torch.tensor(batch["tokens"], dtype=torch.long)
    mask = torch.tensor(batch["loss_mask"])
    old = torch.tensor(batch["old_logprobs"])
    adv = torch.tensor(batch["advantages"])[:, None]
    opt = torch.optim.AdamW(hf_model.parameters(), lr=1e-5, weight_decay=0.0, eps=1e-8)
    hf_model.train()

    def step():
        logits = hf_model(input_ids=tokens).logits.float()  # [B, T, V]
        logp = torch.log_softmax(logits[:, :-1], -1)
        lp = torch.gather(logp, -1, tokens[:, 1:, None])[..., 0]
        lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)  # aligned with the tokens
        ratio = torch.exp(lp - old)
        o = torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
        loss = -(o * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf_model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    return step


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--variant", default="qwen2.5-1.5b", help="gpu mode: a mojax model variant")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=3, help="timed steps per block")
    p.add_argument("--rounds", type=int, default=4, help="cpu mode: A/B block pairs")
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--logprob_chunk", type=int, default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--remat", default="none", choices=("none", "full", "dots"))
    p.add_argument("--peak_tflops", type=float, default=None, help="per-device peak for MFU")
    args = p.parse_args(argv)

    import jax

    import mojax.models as mm

    if args.mode == "cpu":
        import torch
        import transformers

        torch.set_num_threads(os.cpu_count() or 1)
        hf_cfg = transformers.Qwen3Config(
            vocab_size=CPU_SHAPE["vocab_size"],
            hidden_size=CPU_SHAPE["hidden_size"],
            intermediate_size=CPU_SHAPE["intermediate_size"],
            num_hidden_layers=CPU_SHAPE["num_layers"],
            num_attention_heads=CPU_SHAPE["num_heads"],
            num_key_value_heads=CPU_SHAPE["num_kv_heads"],
            head_dim=CPU_SHAPE["head_dim"],
            tie_word_embeddings=False,
            max_position_embeddings=4096,
        )
        torch.manual_seed(0)
        hf_model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32)
        with tempfile.TemporaryDirectory() as d:  # the same weights for both
            hf_model.save_pretrained(d)
            model = mm.from_pretrained(d)
        batch = make_batch(args.batch, args.seq, hf_cfg.vocab_size)
        tokens = args.batch * args.seq
        print(
            f"shape: {CPU_SHAPE}, B={args.batch}, T={args.seq}, fp32, "
            f"params={mm.param_count(model.config) / 1e6:.1f}M, jax {jax.__version__} on "
            f"{jax.devices()[0].device_kind}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads)"
        )
        jax_step = mojax_step_fn(model.config, model.params, batch, args)
        torch_step = torch_step_fn(hf_model, batch)
        compile_s, loss_jax = timed(jax_step)  # first call compiles
        _, loss_torch = timed(torch_step)  # warm-up (allocator, threads)
        # alternating blocks (A B A B), so drifting load from other processes hits both alike;
        # a pause between blocks lets the other runtime's worker threads go idle first
        t_jax, t_torch = [], []
        for _ in range(args.rounds):
            for times, fn in ((t_jax, jax_step), (t_torch, torch_step)):
                time.sleep(0.5)
                times.extend(timed(fn)[0] for _ in range(args.steps))
        med_jax, med_torch = float(np.median(t_jax)), float(np.median(t_torch))
        min_jax, min_torch = float(np.min(t_jax)), float(np.min(t_torch))
        print(
            f"mojax  : {tokens / med_jax:10.1f} tokens/s median, {tokens / min_jax:10.1f} best "
            f"({med_jax * 1e3:.1f} ms/step; compile {compile_s:.1f}s; first loss {loss_jax:.5f})"
        )
        print(
            f"torch  : {tokens / med_torch:10.1f} tokens/s median, {tokens / min_torch:10.1f} best "
            f"({med_torch * 1e3:.1f} ms/step, eager; first loss {loss_torch:.5f})"
        )
        print(
            f"ratio mojax / torch eager: {med_torch / med_jax:.2f}x median, "
            f"{min_torch / min_jax:.2f}x best-of-{len(t_jax)} (target >= 1.5x)"
        )
        return 0

    config = mm.get_variant(args.variant, dtype=args.dtype, remat=args.remat)
    import mojax.rl as rl  # noqa: F401  (import before timing)

    n_dev = jax.device_count()
    batch = make_batch(args.batch, args.seq, config.vocab_size)
    print(f"{args.variant}: B={args.batch}, T={args.seq}, dtype={args.dtype}, remat={args.remat}, "
          f"{n_dev} x {jax.devices()[0].device_kind}")  # fmt: skip
    jax_step = mojax_step_fn(config, None, batch, args)
    compile_s, loss = timed(jax_step)
    t = float(np.median([timed(jax_step)[0] for _ in range(args.steps)]))
    tokens = args.batch * args.seq
    tps = tokens / t
    achieved = tps * flops_per_token(config, args.seq) / 1e12  # TFLOP/s over all devices
    kind = jax.devices()[0].device_kind
    peak = args.peak_tflops
    if peak is None:
        peak = next((v for k, v in PEAK_TFLOPS.items() if k.lower() in kind.lower()), None)
    mfu = "n/a (unknown peak; pass --peak_tflops)" if peak is None else (
        f"{100 * achieved / (peak * n_dev):.1f}%"
    )  # fmt: skip
    print(f"mojax  : {tps:10.1f} tokens/s  ({t * 1e3:.1f} ms/step, compile {compile_s:.1f}s, "
          f"loss {loss:.5f}); {achieved:.2f} model TFLOP/s; MFU {mfu}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
