"""Sampler throughput: mojax ``generate`` vs transformers ``generate`` (same weights), side by side.

CPU mode (default; the issue's anchor): for each config (``tiny-qwen3`` and the ~48M
``bench-qwen3-50m``), P prompts x G samples (16 x 8 = 128 rows), mixed prompt lengths, 128 new
tokens, temperature 1 sampling with no stop token (every row decodes all 128 tokens on both sides).
transformers gets the same weights (``mojax.models.save_pretrained`` -> ``from_pretrained``), the
same batch (``num_return_sequences=G``, left-padded prompts) and lengths. Printed: decode tokens/s
(new tokens / wall time of the whole call, prefill included, compile excluded) and the ratio. An
ablation row runs mojax in the Tunix "vanilla" style (prompts repeated G times, no shared prefill,
every step attends over the whole cache) to show what the shared prefill + segments buy.

GPU mode (``--mode=gpu``): a ``qwen2.5-0.5b``-shaped model (random weights) in bf16 with a bf16 cache,
at batch 1 and 64: tokens/s, per-step decode time (from two calls of the same compiled program with
per-row budgets 1 and N), and at batch 1 the fraction of the HBM roofline reached: (bytes of weights
+ cache read per step) / step time / HBM bandwidth. Check it on CPU with a tiny shape:
``python benchmarks/sampler.py --mode=gpu --variant=tiny-qwen2 --batches=1,4 --hbm_gbps=50``.

Usage::

    python benchmarks/sampler.py                      # CPU, both configs
    python benchmarks/sampler.py --configs=tiny-qwen3 --new_tokens=64
    python benchmarks/sampler.py --mode=gpu           # on a GPU host
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mojax.models as mm  # noqa: E402
import mojax.sampling as ms  # noqa: E402

#: Peak HBM bandwidth (GB/s) by ``device_kind`` substring.
HBM_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0, "L4": 300.0, "TPU v5 lite": 819.0}


def make_prompts(p, min_len, max_len, vocab, seed=0):
    rng = np.random.RandomState(seed)
    lengths = rng.randint(min_len, max_len + 1, p).astype(np.int32)
    tokens = rng.randint(0, vocab, (p, max_len)).astype(np.int32)
    tokens[np.arange(max_len)[None] >= lengths[:, None]] = 0
    return tokens, lengths


def timed(fn, repeats=1):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - t0)
    return best, out


def run_mojax(model, tokens, lengths, g, n_new, repeats, vanilla=False):
    kw = dict(key=jax.random.key(0), max_new_tokens=n_new, temperature=1.0)
    if vanilla:  # Tunix-style: every sample prefilled separately, full-cache attention each step
        tokens, lengths = np.repeat(tokens, g, 0), np.repeat(lengths, g, 0)
        kw.update(num_samples=1, segmented=False)
    else:
        kw.update(num_samples=g)
    fn = lambda: ms.generate(model, tokens, prompt_lengths=lengths, **kw).tokens
    fn()  # compile
    secs, toks = timed(fn, repeats)
    assert toks.shape == (len(tokens) * kw["num_samples"], n_new)
    return secs


def run_transformers(model, tokens, lengths, g, n_new, repeats):
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        mm.save_pretrained(model, tmp)
        hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    p, t = tokens.shape
    left = np.zeros_like(tokens)
    mask = np.zeros_like(tokens)
    for i in range(p):  # transformers batches decoder-only generation with left padding
        left[i, t - lengths[i] :] = tokens[i, : lengths[i]]
        mask[i, t - lengths[i] :] = 1
    ids, am = torch.tensor(left, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

    def fn(n=n_new):
        with torch.no_grad():
            return hf.generate(
                ids, attention_mask=am, max_new_tokens=n, min_new_tokens=n, do_sample=True,
                temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=g, pad_token_id=0,
                eos_token_id=None,
            )  # fmt: skip

    fn(2)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    assert out.shape == (p * g, t + n_new), out.shape
    return best


def cpu_mode(args):
    print(f"backend={jax.default_backend()} devices={jax.device_count()} torch threads=", end="")
    import torch

    print(torch.get_num_threads())
    print(f"P={args.prompts} G={args.samples} B={args.prompts * args.samples} "
          f"new_tokens={args.new_tokens} prompt_len={args.min_prompt}..{args.max_prompt}")  # fmt: skip
    header = f"{'config':18s} {'params':>8s} {'impl':34s} {'secs':>8s} {'tok/s':>9s} {'ratio':>7s}"
    print(header)
    for name in args.configs.split(","):
        model = mm.from_pretrained(name, dtype="float32", seed=0)
        tokens, lengths = make_prompts(
            args.prompts, args.min_prompt, args.max_prompt, model.config.vocab_size
        )
        n_tok = args.prompts * args.samples * args.new_tokens
        rows = {}
        rows["transformers generate (torch)"] = run_transformers(
            model, tokens, lengths, args.samples, args.new_tokens, args.repeats
        )
        rows["mojax generate"] = run_mojax(
            model, tokens, lengths, args.samples, args.new_tokens, args.repeats
        )
        if args.vanilla:
            rows["mojax vanilla-style (ablation)"] = run_mojax(
                model, tokens, lengths, args.samples, args.new_tokens, args.repeats, vanilla=True
            )
        base = rows["transformers generate (torch)"]
        n_params = mm.param_count(model.config)
        for impl, secs in rows.items():
            print(f"{name:18s} {n_params / 1e6:7.1f}M {impl:34s} {secs:8.2f} {n_tok / secs:9.0f} "
                  f"{base / secs:6.2f}x")  # fmt: skip
        print(f"RESULT {name}: mojax/transformers decode tokens/s = "
              f"{base / rows['mojax generate']:.2f}x")  # fmt: skip


def gpu_mode(args):
    dev = jax.devices()[0]
    bw = args.hbm_gbps or next((v for k, v in HBM_GBPS.items() if k in dev.device_kind), None)
    print(f"device={dev.device_kind} backend={jax.default_backend()} hbm_gbps={bw}")
    model = mm.from_pretrained(args.variant, dtype="bfloat16", seed=0)
    cfg = model.config
    param_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(model.params))
    n = args.new_tokens
    for b in [int(x) for x in args.batches.split(",")]:
        tokens, lengths = make_prompts(b, args.gpu_prompt, args.gpu_prompt, cfg.vocab_size)
        kw = dict(prompt_lengths=lengths, key=jax.random.key(0), temperature=1.0,
                  cache_dtype=jnp.bfloat16, max_response_len=n)  # fmt: skip
        fn = lambda budget, kw=kw, tokens=tokens: (
            ms.generate(model, tokens, max_new_tokens=budget, **kw).tokens
        )
        jax.block_until_ready(fn(1))  # compile (the budget is a runtime value: one program)
        jax.block_until_ready(fn(n))
        reps = max(args.repeats, 3)
        t1, _ = timed(functools.partial(fn, 1), reps)
        tn, _ = timed(functools.partial(fn, n), reps)
        step = (tn - t1) / (n - 1)
        tb = ms.bucket_length(args.gpu_prompt)
        # bytes read per decode step: all weights once (the embedding matrix once, as the tied
        # head; the input embedding reads B rows) + the k/v slots attended (segments: ~average)
        mean_slots = tb + n / 2
        kv_bytes = 2 * cfg.num_layers * b * mean_slots * cfg.num_kv_heads * cfg.head_dim * 2
        moved = param_bytes + kv_bytes
        line = (f"batch={b:3d} total={tn:.3f}s tok/s={b * n / tn:9.1f} "
                f"decode step={step * 1e3:.2f}ms decode tok/s={b / step:9.1f}")  # fmt: skip
        if bw:
            line += f" HBM roofline fraction={moved / step / (bw * 1e9):.3f}"
        print(line + f" (bytes/step={moved / 1e6:.1f}MB)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--configs", default="tiny-qwen3,bench-qwen3-50m")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--min_prompt", type=int, default=12)
    ap.add_argument("--max_prompt", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--vanilla", type=int, default=1, help="also run the vanilla-style ablation")
    ap.add_argument("--variant", default="qwen2.5-0.5b")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--gpu_prompt", type=int, default=128)
    ap.add_argument("--hbm_gbps", type=float, default=None)
    args = ap.parse_args(argv)
    (gpu_mode if args.mode == "gpu" else cpu_mode)(args)


if __name__ == "__main__":
    main()
