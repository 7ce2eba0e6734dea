"""Forward and forward+backward tokens/s of the mojax Qwen vs transformers' PyTorch (eager mode).

Both run the same ~48M-parameter Qwen3-shaped config (``bench-qwen3-50m``: E=512, F=1536, L=10,
H=8, K=4, D=64, V=32000, tied) on the same random weights and batch (default 8 x 256 tokens),
side by side in one process, fp32 on CPU. Forward = logits; forward+backward = mean next-token
cross-entropy and the gradient of every parameter. Prints tokens/s and the mojax / torch ratio
(target >= 1.5x for fwd+bwd).

Run: ``python benchmarks/model.py [--batch 8 --seq 256 --iters 3 --layouts unrolled,scan]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def _time(fn, iters: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_torch(ckpt, tokens_np, iters, attn):
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

    return _time(fwd, iters), _time(fwd_bwd, iters)


def bench_mojax(ckpt, tokens_np, iters, scan_layers):
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
        _time(lambda: fwd(params, tokens, mask).block_until_ready(), iters),
        _time(lambda: jax.block_until_ready(grad_fn(params, tokens, mask)), iters),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="bench-qwen3-50m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--layouts", default="unrolled,scan", help="mojax layer layouts to time")
    parser.add_argument("--torch-attn", default="sdpa", help="transformers attn_implementation")
    args = parser.parse_args()

    import jax
    import numpy as np
    import torch

    import mojax.models as mm

    config = mm.get_variant(args.variant)
    n_tokens = args.batch * args.seq
    print(f"config {args.variant}: {config.num_params() / 1e6:.1f}M params, "
          f"batch {args.batch}x{args.seq}, jax {jax.__version__} ({jax.devices()[0].platform}), "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads, "
          f"attn={args.torch_attn})")  # fmt: skip

    # one set of weights: random mojax init -> HF checkpoint -> both frameworks
    ckpt = tempfile.mkdtemp()
    mm.save_pretrained(mm.from_pretrained(args.variant, seed=0), ckpt)
    tokens = np.random.RandomState(0).randint(0, config.vocab_size, (args.batch, args.seq))

    results = {"torch-eager": bench_torch(ckpt, tokens, args.iters, args.torch_attn)}
    for layout in args.layouts.split(","):
        results[f"mojax-{layout}"] = bench_mojax(ckpt, tokens, args.iters, layout == "scan")

    t_fwd, t_bwd = results["torch-eager"]
    print(f"{'impl':<18}{'fwd tok/s':>12}{'fwd+bwd tok/s':>16}{'fwd ratio':>12}{'f+b ratio':>12}")
    for name, (f, b) in results.items():
        print(f"{name:<18}{n_tokens / f:>12.0f}{n_tokens / b:>16.0f}"
              f"{t_fwd / f:>11.2f}x{t_bwd / b:>11.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
