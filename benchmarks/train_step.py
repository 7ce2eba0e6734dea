"""Train-step throughput: mojax's jitted PPO update vs PyTorch eager on transformers' Qwen3.

Every side runs in its own process, sides alternating (A B, B A, A B, ...) for ``--rounds`` rounds
(>= 3; ``benchmarks/_harness.py``); the script refuses to start when the 1-minute load average
exceeds the core count (``--force`` overrides, loudly).

CPU mode (default): both sides run the same model shape (``CPU_SHAPE``, the same random weights
through one checkpoint), batch and loss (PPO-clip, token-mean, AdamW + global-norm clipping, fp32)
with the same thread count (``--threads``; 0 = each framework's default). Two mojax sides: the
default scanned layers (``mojax``) and ``scan_layers=False`` (``mojax-unrolled``). Per side and round:
the min of ``--steps`` step times after one warm-up (compile) step. Printed: min / median / max of
each side and of the ratio torch / mojax (target >= 1.5x)::

    python benchmarks/train_step.py                          # CPU, B=8, T=128
    python benchmarks/train_step.py --batch 2 --seq 32 --steps 1 --force   # smoke test

GPU mode runs the mojax step alone on a real-size shape, ``--rounds`` fresh processes, and reports
step time, tokens/s and MFU = model FLOPs / step time / peak (``--peak_tflops`` or the device
kind's dense bf16 datasheet value), with model FLOPs both as ``6 N`` per token (N = matmul
parameters, the head included) and as ``6 N + 12 L H D T`` (PaLM, app. B: attention too)::

    python benchmarks/train_step.py --mode gpu --variant qwen2.5-1.5b --batch 8 --seq 2048 \\
        --dtype bfloat16 --remat full --logprob_chunk 512
    python benchmarks/train_step.py --mode gpu --variant tiny-qwen3 --batch 2 --seq 32 --force
    python benchmarks/train_step.py --mode gpu --variant qwen2.5-7b --lora_rank 64 --batch 4 \\
        --seq 2048 --dtype bfloat16 --remat full --logprob_chunk 512

With ``--lora_rank`` the base is frozen: model FLOPs per token are also given as ``4 N`` (forward
and input gradients, no base weight gradient). The attention is the backend's
(``mojax.models.layouts.for_backend``: cuDNN flash attention on a GPU).

Tokens/s counts all B*T positions of the rollout batch (prompt and response) per optimizer update.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

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
    """(N, 12 L H D T): matmul params incl. the head, and attention FLOPs per token (fwd + bwd).

    Model FLOPs per token are ``6 N`` (the issue's definition) or ``6 N + 12 L H D T`` (PaLM).
    """
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
    return n, 12 * layers * h * d * t


# --------------------------------------------------------------------------------------------------
# mojax


def mojax_step_fn(config, params, batch, args):
    """A no-arg callable running one jitted mojax train step (compiled on the first call)."""
    import jax

    from mojax import learner
    from mojax import sharding as shl
    from mojax.learner.batch import shard

    mesh = shl.make_mesh(-1, 1, 1) if args.mode == "gpu" else shl.make_mesh(1, 1, 1)
    opt = learner.OptimizerConfig(learning_rate=1e-5, max_grad_norm=1.0, weight_decay=0.0)
    tx = learner.make_optimizer(opt)
    ppo = learner.PPOConfig(
        clip_high=0.28,
        num_microbatches=args.microbatches,
        microbatch_tokens=getattr(args, "microbatch_tokens", 0) or None,
        logprob_chunk=args.logprob_chunk,
        log_entropy=False,
        shuffle=False,
    )
    step = learner.make_train_step(config, tx, ppo, mesh)
    state = learner.create_train_state(config, tx, seed=0, mesh=mesh, params=params)
    batch = shard(learner.PPOBatch(**batch), mesh, shl.logical_axis_rules())
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


# --------------------------------------------------------------------------------------------------
# workers (each runs in a fresh process)


def _hf_config():
    import transformers

    s = CPU_SHAPE
    return transformers.Qwen3Config(
        vocab_size=s["vocab_size"], hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"], num_hidden_layers=s["num_layers"],
        num_attention_heads=s["num_heads"], num_key_value_heads=s["num_kv_heads"],
        head_dim=s["head_dim"], tie_word_embeddings=False, max_position_embeddings=4096,
    )  # fmt: skip


def prepare_worker(args):
    """Writes the random-weight checkpoint both CPU sides load (nothing is timed)."""
    import torch
    import transformers

    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(_hf_config(), dtype=torch.float32)
    hf.save_pretrained(args.ckpt)
    _harness.emit({"params": sum(p.numel() for p in hf.parameters())})


def torch_worker(args):
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=torch.float32)
    batch = make_batch(args.batch, args.seq, CPU_SHAPE["vocab_size"])
    step = torch_step_fn(hf, batch)
    _harness.emit(
        {"step": _harness.time_calls(step, args.steps), "threads": torch.get_num_threads()}
    )


def mojax_worker(args):
    import mojax.models as mm

    model = mm.from_pretrained(args.ckpt, scan_layers=args.worker == "mojax")
    batch = make_batch(args.batch, args.seq, CPU_SHAPE["vocab_size"])
    step = mojax_step_fn(model.config, model.params, batch, args)
    _harness.emit({"step": _harness.time_calls(step, args.steps)})


def mojax_gpu_worker(args):
    import time

    import jax

    config = _gpu_config(args)
    batch = make_batch(args.batch, args.seq, config.vocab_size)
    step = mojax_step_fn(config, None, batch, args)
    t0 = time.perf_counter()
    loss = step()  # compiles
    compile_s = time.perf_counter() - t0
    _harness.emit(
        {
            "step": _harness.time_calls(step, args.steps, warmup=0),
            "compile": compile_s,
            "loss": loss,
            "devices": jax.device_count(),
            "device": jax.devices()[0].device_kind,
        }
    )


# --------------------------------------------------------------------------------------------------
# drivers


def _thread_env(threads: int) -> dict:
    if not threads:
        return {}
    return {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")
        + f" --xla_cpu_multi_thread_eigen={threads > 1}"
        + f" intra_op_parallelism_threads={threads}",
    }


def _common_argv(args):
    argv = ["--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)]
    argv += ["--microbatches", str(args.microbatches), "--mode", args.mode]
    if args.logprob_chunk:
        argv += ["--logprob_chunk", str(args.logprob_chunk)]
    return argv


def cpu_main(args):
    env = _harness.worker_env({"JAX_PLATFORMS": "cpu", **_thread_env(args.threads)})
    with tempfile.TemporaryDirectory() as ckpt:
        n = _harness.run_worker(__file__, ["--worker", "prepare", "--ckpt", ckpt], env)["params"]
        print(f"CPU mode: shape {CPU_SHAPE}, {n / 1e6:.1f}M params, B={args.batch}, T={args.seq}, "
              f"fp32, threads={args.threads or 'default'}")  # fmt: skip
        argv = _common_argv(args) + ["--ckpt", ckpt]
        sides = {"torch-eager": argv, "mojax": argv, "mojax-unrolled": argv}
        runs = _harness.alternate(__file__, sides, args.rounds, env)
    _harness.report(f"train step B={args.batch} T={args.seq}", runs, "step", "torch-eager",
                    ["mojax", "mojax-unrolled"], target=1.5)  # fmt: skip
    tokens = args.batch * args.seq
    for side, res in runs.items():
        lo, med, hi = _harness.spread([tokens / r["step"] for r in res])
        print(f"  {side} tokens/s: min {lo:.0f} median {med:.0f} max {hi:.0f}")


def _gpu_config(args):
    """The benchmarked model config: the variant, dtype, remat and, with ``--lora_rank``, LoRA
    adapters (alpha = 2r) on every projection of a frozen base."""
    import mojax.models as mm

    config = mm.get_variant(args.variant, dtype=args.dtype, remat=args.remat)
    if args.lora_rank:
        lora = mm.lora.LoraConfig(rank=args.lora_rank, alpha=2.0 * args.lora_rank)
        config = config.replace(lora=lora)
    return config


def gpu_main(args):
    from mojax.models import layouts

    config = _gpu_config(args)
    n_matmul, attn = flops_per_token(config, args.seq)
    print(f"GPU mode: {args.variant} ({n_matmul / 1e9:.3f}B matmul params), B={args.batch}, "
          f"T={args.seq}, dtype={args.dtype}, remat={args.remat}, "
          f"logprob_chunk={args.logprob_chunk}, microbatches={args.microbatches}, "
          f"lora_rank={args.lora_rank}, attention={layouts.for_backend().attention}")  # fmt: skip
    env = _harness.worker_env(
        {"JAX_COMPILATION_CACHE_DIR": args.jax_cache} if args.jax_cache else {}
    )
    argv = _common_argv(args)
    argv += ["--variant", args.variant, "--dtype", args.dtype, "--remat", args.remat]
    argv += ["--lora_rank", str(args.lora_rank), "--microbatch_tokens", str(args.microbatch_tokens)]
    runs = _harness.alternate(__file__, {"mojax-gpu": argv}, args.rounds, env)["mojax-gpu"]
    kind, n_dev = runs[0]["device"], runs[0]["devices"]
    peak = args.peak_tflops or next(
        (v for k, v in PEAK_TFLOPS.items() if k.lower() in kind.lower()), None
    )
    tokens = args.batch * args.seq
    print(f"\ntrain step on {n_dev} x {kind}, {len(runs)} rounds (separate processes), "
          f"compile {runs[0]['compile']:.1f}s in round 1, first loss {runs[0]['loss']:.5f}")  # fmt: skip
    rows = {"step (ms)": [1e3 * r["step"] for r in runs],
            "tokens/s": [tokens / r["step"] for r in runs]}  # fmt: skip
    flops = [("6N", 6 * n_matmul), ("6N+12LHDT", 6 * n_matmul + attn)]
    if args.lora_rank:  # no weight gradient of the frozen base: forward 2N + input grads 2N
        flops = [("4N", 4 * n_matmul), ("4N+12LHDT", 4 * n_matmul + attn)] + flops
    for name, per_tok in flops:
        rows[f"model TFLOP/s ({name})"] = [tokens * per_tok / r["step"] / 1e12 for r in runs]
        if peak:
            rows[f"MFU % ({name}, peak {peak:g})"] = [
                100 * x / (peak * n_dev) for x in rows[f"model TFLOP/s ({name})"]
            ]
    for name, vals in rows.items():
        lo, med, hi = _harness.spread(vals)
        print(f"  {name:<34s} min {lo:10.2f}  median {med:10.2f}  max {hi:10.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    _harness.add_args(p)
    p.add_argument("--mode", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--variant", default="qwen2.5-1.5b", help="gpu mode: a mojax model variant")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=3, help="timed steps per worker (min is kept)")
    p.add_argument("--threads", type=int, default=0, help="cpu: threads per side (0 = default)")
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--logprob_chunk", type=int, default=None)
    p.add_argument("--lora_rank", type=int, default=0, help="gpu: LoRA rank (0 = full)")
    p.add_argument(
        "--microbatch_tokens", type=int, default=0, help="ppo.microbatch_tokens (0 = off)"
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--remat", default="none", choices=("none", "full", "dots"))
    p.add_argument("--peak_tflops", type=float, default=None, help="per-device peak for MFU")
    p.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--jax_cache", default=os.path.join(tempfile.gettempdir(), "mojax_jax_cache"),
                   help="gpu: persistent compilation cache shared by the workers ('' = off)")  # fmt: skip
    args = p.parse_args(argv)
    if args.worker:
        workers = {"prepare": prepare_worker, "torch-eager": torch_worker,
                   "mojax": mojax_worker, "mojax-unrolled": mojax_worker,
                   "mojax-gpu": mojax_gpu_worker}  # fmt: skip
        return workers[args.worker](args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    (gpu_main if args.mode == "gpu" else cpu_main)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
