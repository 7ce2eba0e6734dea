"""Forward and forward+backward tokens/s of the mojax Qwen vs transformers' PyTorch (eager mode).

Both run the same ~48M-parameter Qwen3-shaped config (``bench-qwen3-50m``: E=512, F=1536, L=10,
H=8, K=4, D=64, V=32000, tied) on the same random weights and batch (default 8 x 256 tokens),
side by side in one run (each timing in a fresh process, frameworks alternating), fp32 on CPU.
Forward = logits; forward+backward = mean next-token cross-entropy and the gradient of every
parameter. Prints tokens/s and the mojax / torch ratio
(target >= 1.5x for fwd+bwd).

Run: ``python benchmarks/model.py [--batch 8 --seq 256 --rounds 2 --iters 2] [--threads 1]``.

Measured on the shared 2-core AVX-512 CI box (load average 4-8 from other jobs), 8 x 256 tokens:
default threads: fwd 3.1x, fwd+bwd 1.9x (unrolled) / 1.75x (scan) torch; but torch's OpenMP pool
degrades badly when its threads are descheduled on a busy machine, and with ``--threads 1`` (like
for like, no contention effect) mojax is 0.94x fwd and 0.72x (unrolled) / 0.78x (scan) fwd+bwd:
XLA's CPU GEMMs are ~15% slower than torch's MKL/oneDNN ones and the backward has extra copies.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _best(fn, iters: int) -> float:
    fn()  # warm-up (compilation for jax)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def torch_steps(ckpt, tokens_np, attn):
    """(forward, forward+backward) callables of transformers' PyTorch model in eager mode."""
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        ckpt, dtype=torch.float32, attn_implementation=attn
    ).train()
    tokens = torch.tensor(tokens_np)
    mask = torch.ones_like(tokens)

    def fwd():
        with torch.no_grad():
            hf(input_ids=tokens, attention_mask=mask).logits.sum().item()

    def fwd_bwd():
        hf.zero_grad(set_to_none=True)
        logits = hf(input_ids=tokens, attention_mask=mask).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
        )
        loss.backward()

    return fwd, fwd_bwd


def mojax_steps(ckpt, tokens_np, scan_layers):
    """(forward, forward+backward) callables of the jitted mojax model."""
    import jax
    import jax.numpy as jnp

    import mojax.models as mm

    model = mm.from_pretrained(ckpt, scan_layers=scan_layers)
    apply, params = model.apply_fn, model.params
    tokens = jnp.asarray(tokens_np, jnp.int32)
    mask = jnp.ones_like(tokens)

    @jax.jit
    def fwd(params, tokens, mask):
        return apply({"params": params}, tokens, attention_mask=mask)

    def loss_fn(params, tokens, mask):
        # mean next-token NLL over positions 0..T-2 (the torch loss); the targets are shifted
        # instead of slicing the logits (see mm.token_logprobs)
        logits = apply({"params": params}, tokens, attention_mask=mask)
        nll = -mm.token_logprobs(logits, jnp.roll(tokens, -1, axis=1))
        weight = (jnp.arange(tokens.shape[1]) < tokens.shape[1] - 1) * mask
        return jnp.sum(nll * weight) / jnp.sum(weight)

    grad_fn = jax.jit(jax.value_and_grad(loss_fn))
    return (
        lambda: fwd(params, tokens, mask).block_until_ready(),
        lambda: jax.block_until_ready(grad_fn(params, tokens, mask)),
    )


def worker(impl: str, ckpt: str, batch: int, seq: int, iters: int, torch_attn: str) -> None:
    """Times one implementation in this (fresh) process and prints a JSON line."""
    import numpy as np

    import mojax.models as mm

    config = mm.QwenConfig.from_hf(ckpt)
    tokens = np.random.RandomState(0).randint(0, config.vocab_size, (batch, seq))
    if impl == "torch-eager":
        fwd, fwd_bwd = torch_steps(ckpt, tokens, torch_attn)
    else:
        fwd, fwd_bwd = mojax_steps(ckpt, tokens, scan_layers=impl == "mojax-scan")
    print(json.dumps({"impl": impl, "fwd": _best(fwd, iters), "fwd_bwd": _best(fwd_bwd, iters)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="bench-qwen3-50m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--iters", type=int, default=2, help="timed calls per worker process")
    parser.add_argument("--rounds", type=int, default=2, help="alternating worker rounds")
    parser.add_argument("--layouts", default="unrolled,scan", help="mojax layer layouts to time")
    parser.add_argument("--torch-attn", default="sdpa", help="transformers attn_implementation")
    parser.add_argument(
        "--threads", type=int, default=0,
        help="CPU threads per framework (0 = each framework's default). On a shared, busy machine "
        "use 1: torch's OpenMP pool collapses when its threads are descheduled.",
    )  # fmt: skip
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.ckpt, args.batch, args.seq, args.iters, args.torch_attn)

    import jax
    import torch

    import mojax.models as mm

    config = mm.get_variant(args.variant)
    n_tokens = args.batch * args.seq
    print(f"config {args.variant}: {config.num_params() / 1e6:.1f}M params, "
          f"batch {args.batch}x{args.seq}, jax {jax.__version__} (cpu), torch {torch.__version__} "
          f"(attn={args.torch_attn}), fp32, {os.cpu_count()} cpus")  # fmt: skip

    # one set of weights: random mojax init -> HF checkpoint -> both frameworks
    ckpt = tempfile.mkdtemp()
    mm.save_pretrained(mm.from_pretrained(args.variant, seed=0), ckpt)
    impls = ["torch-eager"] + [f"mojax-{layout}" for layout in args.layouts.split(",")]
    best = {impl: [float("inf"), float("inf")] for impl in impls}
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + f" --xla_cpu_multi_thread_eigen={args.threads > 1}"
            f" intra_op_parallelism_threads={args.threads}"
        )
    env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
    for _ in range(args.rounds):
        for impl in impls:  # each in a fresh process: no thread pools left spinning by the other
            cmd = [sys.executable, __file__, "--worker", impl, "--ckpt", ckpt]
            cmd += ["--batch", str(args.batch), "--seq", str(args.seq), "--iters", str(args.iters)]
            cmd += ["--torch-attn", args.torch_attn]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            best[impl] = [min(best[impl][0], res["fwd"]), min(best[impl][1], res["fwd_bwd"])]

    threads = args.threads or "default"
    print(f"best of {args.rounds} rounds x {args.iters} calls, each framework in its own process, "
          f"threads={threads}")  # fmt: skip
    print(f"{'impl':<16}{'fwd tok/s':>12}{'fwd+bwd tok/s':>16}{'fwd ratio':>12}{'f+b ratio':>12}")
    tf, tb = best["torch-eager"]
    for impl, (f, b) in best.items():
        print(
            f"{impl:<16}{n_tokens / f:>12.0f}{n_tokens / b:>16.0f}{tf / f:>11.2f}x{tb / b:>11.2f}x"
        )


if __name__ == "__main__":
    main()
