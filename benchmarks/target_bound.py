"""The compute bound of the CPU speed targets: how fast could any implementation be on this machine?

A speed target is a ratio to an anchor's time (transformers ``generate``, TRL's GRPO step). This
script asks whether the ratio is reachable at all here: it counts the fewest matmul FLOPs a correct
implementation of the call must do, divides by this CPU's fp32 matmul peak, and compares that time
(the *bound*) with the time the target allows (anchor / target). A target that needs more than
100% of the peak cannot be met by any implementation here, however well fused or dispatched.

What is counted (a lower bound; ``_forward`` and ``_train``):

* every weight product of the layers (q, k, v, o, gate, up, down) on every position a correct
  implementation must run: the real prompt tokens (padding is free), once per prompt when its G
  samples share the prefill, then each decode step of each row; the vocabulary head only where a
  token is drawn or scored (the last prompt position and each decode step), never on the prompt;
* causal attention ``4 H D`` FLOPs per query and key (``q k`` and ``p v``), keys up to the query;
* a training step (``_train``): forward + the input and weight gradients (3x) of every product on
  every position, less layer 0's q / k / v input gradients; attention 3x;
* not counted: norms, activations, RoPE, softmax, sampling, the optimizer, host work.

The peak is the best of jitted XLA products of square fp32 matrices (``--squares``), measured in
its own process. Sampler cases (``benchmarks/sampler.py``'s shapes, prompts and workers): the
anchor is transformers ``generate`` timed by ``sampler.py``'s own worker, and mojax's whole call
too, so the fraction of the peak mojax reaches is printed beside the bound. Processes alternate
(peak, transformers, mojax; then backwards) for ``--rounds`` rounds on one checkpoint per case.

The GRPO step of ``benchmarks/rl_step_peers.py`` (``fixed``: 64 new tokens, 16 x 8 rows, its
prompts and 33.6M-parameter shape): its anchor, TRL's step, takes minutes per process, so it is
not rerun here: pass the medians of an ``rl_step_peers.py`` run from the same window with
``--trl_step`` (and ``--mojax_step``); the peak is the median of this run's peak processes.

Usage (a quiet machine; about 10 minutes for the default cases)::

    python benchmarks/target_bound.py
    python benchmarks/target_bound.py --trl_step 32.07 --mojax_step 18.48   # adds the GRPO step
    python benchmarks/target_bound.py --cases tiny-16x8 --squares 256 --rounds 1 --force  # smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

SAMPLER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sampler.py")

#: name -> (shape, prompts, samples, new tokens, temperature, target), as docs/performance.md
#: section 5f lists them (prompt lengths 12..48 from sampler.make_prompts)
CASES = {
    "small-16x1-greedy": ("small-qwen3", 16, 1, 64, 0.0, 5.0),
    "small-128x1-greedy": ("small-qwen3", 128, 1, 64, 0.0, 5.0),
    "small-16x1-t1": ("small-qwen3", 16, 1, 64, 1.0, 5.0),
    "small-16x8-t1": ("small-qwen3", 16, 8, 64, 1.0, 5.0),
    "tiny-16x8": ("tiny-qwen3", 16, 8, 128, 1.0, 5.0),
}


# --------------------------------------------------------------------------------------------------
# counting


def weight_products(shape: dict) -> tuple[int, int, int]:
    """(layer weights of all layers, head weights, layer 0's q / k / v weights) as in x out
    products (``matmul_floor.dot_shapes``)."""
    import matmul_floor

    shapes = matmul_floor.dot_shapes(shape)
    body = sum(i * o for i, o in shapes[:-1])
    return body, shapes[-1][0] * shapes[-1][1], sum(i * o for i, o in shapes[:3])


def _attn(shape: dict) -> int:
    """Attention FLOPs per (query, key) pair over all layers: ``q k`` and ``p v``."""
    return 4 * shape["num_heads"] * shape["head_dim"] * shape["num_layers"]


def _causal_pairs(start: int, stop: int) -> int:
    """(query, key) pairs of queries at positions start..stop-1, keys up to and at the query."""
    return sum(p + 1 for p in range(start, stop))


def _forward(shape: dict, lengths, samples: int, new_tokens: int) -> float:
    """Fewest forward FLOPs of generating ``new_tokens`` for ``samples`` rows per prompt: the
    prompt once per prompt (shared prefill), the head at its last position, then new_tokens - 1
    decode steps per row (the last drawn token is never fed back)."""
    body, head, _ = weight_products(shape)
    flops = 0.0
    for n in lengths:
        flops += 2 * body * n + 2 * head + _attn(shape) * _causal_pairs(0, n)
        steps = _causal_pairs(n, n + new_tokens - 1)
        flops += samples * (2 * (body + head) * (new_tokens - 1) + _attn(shape) * steps)
    return flops


def _train(shape: dict, lengths, samples: int, new_tokens: int) -> float:
    """Fewest FLOPs of one forward + backward over every row (prompt + new_tokens - 1 positions
    feed the loss; the head on the new_tokens scored positions)."""
    body, head, qkv0 = weight_products(shape)
    flops = 0.0
    for n in lengths:
        pos = n + new_tokens - 1
        row = 6 * body * pos - 2 * qkv0 * pos + 6 * head * new_tokens
        flops += samples * (row + 3 * _attn(shape) * _causal_pairs(0, pos))
    return flops


def sampler_case(name: str) -> tuple[dict, np.ndarray, float]:
    """(shape, prompt lengths, FLOPs) of a sampler case."""
    import sampler

    from mojax.models.variants import get_variant

    variant, p, g, n, _, _ = CASES[name]
    base, overrides = sampler.SHAPES.get(variant, (variant, {}))
    cfg = get_variant(base, **overrides)
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads")
    shape = {k: getattr(cfg, k) for k in (*keys, "num_kv_heads", "head_dim")}
    _, lengths = sampler.make_prompts(p, 12, 48, shape["vocab_size"])
    return shape, lengths, _forward(shape, lengths, g, n)


def rl_step_flops() -> tuple[float, float]:
    """(generation, update) FLOPs of rl_step_peers.py's ``fixed`` step at its default arguments (its
    prompt lengths: the first draw of ``RandomState(0).randint(min_prompt, max_prompt + 1, P)``,
    as its ``prepare_worker`` draws them)."""
    import rl_step_peers

    a = rl_step_peers.parse([])
    shape = dict(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_layers=a.layers,
        num_heads=a.heads, num_kv_heads=a.kv_heads, head_dim=a.head_dim,
    )  # fmt: skip
    lengths = np.random.RandomState(0).randint(a.min_prompt, a.max_prompt + 1, a.prompts)
    args = (shape, lengths, a.samples, a.new_tokens)
    return _forward(*args), _train(*args)


# --------------------------------------------------------------------------------------------------
# workers


def peak_worker(args) -> None:
    """Best GFLOP/s of jitted square fp32 XLA products (one process, default threads)."""
    import jax
    import jax.numpy as jnp

    best = 0.0
    for n in (int(x) for x in args.squares.split(",")):
        a = jnp.asarray(np.random.RandomState(0).randn(n, n).astype(np.float32))
        f = jax.jit(lambda a: a @ a)
        secs = _harness.time_calls(lambda: f(a).block_until_ready(), args.iters)  # noqa: B023
        best = max(best, 2 * n**3 / secs / 1e9)
    _harness.emit({"gflops": best, "device": jax.devices()[0].device_kind})


# --------------------------------------------------------------------------------------------------
# driver


def _line(label: str, values) -> str:
    lo, med, hi = _harness.spread(list(values))
    return f"  {label:<44s} min {lo:9.3f}  median {med:9.3f}  max {hi:9.3f}"


def _verdict(gflop: float, anchor: float, target: float, peak: float) -> list[str]:
    """The target's time, the bound, the needed fraction of the peak and the best ratio."""
    allowed, bound = anchor / target, gflop / peak
    need = gflop / allowed / peak
    word = "INFEASIBLE at this peak" if need > 1 else "within the peak"
    return [
        f"  target {target:g}x allows {allowed:.4f} s; bound {bound:.4f} s (FLOPs / median peak)",
        f"  the target needs {100 * need:.0f}% of the peak: {word}; "
        f"best ratio the peak allows: {anchor / bound:.2f}x",
    ]


def run_case(args, name: str, env: dict) -> list[float]:
    """Alternates peak / transformers / mojax processes for one sampler case; prints its table
    and returns the peak's GFLOP/s per round."""
    variant, p, g, n, temp, target = CASES[name]
    _, lengths, flops = sampler_case(name)
    gflop = flops / 1e9
    with tempfile.TemporaryDirectory() as ckpt:
        prep = ["--worker", "prepare", "--variant", variant, "--ckpt", ckpt, "--dtype", "float32"]
        _harness.run_worker(SAMPLER, prep, env)
        argv = ["--ckpt", ckpt, "--dtype", "float32", "--prompts", str(p), "--samples", str(g),
                "--min_prompt", "12", "--max_prompt", "48", "--new_tokens", str(n),
                "--iters", "3", "--draw", "gumbel", "--temperature", str(temp)]  # fmt: skip
        peak = ["--worker", "peak", "--squares", args.squares, "--iters", str(args.iters)]
        runs: dict[str, list[dict]] = {"peak": [], "transformers": [], "mojax": []}
        for r in range(args.rounds):  # forwards, then backwards, ...; each a fresh process
            for side in list(runs) if r % 2 == 0 else list(runs)[::-1]:
                if side == "peak":
                    runs[side].append(_harness.run_worker(__file__, peak, env))
                else:  # sampler.py's own workers, as its benchmark runs them
                    runs[side].append(_harness.run_worker(SAMPLER, ["--worker", side, *argv], env))
    peaks = [x["gflops"] for x in runs["peak"]]
    hf = [x["secs"] for x in runs["transformers"]]
    mj = [x["secs"] for x in runs["mojax"]]
    print(f"\n{name}: {variant}, {p} x {g} rows, prompts {lengths.min()}..{lengths.max()} "
          f"(sum {lengths.sum()}), {n} new tokens, temperature {temp:g}; {gflop:.2f} GFLOP")  # fmt: skip
    print(_line("fp32 matmul peak (GFLOP/s)", peaks))
    print(_line("transformers whole call (s)", hf))
    print(_line("mojax whole call (s)", mj))
    print(_line("mojax ratio transformers / mojax (x)", [a / b for a, b in zip(hf, mj)]))
    print(_line("mojax fraction of the peak (%)", [100 * gflop / s / k for s, k in zip(mj, peaks)]))
    print("\n".join(_verdict(gflop, float(np.median(hf)), target, float(np.median(peaks)))))
    return peaks


def rl_step_report(args, peaks: list[float]) -> None:
    gen, upd = rl_step_flops()
    gflop, peak = (gen + upd) / 1e9, float(np.median(peaks))
    print(f"\nrl_step_peers fixed: generation {gen / 1e12:.3f} + update {upd / 1e12:.3f} TFLOP "
          f"= {gflop / 1e3:.3f} TFLOP per step; median peak {peak:.1f} GFLOP/s")  # fmt: skip
    if args.mojax_step:
        frac = 100 * gflop / args.mojax_step / peak
        print(f"  mojax step {args.mojax_step:.2f} s: {frac:.0f}% of the peak over the whole step")
    import rl_step_peers

    print("\n".join(_verdict(gflop, args.trl_step, rl_step_peers.TARGETS["trl"], peak)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)} ('' = none)")
    ap.add_argument("--squares", default="1024,2048,3072", help="square sizes of the peak")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--trl_step", type=float, default=None, help="TRL's median step (s), fixed")
    ap.add_argument("--mojax_step", type=float, default=None, help="mojax's median step (s)")
    args = ap.parse_args(argv)
    if args.worker:
        return peak_worker(args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    env = _harness.worker_env({"JAX_PLATFORMS": "cpu"})
    peaks: list[float] = []
    for name in [c for c in args.cases.split(",") if c]:
        peaks += run_case(args, name, env)
    if args.trl_step:
        if not peaks:  # no sampler case run: the peak alone, --rounds processes
            peak = ["--worker", "peak", "--squares", args.squares, "--iters", str(args.iters)]
            peaks = [_harness.run_worker(__file__, peak, env)["gflops"] for _ in range(args.rounds)]
        rl_step_report(args, peaks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
