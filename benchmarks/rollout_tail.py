"""Long-tailed response lengths: continuous vs static batching at equal KV-cache memory.

The work: P prompts x G samples (B rows) whose response lengths are drawn from a geometric
distribution (mean ``--mean_len``, capped at ``--max_len``), each row forced to end with its stop
token at its drawn length (``force_stop_at``, with ``min_new_tokens`` one less: no earlier stop).
Both sides hold the same KV cache, ``--slots`` rows x C slots (C = prompt bucket + ``--max_len``):

* ``static``: ``mojax.sampling.generate`` on ``--slots / G`` prompts at a time; every call decodes
  until its longest row ends, so each batch pays for its longest row on every row;
* ``continuous``: ``mojax.sampling.continuous.engine.ContinuousSampler`` with ``--slots`` slots, one
  ``generate`` of all P prompts: a row that ends frees its slot for the next row.

Each side runs in its own process, alternating (``benchmarks/_harness.py``, >= 3 rounds, min /
median / max); compile and warm-up are excluded (one untimed call first). Printed: seconds for the
whole work, tokens/s (the same B rows and lengths on both sides; the tokens differ: each static
call numbers its rows from 0, and a row's random stream follows its row id) and the speed-up
static / continuous (target >= 2x on CPU).

Usage::

    python benchmarks/rollout_tail.py                                  # CPU, tiny-qwen3
    python benchmarks/rollout_tail.py --refills=1,4,8                  # + refill thresholds
    python benchmarks/rollout_tail.py --prompts=4 --samples=2 --slots=4 --mean_len=6 \\
        --max_len=24 --force                                          # smoke test
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

STOP_ID = 7  # the forced stop token (any id of the vocabulary)


def make_work(args, vocab):
    """Prompts [P, Tp], their lengths [P] and the drawn response lengths [B] (seeded)."""
    rng = np.random.RandomState(args.seed)
    lengths = rng.randint(args.min_prompt, args.max_prompt + 1, args.prompts).astype(np.int32)
    tokens = rng.randint(8, vocab, (args.prompts, args.max_prompt)).astype(np.int32)
    tokens[np.arange(args.max_prompt)[None] >= lengths[:, None]] = 0
    b = args.prompts * args.samples
    rng = np.random.RandomState(args.seed + 1)  # the lengths do not depend on the vocabulary
    drawn = np.minimum(rng.geometric(1.0 / args.mean_len, b), args.max_len).astype(np.int32)
    return tokens, lengths, drawn


def worker(args):
    import jax

    import mojax.models as mm
    import mojax.sampling as ms
    from mojax.sampling.continuous.engine import ContinuousSampler

    model = mm.from_pretrained(args.variant, dtype="float32", seed=0)
    tokens, lengths, drawn = make_work(args, model.config.vocab_size)
    g, bucket = args.samples, args.prompt_bucket
    c = bucket + args.max_len
    kw = dict(
        key=jax.random.key(0), temperature=1.0, num_samples=g, stop_token_ids=(STOP_ID,),
        max_response_len=args.max_len, max_total_len=c, min_prompt_bucket=bucket,
    )  # fmt: skip
    per_call = args.slots // g  # prompts per static call (slots rows)

    def static():
        outs = []
        for p0 in range(0, args.prompts, per_call):
            rows = slice(p0 * g, (p0 + per_call) * g)
            out = ms.generate(
                model, tokens[p0 : p0 + per_call], prompt_lengths=lengths[p0 : p0 + per_call],
                max_new_tokens=args.max_len, force_stop_at=drawn[rows],
                min_new_tokens=drawn[rows] - 1, **kw,
            )  # fmt: skip
            outs.append(out)
        return [np.asarray(o.tokens) for o in outs], [np.asarray(o.lengths) for o in outs]

    sampler = ContinuousSampler.of(model, slots=args.slots, refill=args.refill)

    def continuous():
        out = sampler.generate(
            tokens, prompt_lengths=lengths, max_new_tokens=args.max_len, force_stop_at=drawn,
            min_new_tokens=drawn - 1, **kw,
        )  # fmt: skip
        return [np.asarray(out.tokens)], [np.asarray(out.lengths)]

    run = static if args.worker == "static" else continuous  # continuous, continuous_r<k>
    toks, lens = run()  # compiles every program the timed call runs
    got = np.concatenate(lens)
    assert (got == drawn).all(), "rows did not end at their drawn lengths"
    secs = _harness.time_calls(run, args.iters, warmup=0)
    digest = hashlib.sha256(np.concatenate(toks).tobytes()).hexdigest()[:16]
    _harness.emit({"secs": secs, "tokens": int(drawn.sum()), "checksum": digest})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--variant", default="tiny-qwen3")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--slots", type=int, default=16, help="cache rows of both sides")
    ap.add_argument("--refill", type=int, default=1,
                    help="continuous: freed slots that end a segment while rows wait")  # fmt: skip
    ap.add_argument("--refills", default="1",
                    help="comma list: one continuous side per refill threshold")  # fmt: skip
    ap.add_argument("--mean_len", type=float, default=64.0)
    ap.add_argument("--max_len", type=int, default=512)
    ap.add_argument("--min_prompt", type=int, default=12)
    ap.add_argument("--max_prompt", type=int, default=48)
    ap.add_argument("--prompt_bucket", type=int, default=64)
    ap.add_argument("--iters", type=int, default=1, help="timed calls per worker (min is kept)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=2.0)
    ap.add_argument("--jax_cache", default=os.path.join(tempfile.gettempdir(), "mojax_jax_cache"),
                    help="persistent compilation cache shared by the workers ('' = off)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.slots % args.samples or args.prompts % (args.slots // args.samples or 1):
        ap.error("--slots must be a multiple of --samples, and --prompts of --slots / --samples")
    if args.max_prompt > args.prompt_bucket:
        ap.error("--max_prompt must be <= --prompt_bucket")
    if args.worker:
        return worker(args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    _, _, drawn = make_work(args, vocab=1 << 30)
    print(f"{args.variant}: P={args.prompts} G={args.samples} B={args.prompts * args.samples}, "
          f"cache {args.slots} rows x {args.prompt_bucket + args.max_len} slots on both sides; "
          f"lengths geometric mean {args.mean_len:g} cap {args.max_len}: drawn mean "
          f"{drawn.mean():.1f}, max {drawn.max()}, {drawn.sum()} tokens")  # fmt: skip
    argv = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--force"]
    extra = {"JAX_COMPILATION_CACHE_DIR": args.jax_cache} if args.jax_cache else {}
    sides = {"static": argv}
    for k in (int(x) for x in args.refills.split(",")):
        sides["continuous" if k == 1 else f"continuous_r{k}"] = [*argv, f"--refill={k}"]
    runs = _harness.alternate(__file__, sides, args.rounds, env=_harness.worker_env(extra))
    for side, res in runs.items():  # each side samples the same tokens in every round
        if len({r["checksum"] for r in res}) != 1:
            raise SystemExit(f"{side}: the rounds sampled different tokens")
    cont = [name for name in sides if name != "static"]
    if len({runs[name][0]["checksum"] for name in cont}) != 1:  # refill moves no token
        raise SystemExit("the continuous sides sampled different tokens")
    _harness.report("whole work", runs, "secs", "static", cont, unit="s", scale=1.0,
                    target=args.target)  # fmt: skip
    for side, res in runs.items():
        lo, med, hi = _harness.spread([r["tokens"] / r["secs"] for r in res])
        print(f"  {side} tok/s: min {lo:.1f} median {med:.1f} max {hi:.1f}")


if __name__ == "__main__":
    main()
