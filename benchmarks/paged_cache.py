"""The continuous sampler's KV cache: dense (slots x C) against paged (a page pool), long-tailed.

The work: P prompts x G samples whose response lengths are drawn from a geometric distribution
(mean ``--mean_len``, capped at ``--max_len``), each row forced to end at its drawn length (as
``benchmarks/rollout_tail.py``). Sides, each in its own process, alternating
(``benchmarks/_harness.py``, >= 3 rounds, min / median / max; compile and warm-up excluded):

* ``dense``: ``ContinuousSampler(slots=--slots)``, its cache ``--slots`` x C slots;
* ``paged_<impl>``: the same sampler with ``kv_cache="paged"``, ``--page_size``, a pool of
  ``--num_pages`` pages (0: as many as the dense cache holds) and the paged attention ``<impl>``
  of ``--impls`` (``gather`` on every backend; ``pallas_gpu``: JAX's Pallas GPU paged-attention
  kernel, GPU only).

Both sides number the rows alike, so they sample the same tokens: the driver checks the checksums
agree across sides. Printed besides the times: the KV bytes each side allocates, and the paged
side's peak pages in use against the pages its live tokens need (non-timing).

Usage::

    python benchmarks/paged_cache.py                                     # CPU, tiny-qwen3
    python benchmarks/paged_cache.py --variant qwen2.5-0.5b --impls gather,pallas_gpu \\
        --dtype bfloat16 --num_pages 512                                 # GPU
    python benchmarks/paged_cache.py --prompts 4 --samples 2 --slots 4 --mean_len 6 \\
        --max_len 24 --page_size 4 --force                               # smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402
from rollout_tail import STOP_ID, make_work  # noqa: E402


def kv_bytes(config, tokens: int, dtype) -> int:
    """Bytes of keys and values for ``tokens`` cache slots of every layer."""
    per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim
    return per_token * tokens * np.dtype(dtype).itemsize


def worker(args):
    import jax

    import mojax.models as mm
    from mojax.models import layouts
    from mojax.sampling.continuous.engine import ContinuousSampler

    model = mm.from_pretrained(args.variant, dtype=args.dtype, seed=0)
    side = args.worker
    if side.startswith("paged_"):
        lay = layouts.for_backend()
        lay = dataclasses.replace(lay, paged_attention=side.removeprefix("paged_"))
        model = model.replace(config=model.config.replace(layouts=lay))
    tokens, lengths, drawn = make_work(args, model.config.vocab_size)
    c = args.prompt_bucket + args.max_len
    kw = dict(
        key=jax.random.key(0), temperature=1.0, num_samples=args.samples,
        stop_token_ids=(STOP_ID,), max_response_len=args.max_len, max_total_len=c,
        min_prompt_bucket=args.prompt_bucket, max_new_tokens=args.max_len,
        force_stop_at=drawn, min_new_tokens=drawn - 1, prompt_lengths=lengths,
    )  # fmt: skip
    cache = {} if side == "dense" else dict(kv_cache="paged", page_size=args.page_size,
                                            num_pages=args.num_pages)  # fmt: skip
    sampler = ContinuousSampler.of(model, slots=args.slots, **cache)

    def run():
        out = sampler.generate(tokens, **kw)
        return np.asarray(out.tokens), np.asarray(out.lengths)

    toks, lens = run()  # compiles every program the timed call runs
    assert (lens == drawn).all(), "rows did not end at their drawn lengths"
    secs = _harness.time_calls(run, args.iters, warmup=0)
    res = {"secs": secs, "tokens": int(drawn.sum()),
           "checksum": hashlib.sha256(toks.tobytes()).hexdigest()[:16]}  # fmt: skip
    if sampler.pages is None:
        res["kv_bytes"] = kv_bytes(model.config, args.slots * c, args.dtype)
    else:
        pool, log = sampler.pages.pool, sampler.pages.log
        res["kv_bytes"] = kv_bytes(model.config, pool.num_pages * pool.page_size, args.dtype)
        res["peak_pages"], res["num_pages"] = pool.peak, pool.num_pages
        res["live_pages"] = max(-(-live // pool.page_size) for _, live, _ in log)
    _harness.emit(res)


def kernel_check(args) -> None:
    """The Pallas paged-attention kernel of ``--impls`` (compiled, on this backend) against the
    gather path: max |difference| of the attention output, fp32 and bf16 (not a timing)."""
    import jax
    import jax.numpy as jnp

    from mojax.models.paged_attention import pallas_gpu

    n, h, k, d, per_row = 16, 16, 2, 64, 12  # 12 pages a row: padded to whole kernel blocks
    rng = np.random.RandomState(0)
    for dtype, pages in (("float32", 256), ("bfloat16", 256), ("bfloat16", 200)):
        q = jnp.asarray(rng.randn(n, h, d), dtype)
        kp, vp = (jnp.asarray(rng.randn(k, pages, args.page_size, d), dtype) for _ in range(2))
        table = jnp.asarray(rng.permutation(pages)[: n * per_row].reshape(n, per_row), jnp.int32)
        lengths = jnp.asarray(rng.randint(0, per_row * args.page_size + 1, n), jnp.int32)
        kernel = functools.partial(pallas_gpu, interpret=jax.devices()[0].platform == "cpu")
        got = jax.jit(kernel)(q, kp, vp, table, lengths).astype(jnp.float32)
        keys = kp[:, table].transpose(1, 2, 3, 0, 4).reshape(n, -1, k, d).astype(jnp.float32)
        vals = vp[:, table].transpose(1, 2, 3, 0, 4).reshape(n, -1, k, d).astype(jnp.float32)
        qg = q.astype(jnp.float32).reshape(n, k, h // k, d)
        s = jnp.einsum("nkgd,nskd->nkgs", qg, keys) * d**-0.5
        s = jnp.where(jnp.arange(keys.shape[1]) < lengths[:, None, None, None], s, -1e30)
        ref = jnp.einsum("nkgs,nskd->nkgd", jax.nn.softmax(s, -1), vals).reshape(n, h, d)
        ref = jnp.where((lengths > 0)[:, None, None], ref, 0.0)
        err = float(jnp.abs(got - ref).max())
        print(f"kernel check {dtype}, pool of {pages} pages: max |pallas - reference| = {err:.3g}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--variant", default="tiny-qwen3")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--mean_len", type=float, default=64.0)
    ap.add_argument("--max_len", type=int, default=512)
    ap.add_argument("--min_prompt", type=int, default=12)
    ap.add_argument("--max_prompt", type=int, default=48)
    ap.add_argument("--prompt_bucket", type=int, default=64)
    ap.add_argument("--page_size", type=int, default=16)
    ap.add_argument("--num_pages", type=int, default=0, help="0: the dense cache's capacity")
    ap.add_argument("--impls", default="gather", help="paged attention layouts to time")
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jax_cache", default=os.path.join(tempfile.gettempdir(), "mojax_jax_cache"))
    ap.add_argument("--kernel_check", action="store_true", help="the kernel against a reference")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.kernel_check:
        return kernel_check(args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    argv = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--force"]
    sides = {"dense": argv, **{f"paged_{impl}": argv for impl in args.impls.split(",")}}
    extra = {"JAX_COMPILATION_CACHE_DIR": args.jax_cache} if args.jax_cache else {}
    runs = _harness.alternate(__file__, sides, args.rounds, env=_harness.worker_env(extra))
    for side, res in runs.items():  # each side samples the same tokens in every round
        if len({r["checksum"] for r in res}) != 1:
            raise SystemExit(f"{side}: the rounds sampled different tokens")
    sums = {side: res[0]["checksum"] for side, res in runs.items()}
    if len(set(sums.values())) != 1:  # fp32: a bug; bf16: a near-tie drawn differently
        print(f"WARNING: the sides sampled different tokens: {sums}")
    subjects = [s for s in sides if s != "dense"]
    _harness.report("whole work", runs, "secs", "dense", subjects, unit="s", scale=1.0)
    for side, res in runs.items():
        lo, med, hi = _harness.spread([r["tokens"] / r["secs"] for r in res])
        extra = res[0]
        pages = (f", peak {extra['peak_pages']} of {extra['num_pages']} pages "
                 f"(live tokens need {extra['live_pages']} at most)"
                 if "peak_pages" in extra else "")  # fmt: skip
        print(f"  {side} tok/s: min {lo:.1f} median {med:.1f} max {hi:.1f}; KV "
              f"{extra['kv_bytes'] / 2**20:.2f} MiB{pages}")  # fmt: skip


if __name__ == "__main__":
    main()
