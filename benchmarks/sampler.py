"""Sampler throughput: mojax ``generate`` vs transformers ``generate`` (same weights), alternating.

Every side runs in its own process, sides alternating (A B, B A, A B, ...) for ``--rounds`` rounds
(>= 3; see ``benchmarks/_harness.py``), and the script refuses to start when the 1-minute load
average exceeds the core count (``--force`` overrides, loudly). Both sides load one checkpoint
(random weights written once by a preparation worker), decode the same batch with temperature-1
sampling and no stop token, so every row decodes all ``--new_tokens`` tokens on both sides.

Per side and round: ``secs`` = wall time of the whole call (prefill + N new tokens; compile and
warm-up excluded; min of ``--iters`` calls) and ``step`` = decode time per step, from two calls with
budgets 1 and N: ``(t_N - t_1) / (N - 1)``. Printed: min / median / max of each, and of the ratio
transformers / mojax (> 1: mojax faster; equal to the tok/s ratio, the token counts being equal).

CPU mode (default; the issue's anchor): for each config (``tiny-qwen3``, ``bench-qwen3-50m``), P
prompts x G samples (16 x 8 = 128 rows), prompt lengths 12..48, 128 new tokens, fp32. transformers
gets ``num_return_sequences=G`` and left-padded prompts; mojax shares each prompt's prefill over
its G samples. ``--vanilla=1`` adds an ablation side: mojax in the Tunix "vanilla" style (prompts
repeated G times, no shared prefill, every step attends over the whole cache).

GPU mode (``--mode=gpu``): ``qwen2.5-0.5b`` (random weights) in bf16 with a bf16 cache, at each
batch in ``--batches`` (rows = prompts, G = 1, prompt length ``--gpu_prompt``). Also printed for
mojax: the fraction of the HBM roofline per decode step, (bytes of all weights + the k/v of the
positions attended, read once per step) / step time / peak HBM bandwidth (``--hbm_gbps`` or the
device kind's datasheet value).

Usage::

    python benchmarks/sampler.py                                     # CPU, both configs
    python benchmarks/sampler.py --mode=gpu                          # on a GPU host
    python benchmarks/sampler.py --configs=tiny-qwen3 --new_tokens=16 --prompts=2 --samples=2 \\
        --force                                                      # smoke test
    python benchmarks/sampler.py --mode=gpu --variant=tiny-qwen2 --batches=1,4 --gpu_prompt=16 \\
        --new_tokens=8 --hbm_gbps=50 --force                          # GPU mode smoke test on CPU
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

#: Issue 17's CPU targets: median speed-up of the whole call over transformers, per config.
TARGETS = {"tiny-qwen3": 5.0, "bench-qwen3-50m": 1.5}

#: Peak HBM bandwidth (GB/s) by ``device_kind`` substring (datasheets).
HBM_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0, "L4": 300.0, "TPU v5 lite": 819.0}


def make_prompts(p, min_len, max_len, vocab, seed=0):
    """Right-padded int32 [P, max_len] prompts and their lengths (ids avoid 0, the pad id)."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(min_len, max_len + 1, p).astype(np.int32)
    tokens = rng.randint(1, vocab, (p, max_len)).astype(np.int32)
    tokens[np.arange(max_len)[None] >= lengths[:, None]] = 0
    return tokens, lengths


# --------------------------------------------------------------------------------------------------
# workers (each runs in a fresh process)


# shapes that are not variants: (variant, config overrides); "small-qwen3" is a 4-layer, 256-wide
# Qwen3 with a 2048-token vocabulary (the small-shape anchor of docs/performance.md section 2)
SHAPES = {
    "small-qwen3": (
        "tiny-qwen3",
        dict(
            hidden_size=256,
            intermediate_size=768,
            num_layers=4,
            num_heads=4,
            num_kv_heads=2,
            head_dim=64,
            vocab_size=2048,
        ),
    ),
}


def prepare_worker(args):
    """Writes the random-weight checkpoint both sides load (JAX on CPU; nothing is timed)."""
    import jax

    import mojax.models as mm
    from mojax.models.variants import get_variant

    variant, overrides = SHAPES.get(args.variant, (args.variant, {}))
    config = get_variant(variant, dtype="float32", param_dtype="float32", **overrides)
    model = mm.QwenModel(config=config, params=mm.init_params(config, jax.random.key(0)))
    mm.save_pretrained(model, args.ckpt, dtype=args.dtype)
    _harness.emit({"params": mm.param_count(model.config)})


def mojax_worker(args, vanilla=False):
    import jax
    import jax.numpy as jnp

    import mojax.models as mm
    import mojax.sampling as ms

    model = mm.from_pretrained(args.ckpt, dtype=args.dtype)
    cfg = model.config
    tokens, lengths = make_prompts(args.prompts, args.min_prompt, args.max_prompt, cfg.vocab_size)
    g, n = args.samples, args.new_tokens
    kw = dict(
        key=jax.random.key(0), temperature=args.temperature, max_response_len=n, draw=args.draw
    )
    if args.dtype != "float32":
        kw["cache_dtype"] = jnp.dtype(args.dtype)
    if vanilla:  # Tunix-style: every sample prefilled separately, full-cache attention each step
        tokens, lengths = np.repeat(tokens, g, 0), np.repeat(lengths, g, 0)
        kw.update(num_samples=1, segmented=False)
    else:
        kw.update(num_samples=g)

    def call(budget):
        out = ms.generate(model, tokens, prompt_lengths=lengths, max_new_tokens=budget, **kw)
        return jax.block_until_ready(out.tokens)

    assert call(n).shape == (args.prompts * g, n)  # compiles (the budget is a runtime value)
    t1 = _harness.time_calls(lambda: call(1), args.iters)
    tn = _harness.time_calls(lambda: call(n), args.iters, warmup=0)
    param_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(model.params))
    if not cfg.tie_word_embeddings:  # the input embedding is gathered (B rows), not read whole
        param_bytes -= cfg.vocab_size * cfg.hidden_size * jnp.dtype(args.dtype).itemsize
    # k/v of the positions attended, averaged over the N steps (prompt + i for step i)
    mean_pos = float(np.mean(lengths)) + (n - 1) / 2
    itemsize = jnp.dtype(args.dtype).itemsize
    kv_bytes = 2 * cfg.num_layers * len(tokens) * kw["num_samples"] * mean_pos
    kv_bytes *= cfg.num_kv_heads * cfg.head_dim * itemsize
    _harness.emit(
        {
            "secs": tn,
            "step": (tn - t1) / max(n - 1, 1),
            "bytes_per_step": param_bytes + kv_bytes,
            "device": jax.devices()[0].device_kind,
        }
    )


def transformers_worker(args):
    import torch
    import transformers

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    hf = transformers.AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=dtype).to(dev).eval()
    tokens, lengths = make_prompts(
        args.prompts, args.min_prompt, args.max_prompt, hf.config.vocab_size
    )
    p, t = tokens.shape
    left, mask = np.zeros_like(tokens), np.zeros_like(tokens)
    for i in range(p):  # transformers batches decoder-only generation with left padding
        left[i, t - lengths[i] :] = tokens[i, : lengths[i]]
        mask[i, t - lengths[i] :] = 1
    ids = torch.tensor(left, dtype=torch.long, device=dev)
    am = torch.tensor(mask, dtype=torch.long, device=dev)

    sampling = dict(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0)
    if args.temperature == 0.0:  # greedy
        sampling = dict(do_sample=False, temperature=None, top_k=None, top_p=None)

    def call(n):
        with torch.no_grad():
            out = hf.generate(
                ids, attention_mask=am, max_new_tokens=n, min_new_tokens=n,
                num_return_sequences=args.samples, pad_token_id=0, eos_token_id=None, **sampling,
            )  # fmt: skip
        if dev == "cuda":
            torch.cuda.synchronize()
        return out

    n = args.new_tokens
    assert call(n).shape == (p * args.samples, t + n)  # warm-up (kernels, allocator)
    t1 = _harness.time_calls(lambda: call(1), args.iters)
    tn = _harness.time_calls(lambda: call(n), args.iters, warmup=0)
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    _harness.emit({"secs": tn, "step": (tn - t1) / max(n - 1, 1), "device": name})


# --------------------------------------------------------------------------------------------------
# drivers


def _worker_argv(args, ckpt, prompts, samples, min_prompt, max_prompt):
    return [
        "--ckpt", ckpt, "--dtype", args.dtype, "--prompts", str(prompts),
        "--samples", str(samples), "--min_prompt", str(min_prompt), "--max_prompt",
        str(max_prompt), "--new_tokens", str(args.new_tokens), "--iters", str(args.iters),
        "--draw", args.draw, "--temperature", str(args.temperature),
    ]  # fmt: skip


def _prepare(variant, dtype, ckpt):
    env = _harness.worker_env({"JAX_PLATFORMS": "cpu"})
    argv = ["--worker", "prepare", "--variant", variant, "--ckpt", ckpt, "--dtype", dtype]
    return _harness.run_worker(__file__, argv, env)["params"]


def _env(args):
    extra = {"JAX_COMPILATION_CACHE_DIR": args.jax_cache} if args.jax_cache else {}
    return _harness.worker_env(extra)


def cpu_main(args):
    print(f"CPU mode: P={args.prompts} G={args.samples} B={args.prompts * args.samples} "
          f"new_tokens={args.new_tokens} prompt_len={args.min_prompt}..{args.max_prompt} "
          f"{args.dtype}, default threads, mojax draw {args.draw}")  # fmt: skip
    for name in args.configs.split(","):
        with tempfile.TemporaryDirectory() as ckpt:
            n_params = _prepare(name, args.dtype, ckpt)
            argv = _worker_argv(
                args, ckpt, args.prompts, args.samples, args.min_prompt, args.max_prompt
            )
            sides = {"transformers": argv, "mojax": argv}
            if args.vanilla:
                sides["mojax-vanilla"] = argv
            runs = _harness.alternate(__file__, sides, args.rounds, env=_env(args))
        title = f"{name} ({n_params / 1e6:.1f}M params)"
        subj = [s for s in sides if s != "transformers"]
        target = TARGETS.get(name) if args.target is None else args.target
        _harness.report(f"{title}: whole call", runs, "secs", "transformers", subj, unit="s",
                        scale=1.0, target=target)  # fmt: skip
        _harness.report(f"{title}: per decode step", runs, "step", "transformers", subj)


def gpu_main(args):
    with tempfile.TemporaryDirectory() as ckpt:
        n_params = _prepare(args.variant, args.dtype, ckpt)
        print(f"GPU mode: {args.variant} ({n_params / 1e6:.1f}M params), {args.dtype} weights and "
              f"cache, prompt {args.gpu_prompt}, new_tokens {args.new_tokens}, draw {args.draw}")  # fmt: skip
        for b in [int(x) for x in args.batches.split(",")]:
            argv = _worker_argv(args, ckpt, b, 1, args.gpu_prompt, args.gpu_prompt)
            sides = {"transformers": argv, "mojax": argv}
            runs = _harness.alternate(__file__, sides, args.rounds, env=_env(args))
            kind = runs["mojax"][0]["device"]
            bw = args.hbm_gbps or next((v for k, v in HBM_GBPS.items() if k in kind), None)
            title = f"{args.variant} batch {b} on {kind}"
            _harness.report(f"{title}: whole call ({b * args.new_tokens} tokens)", runs, "secs",
                            "transformers", ["mojax"], unit="s", scale=1.0)  # fmt: skip
            _harness.report(f"{title}: per decode step", runs, "step", "transformers", ["mojax"])
            for side, res in runs.items():
                lo, med, hi = _harness.spread([b * args.new_tokens / r["secs"] for r in res])
                print(f"  {side} tok/s (whole call): min {lo:.1f} median {med:.1f} max {hi:.1f}")
            if bw:
                frac = [r["bytes_per_step"] / r["step"] / (bw * 1e9) for r in runs["mojax"]]
                lo, med, hi = _harness.spread(frac)
                mb = runs["mojax"][0]["bytes_per_step"] / 1e6
                print(f"  mojax HBM roofline fraction per decode step ({mb:.1f} MB/step at "
                      f"{bw:.0f} GB/s): min {lo:.3f} median {med:.3f} max {hi:.3f}")  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--mode", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--configs", default="tiny-qwen3,bench-qwen3-50m")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--min_prompt", type=int, default=12)
    ap.add_argument("--max_prompt", type=int, default=48)
    ap.add_argument("--iters", type=int, default=1, help="timed calls per worker (min is kept)")
    ap.add_argument("--vanilla", type=int, default=1, help="cpu: also run the vanilla ablation")
    ap.add_argument("--target", type=float, default=None,
                    help="cpu: target median speed-up (default: issue 17's, per config)")  # fmt: skip
    ap.add_argument("--variant", default="qwen2.5-0.5b", help="gpu: the model variant")
    ap.add_argument("--batches", default="1,64", help="gpu: batch sizes")
    ap.add_argument("--gpu_prompt", type=int, default=128, help="gpu: prompt length")
    ap.add_argument("--hbm_gbps", type=float, default=None, help="gpu: peak HBM GB/s")
    ap.add_argument("--dtype", default=None, help="float32 (cpu default) / bfloat16 (gpu default)")
    ap.add_argument("--draw", default="gumbel", help="mojax token draw: gumbel / inverse_cdf")
    ap.add_argument("--temperature", type=float, default=1.0, help="0 = greedy on both sides")
    ap.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--jax_cache", default=os.path.join(tempfile.gettempdir(), "mojax_jax_cache"),
                    help="persistent compilation cache shared by the workers ('' = off)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.temperature == 0.0 and args.samples != 1 and args.worker is None:
        ap.error("--temperature 0 (greedy) needs --samples 1: G greedy samples of a prompt are one")
    args.dtype = args.dtype or ("bfloat16" if args.mode == "gpu" else "float32")
    if args.worker:
        worker = {
            "prepare": prepare_worker,
            "mojax": mojax_worker,
            "mojax-vanilla": lambda a: mojax_worker(a, vanilla=True),
            "transformers": transformers_worker,
        }[args.worker]
        return worker(args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    (gpu_main if args.mode == "gpu" else cpu_main)(args)


if __name__ == "__main__":
    main()
