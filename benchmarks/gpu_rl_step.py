"""One GRPO step end to end on one accelerator, as a user's run gets it (issue 48 item 4).

The pieces ``mojax.rl.step.rl_step`` runs, on a random-weight model of a named variant
(``mojax.models.get_variant``; no task, tokenizer or data: synthetic prompts), each timed apart:

* ``handover``: the learner's weights to the sampler (``ContinuousSampler.update_weights`` on
  ``learner.policy_params(state)``: the decode layout's view, fused q/k/v and gate/up where the
  layouts fuse them), blocked until ready;
* ``generation``: ``mojax.sampling.continuous.engine.ContinuousSampler`` (the continuous engine,
  ``--slots`` decode slots) over P prompts of ``--prompt_len`` random tokens x G samples,
  temperature 1; a sampled stop: each row's length is drawn from a geometric distribution (mean
  ``--mean_len``, capped at ``--new_tokens``; the draw is seeded, the same every step and round,
  so the update compiles once) and the row is forced to end with the stop id there
  (``force_stop_at``, ``min_new_tokens`` one less), so lengths are long-tailed as a trained
  policy's are, while the weights are random;
* ``rewards``: the shared Python reward of every completion (``_peer_common.reward_of_ids``,
  the one ``benchmarks/rl_step_peers.py`` gives every framework) and GRPO advantages
  (``mojax.advantages.grpo``, ``std_ddof=1``);
* ``update``: ``mojax.rl.step.assemble_batch``, the rows packed (``mojax.learner.packing``, rows
  a multiple of ``ROW_BUCKET``) and the jitted PPO step (``mojax.learner.make_train_step``:
  token-mean PPO-clip, AdamW, one epoch, micro-batches of ``--micro_rows`` rows, the sampler's
  log-probs as pi_old, vocabulary projection in chunks of ``--logprob_chunk``), blocked until ready.

Per worker (one process): ``--warmup`` untimed steps (compilation), then ``--steps`` timed steps,
the min of each part kept. Sides alternate over ``--rounds`` processes (``benchmarks/_harness.py``)
and the driver prints min / median / max of each part, of the step, of tokens/s per chip (prompt +
response tokens of the B rows / step / devices; also response tokens alone) and the peak device
memory (``memory_stats()["peak_bytes_in_use"]``; n/a where the backend keeps none, as XLA CPU).

Not here: the calculator task's tool turns. A random-weight policy never writes the tool-call
tag, so its rollout has no tool turn; measuring them needs a trained checkpoint on the device
machine or a way to force the tool call (neither exists yet). Single process (one host, its
devices on one mesh); nothing is written but stdout.

Usage::

    python benchmarks/gpu_rl_step.py --variant qwen2.5-0.5b          # GPU: 64 x 8, prompt 256
    python benchmarks/gpu_rl_step.py --variant qwen2.5-1.5b --slots 256
    python benchmarks/gpu_rl_step.py --variant tiny-qwen3 --dtype float32 --prompts 2 --samples 2 \\
        --prompt_len 8 --new_tokens 16 --mean_len 4 --slots 4 --micro_rows 0 --steps 1 \\
        --warmup 1 --rounds 1 --force                                 # CPU smoke test (~30 s)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402
from _peer_common import reward_of_ids  # noqa: E402
from _peer_mojax import ROW_BUCKET  # noqa: E402  (packed rows: a multiple of it, few shapes)

STOP_ID = 1  # the forced stop token (any id of the vocabulary; ``_peer_common``'s ``<eos>``)
PARTS = ("handover", "generation", "rewards", "update", "step")


def make_work(args, vocab: int):
    """Prompts ``[P, prompt_len]`` (ids in [2, V)) and the drawn response lengths ``[B]``."""
    rng = np.random.RandomState(args.seed)
    prompts = rng.randint(2, vocab, (args.prompts, args.prompt_len)).astype(np.int32)
    b = args.prompts * args.samples
    drawn = rng.geometric(1.0 / args.mean_len, b) if args.mean_len > 1 else np.ones(b, np.int64)
    return prompts, np.minimum(drawn, args.new_tokens).astype(np.int32)


def peak_memory() -> float | None:
    """Peak bytes in use on device 0 since the process started (None: the backend keeps none)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else float(peak)


def _build(args):
    """The train state, the jitted update, the continuous engine and the batch's T."""
    import mojax.models as mm
    from mojax import learner
    from mojax import sharding as shl
    from mojax.sampling.continuous.engine import ContinuousSampler

    config = mm.get_variant(args.variant, dtype=args.dtype, remat=args.remat)
    mesh = shl.make_mesh(-1, 1, 1)
    total_len = args.prompt_len + args.new_tokens
    tx = learner.make_optimizer(
        learner.OptimizerConfig(learning_rate=1e-6, max_grad_norm=1.0, weight_decay=0.0)
    )
    ppo = learner.PPOConfig(
        clip_low=0.2, clip_high=0.2, agg="token-mean", shuffle=False, log_entropy=False,
        microbatch_tokens=args.micro_rows * total_len if args.micro_rows else None,
        logprob_chunk=args.logprob_chunk or None,
    )  # fmt: skip
    train_step = learner.make_train_step(config, tx, ppo, mesh)
    state = learner.create_train_state(config, tx, seed=0, mesh=mesh)
    sampler = ContinuousSampler(
        config, slots=args.slots, mesh=mesh if mesh.devices.size > 1 else None
    )
    return config, state, train_step, sampler, total_len


def worker(args) -> None:
    """Runs ``--warmup`` + ``--steps`` GRPO steps and emits the min of each part."""
    import jax

    from mojax import learner
    from mojax.advantages.grpo import grpo
    from mojax.learner import packing
    from mojax.rl.step import assemble_batch

    config, state, train_step, sampler, total_len = _build(args)
    prompts, drawn = make_work(args, config.vocab_size)
    p, g = args.prompts, args.samples
    prompt_ids = [list(map(int, row)) for row in prompts]
    rows, key = math.lcm(train_step.row_divisor, ROW_BUCKET), jax.random.key(args.seed)
    times: list[dict] = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        sampler.update_weights(learner.policy_params(state))
        jax.block_until_ready(sampler.decode_model.params)
        t1 = time.perf_counter()
        out = sampler.generate(
            prompts, key=jax.random.fold_in(key, step), max_new_tokens=args.new_tokens,
            num_samples=g, stop_token_ids=(STOP_ID,), temperature=1.0,
            force_stop_at=drawn, min_new_tokens=drawn - 1,
        )  # fmt: skip
        toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
        t2 = time.perf_counter()
        rewards = np.array([reward_of_ids(toks[b, : lens[b]]) for b in range(p * g)], np.float32)
        adv = grpo(rewards.reshape(p, g, 1), std_ddof=1).advantages
        adv = np.asarray(adv, np.float32).reshape(-1)
        t3 = time.perf_counter()
        batch = assemble_batch(prompt_ids, g, toks, np.asarray(out.logprobs),
                               np.asarray(out.loss_mask), lens, total_len, advantages=adv)  # fmt: skip
        batch = packing.pack_batch(batch, None, rows)
        state, metrics = train_step(state, batch)
        loss = float(jax.block_until_ready(metrics)["loss"])
        t4 = time.perf_counter()
        if not (lens == drawn).all():
            raise SystemExit("rows did not end at their drawn lengths")
        times.append(dict(handover=t1 - t0, generation=t2 - t1, rewards=t3 - t2, update=t4 - t3,
                          step=t4 - t0, loss=loss, rows=int(batch.tokens.shape[0])))  # fmt: skip
    timed = times[args.warmup :]
    result = {k: min(t[k] for t in timed) for k in PARTS}
    result.update(
        first_step=times[0]["step"], loss=timed[-1]["loss"], packed_rows=timed[-1]["rows"],
        prompt_tokens=p * g * args.prompt_len, response_tokens=int(drawn.sum()),
        devices=jax.device_count(), device=jax.devices()[0].device_kind,
        peak_bytes=peak_memory(),
    )  # fmt: skip
    _harness.emit(result)


def _report(runs: list[dict]) -> None:
    """min / median / max over rounds of each part, tokens/s per chip and peak memory."""
    r0 = runs[0]
    n_dev, resp, prompt = r0["devices"], r0["response_tokens"], r0["prompt_tokens"]
    print(f"\none GRPO step on {n_dev} x {r0['device']}, {len(runs)} rounds (separate "
          f"processes); first step {r0['first_step']:.1f} s (compiles), packed rows "
          f"{r0['packed_rows']}, loss {r0['loss']:.5f}")  # fmt: skip
    rows = {f"{k} (s)": [r[k] for r in runs] for k in PARTS}
    rows["share of step: generation %"] = [100 * r["generation"] / r["step"] for r in runs]
    rows["share of step: update %"] = [100 * r["update"] / r["step"] for r in runs]
    rows["tokens/s per chip (prompt+response)"] = [
        (prompt + resp) / r["step"] / n_dev for r in runs
    ]
    rows["response tokens/s per chip"] = [resp / r["step"] / n_dev for r in runs]
    for name, vals in rows.items():
        lo, med, hi = _harness.spread(vals)
        print(f"  {name:<38s} min {lo:11.3f}  median {med:11.3f}  max {hi:11.3f}")
    peaks = [r["peak_bytes"] for r in runs]
    if any(x is None for x in peaks):
        print("  peak device memory                     n/a (the backend keeps no memory stats)")
    else:
        lo, med, hi = _harness.spread([x / 2**30 for x in peaks])
        print(f"  {'peak device memory (GiB)':<38s} min {lo:11.3f}  median {med:11.3f}  "
              f"max {hi:11.3f}")  # fmt: skip


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    _harness.add_args(ap)
    ap.add_argument("--variant", default="qwen2.5-0.5b", help="a mojax model variant")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--remat", default="full", choices=("none", "full", "dots"))
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--prompt_len", type=int, default=256)
    ap.add_argument("--new_tokens", type=int, default=1024, help="the response cap")
    ap.add_argument("--mean_len", type=float, default=256.0, help="geometric mean response length")
    ap.add_argument("--slots", type=int, default=256, help="the continuous engine's decode slots")
    ap.add_argument("--micro_rows", type=int, default=16, help="rows per micro-batch (0: all)")
    ap.add_argument("--logprob_chunk", type=int, default=512)
    ap.add_argument("--steps", type=int, default=1, help="timed steps per worker (min is kept)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (compilation)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jax_cache", default=os.path.join(tempfile.gettempdir(), "mojax_jax_cache"),
                    help="persistent compilation cache shared by the workers ('' = off)")  # fmt: skip
    args = ap.parse_args(argv)
    problems = [
        f"--{k} must be >= {lo} (got {getattr(args, k)})"
        for k, lo in (
            ("prompts", 1),
            ("samples", 2),
            ("prompt_len", 1),
            ("new_tokens", 2),
            ("slots", 1),
            ("micro_rows", 0),
            ("steps", 1),
            ("warmup", 0),
        )  # fmt: skip
        if getattr(args, k) < lo
    ]
    if problems:
        ap.error("; ".join(problems))
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        worker(args)
        return 0
    print(_harness.machine_info(), flush=True)
    _harness.check_load(args.force, args.rounds)
    _, drawn = make_work(args, vocab=1 << 30)
    print(f"{args.variant} {args.dtype} remat={args.remat}: P={args.prompts} x G={args.samples}, "
          f"prompt {args.prompt_len}, responses geometric mean {args.mean_len:g} cap "
          f"{args.new_tokens} (drawn mean {drawn.mean():.1f}, max {drawn.max()}), "
          f"{args.slots} slots, micro-batches of {args.micro_rows or 'all'} rows", flush=True)  # fmt: skip
    argv = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--force"]
    extra = {"JAX_COMPILATION_CACHE_DIR": args.jax_cache} if args.jax_cache else {}
    runs = _harness.alternate(__file__, {"mojax": argv}, args.rounds, _harness.worker_env(extra))
    _report(runs["mojax"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
