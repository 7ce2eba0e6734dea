"""Forward and forward+backward tokens/s of the mojax Qwen vs transformers' PyTorch (eager mode).

Both run the same ~48M-parameter Qwen3-shaped config (``bench-qwen3-50m``: E=512, F=1536, L=10,
H=8, K=4, D=64, V=32000, tied) on the same random weights (one checkpoint) and batch (default
8 x 256 tokens), fp32 on CPU. Forward = logits; forward+backward = mean next-token cross-entropy
and the gradient of every parameter. Every side (torch eager, mojax with unrolled layers, mojax
with scanned layers) runs in its own process, sides alternating (A B C, C B A, ...) for
``--rounds`` rounds (>= 3; ``benchmarks/_harness.py``); each worker keeps the min of ``--iters``
calls after a warm-up. The script refuses to start when the 1-minute load average exceeds the core
count (``--force`` overrides, loudly). Printed: min / median / max of each side and of the ratio
torch / mojax (> 1: mojax faster; issue 17 target for fwd+bwd: >= 1.0x).

Run: ``python benchmarks/model.py [--batch 8 --seq 256 --rounds 3 --iters 3] [--threads N]``;
smoke test: ``python benchmarks/model.py --variant tiny-qwen3 --batch 2 --seq 16 --force``.
``--threads N`` pins each worker to its first N cores (both frameworks; torch also gets N OMP/MKL threads);
0 keeps each framework's default.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402


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
    model = model.replace_config(layouts=mm.layouts.for_backend())  # the learner's layouts
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


def worker(impl: str, args) -> None:
    """Times one implementation in this (fresh) process and prints its result line."""
    cpus = int(os.environ.get("MOJAX_BENCH_CPUS", "0"))
    if cpus:  # like for like: both frameworks pinned to the same first N cores
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cpus]))
    import numpy as np

    import mojax.models as mm

    config = mm.QwenConfig.from_hf(args.ckpt)
    tokens = np.random.RandomState(0).randint(0, config.vocab_size, (args.batch, args.seq))
    if impl == "torch-eager":
        fwd, fwd_bwd = torch_steps(args.ckpt, tokens, args.torch_attn)
    else:
        fwd, fwd_bwd = mojax_steps(args.ckpt, tokens, scan_layers=impl == "mojax-scan")
    _harness.emit(
        {
            "fwd": _harness.time_calls(fwd, args.iters),
            "fwd_bwd": _harness.time_calls(fwd_bwd, args.iters),
        }
    )


def _thread_env(threads: int) -> dict:
    env = {"JAX_PLATFORMS": "cpu"}
    if threads:
        # XLA CPU has no thread-count flag that bounds its dots (the former
        # --xla_cpu_multi_thread_eigen=false left mojax on both cores), so each worker is pinned to
        # its first ``threads`` cores; torch also gets matching OMP / MKL pools
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        env["MOJAX_BENCH_CPUS"] = str(threads)
    return env


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(parser)
    parser.add_argument("--variant", default="bench-qwen3-50m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--iters", type=int, default=3, help="timed calls per worker (min kept)")
    parser.add_argument("--layouts", default="unrolled,scan", help="mojax layer layouts to time")
    parser.add_argument("--torch-attn", default="sdpa", help="transformers attn_implementation")
    parser.add_argument(
        "--threads", type=int, default=0, help="threads per framework (0 = default)"
    )
    parser.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)

    import mojax.models as mm

    config = mm.get_variant(args.variant)
    n_tokens = args.batch * args.seq
    print(f"config {args.variant}: {config.num_params() / 1e6:.1f}M params, batch "
          f"{args.batch}x{args.seq}, torch attn={args.torch_attn}, fp32, "
          f"threads={args.threads or 'default'}")  # fmt: skip
    env = _harness.worker_env(_thread_env(args.threads))
    with tempfile.TemporaryDirectory() as ckpt:
        # one set of weights: random mojax init -> HF checkpoint -> both frameworks
        prep = "import sys, mojax.models as mm; mm.save_pretrained(mm.from_pretrained(sys.argv[1], seed=0), sys.argv[2])"
        subprocess.run([sys.executable, "-c", prep, args.variant, ckpt], env=env, check=True)
        argv = ["--ckpt", ckpt, "--batch", str(args.batch), "--seq", str(args.seq),
                "--iters", str(args.iters), "--torch-attn", args.torch_attn]  # fmt: skip
        sides = {"torch-eager": argv}
        sides.update({f"mojax-{layout}": argv for layout in args.layouts.split(",")})
        runs = _harness.alternate(__file__, sides, args.rounds, env)
    subjects = [s for s in sides if s != "torch-eager"]
    for metric, target in (("fwd", None), ("fwd_bwd", 1.0)):
        _harness.report(f"{metric} ({n_tokens} tokens)", runs, metric, "torch-eager", subjects,
                        target=target)  # fmt: skip
        for side, res in runs.items():
            lo, med, hi = _harness.spread([n_tokens / r[metric] for r in res])
            print(f"  {side} tokens/s: min {lo:.0f} median {med:.0f} max {hi:.0f}")
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
