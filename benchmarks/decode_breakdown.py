"""Decode-step breakdown: bare cached forward vs forward + sampling vs the whole mojax sampler.

Per batch size, three jitted ``lax.fori_loop`` programs of N steps over one bf16 KV cache of S slots
(prompt slots filled with random keys/values, every row at the same write position), each timed
per step (min of ``--iters`` calls after a warm-up):

* ``forward``: the model's cached forward of one token per row (feeds a fixed token; no sampling),
  plus the projection of the hidden state to fp32 logits; on the CPU backend with the model and
  cache layouts the sampler's decode loop uses there (unrolled layers, ``LayerKVCache``);
* ``forward+sample``: the same, then the logits processors, the categorical draw and the log-prob
  of the drawn token (``mojax.sampling.sample_step``), the drawn token fed back;
* ``sampler``: ``mojax.sampling.generate`` (prefill excluded: budgets 1 and N, per-step difference).

The ratio ``sampler / forward`` is the sampler's overhead per token over the bare forward (issue 17
target: <= 1.15). Each round is a fresh process (``benchmarks/_harness.py``), ``--rounds`` >= 3::

    python benchmarks/decode_breakdown.py --variant qwen2.5-0.5b --batches 1,64     # GPU
    python benchmarks/decode_breakdown.py --variant tiny-qwen2 --batches 1,4 --prompt 16 \\
        --new_tokens 8 --dtype float32 --force                                        # smoke test
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402


def _loops(model, b, prompt, n, dtype, draw):
    """(forward loop, forward+sample loop, initial cache) for ``b`` rows."""
    import jax
    import jax.numpy as jnp

    from mojax.models import init_cache, layouts, to_layer_major
    from mojax.sampling import SamplingParams, sample_step
    from mojax.sampling.decode import _forward

    cfg = model.config
    cache = init_cache(cfg, b, prompt + n, dtype)
    k1, k2 = jax.random.split(jax.random.key(1))
    full = prompt + n
    cache = cache.replace(
        k=jax.random.normal(k1, cache.k.shape, cache.k.dtype),
        v=jax.random.normal(k2, cache.v.shape, cache.v.dtype),
        slot_mask=jnp.broadcast_to(jnp.arange(full) < prompt, (b, full)),
        end=jnp.full((b,), prompt, jnp.int32),
    )
    if layouts.of(cfg).decode_per_layer:  # as ``mojax.sampling.decode._decode`` runs it
        cache = to_layer_major(cache)
    params = SamplingParams(1.0, 0, 1.0, 0.0, "policy", draw)
    ones = jnp.ones((b, 1), bool)
    zeros = jnp.zeros((b,), jnp.int32)

    # the model is an argument, not a closure: closed-over params become HLO constants (1 GB at
    # 0.5B), which XLA GPU did not finish compiling in 200 s
    @jax.jit
    def forward(model, cache):
        def body(i, carry):
            cache, acc = carry
            feed = jnp.full((b, 1), 7, jnp.int32)
            logits, cache = _forward(model, feed, ones, cache, zeros)
            # every logit is used: with ``logits[:, 0]`` XLA rewrites slice(dot) into a dot with
            # one column of the head and skips the vocabulary projection
            return cache, acc + jnp.max(logits, axis=-1)

        return jax.lax.fori_loop(0, n, body, (cache, jnp.zeros((b,), jnp.float32)))[1]

    @jax.jit
    def forward_sample(model, cache):
        def body(i, carry):
            cache, tok, acc = carry
            logits, cache = _forward(model, tok[:, None], ones, cache, zeros)
            tok, lp = sample_step(logits, jax.random.fold_in(jax.random.key(0), i), params)
            return cache, tok, acc + lp

        init = (cache, jnp.full((b,), 7, jnp.int32), jnp.zeros((b,), jnp.float32))
        return jax.lax.fori_loop(0, n, body, init)[2]

    return forward, forward_sample, cache


def worker(args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import mojax.models as mm
    import mojax.sampling as ms
    from mojax.models import layouts

    model = mm.from_pretrained(args.variant, dtype=args.dtype, seed=0)
    model = model.replace_config(layouts=layouts.for_backend())  # the sampler's layouts
    # the bare loops run the layers as the sampler's decode loop does with these layouts
    fmodel = mm.unstack_layers(model) if layouts.of(model.config).decode_per_layer else model
    dtype = jnp.dtype(args.dtype)
    n = args.new_tokens
    out = {"device": jax.devices()[0].device_kind}
    for b in [int(x) for x in args.batches.split(",")]:
        forward, forward_sample, cache = _loops(fmodel, b, args.prompt, n, dtype, args.draw)
        out[f"forward_b{b}"] = (
            _harness.time_calls(
                lambda f=forward, c=cache: jax.block_until_ready(f(fmodel, c)), args.iters
            )
            / n
        )
        out[f"forward+sample_b{b}"] = (
            _harness.time_calls(
                lambda f=forward_sample, c=cache: jax.block_until_ready(f(fmodel, c)),
                args.iters,
            )
            / n
        )
        del cache
        rng = np.random.RandomState(0)
        tokens = rng.randint(1, model.config.vocab_size, (b, args.prompt)).astype(np.int32)
        kw = dict(key=jax.random.key(0), temperature=1.0, max_response_len=n, cache_dtype=dtype,
                  draw=args.draw)  # fmt: skip

        def gen(budget, tokens=tokens, kw=kw):
            return jax.block_until_ready(
                ms.generate(model, tokens, max_new_tokens=budget, **kw).tokens
            )

        gen(n)
        t1 = _harness.time_calls(lambda g=gen: g(1), args.iters)
        tn = _harness.time_calls(lambda g=gen: g(n), args.iters, warmup=0)
        out[f"sampler_b{b}"] = (tn - t1) / (n - 1)
    _harness.emit(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--variant", default="qwen2.5-0.5b")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--prompt", type=int, default=128, help="filled cache slots (a power of two)")
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--draw", default="gumbel", help="token draw: gumbel / inverse_cdf")
    ap.add_argument("--jax_cache", default=os.path.join(tempfile.gettempdir(), "mojax_jax_cache"))
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    print(
        f"{args.variant} {args.dtype}, prompt slots {args.prompt}, {args.new_tokens} steps, "
        f"draw {args.draw}"
    )
    argv = ["--variant", args.variant, "--batches", args.batches, "--prompt", str(args.prompt),
            "--new_tokens", str(args.new_tokens), "--iters", str(args.iters), "--dtype", args.dtype,
            "--draw", args.draw]  # fmt: skip
    env = _harness.worker_env(
        {"JAX_COMPILATION_CACHE_DIR": args.jax_cache} if args.jax_cache else {}
    )
    res = _harness.alternate(__file__, {"breakdown": argv}, args.rounds, env)["breakdown"]
    print(f"\nper decode step on {res[0]['device']}, {len(res)} rounds (separate processes), ms")
    for b in [int(x) for x in args.batches.split(",")]:
        for part in ("forward", "forward+sample", "sampler"):
            lo, med, hi = _harness.spread([1e3 * r[f"{part}_b{b}"] for r in res])
            print(f"  batch {b:3d} {part:<16s} min {lo:8.3f}  median {med:8.3f}  max {hi:8.3f}")
        lo, med, hi = _harness.spread([r[f"sampler_b{b}"] / r[f"forward_b{b}"] for r in res])
        print(f"  batch {b:3d} sampler / forward: min {lo:.2f}x median {med:.2f}x max {hi:.2f}x "
              f"(target <= 1.15x)")  # fmt: skip


if __name__ == "__main__":
    main()
