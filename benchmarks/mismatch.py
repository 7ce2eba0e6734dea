"""The sampler-learner mismatch of one model: the in-graph sampler's log-probs vs the learner's.

Not a timing: a measurement (``mojax.learner.correction.mismatch_metrics``). The sampler
(``mojax.sampling.InGraphSampler``: KV-cached decode, the sampler's layouts) generates
``--prompts x --samples`` responses of ``--new`` tokens from random prompts and records each token's
log-prob; the learner (``mojax.learner.make_logprob_fn``: one forward over prompt + response, the
learner's layouts and vocabulary chunks, as ``ppo.old_logprobs="recompute"`` runs it) scores the
same tokens. With the same weights the two differ only by numerics: the compute dtype (``--dtype``),
the cache, the kernels and the order of the sums. Printed: the k3 estimate of ``KL(sampler ‖
learner)``, the token ratio's mean / p99 / min / max and the fraction outside ``[--low, --high]``,
and one ``RESULT_JSON`` line.

The weights are random (``--variant``, seeded) unless ``--checkpoint`` names an HF directory::

    python benchmarks/mismatch.py                                   # tiny Qwen3, fp32, CPU
    python benchmarks/mismatch.py --dtype bfloat16                  # bf16 compute and cache
    python benchmarks/mismatch.py --variant qwen2.5-0.5b --dtype bfloat16 --prompts 16 --new 256
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

TINY = "tiny-qwen3"
TINY_SHAPE = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=384,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    max_position_embeddings=1024,
)


def _model(args):
    import jax

    import mojax.models as mm

    if args.checkpoint:
        return mm.from_pretrained(args.checkpoint, dtype=args.dtype)
    overrides = TINY_SHAPE if args.variant == TINY else {}
    config = mm.get_variant(args.variant, **overrides).replace(
        dtype=args.dtype, param_dtype=args.dtype
    )
    return mm.QwenModel(config, mm.init_params(config, jax.random.PRNGKey(args.seed)))


def measure(args) -> dict:
    import jax
    import jax.numpy as jnp

    import mojax.models as mm
    from mojax import learner
    from mojax import sharding as shl
    from mojax.learner.batch import shard
    from mojax.learner.correction import mismatch_metrics
    from mojax.rl.step import assemble_batch
    from mojax.sampling import InGraphSampler, bucket_length

    model = _model(args)
    cfg = model.config
    mesh = shl.make_mesh(-1, 1, 1)
    rules = shl.logical_axis_rules()
    rng = np.random.RandomState(args.seed)
    lengths = rng.randint(args.prompt_len // 2, args.prompt_len + 1, args.prompts)
    prompts = [list(rng.randint(1, cfg.vocab_size, n)) for n in lengths]
    tokens = np.zeros((args.prompts, args.prompt_len), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = p
    params = jax.device_put(model.params, mm.param_shardings(cfg, mesh, rules))
    sampler = InGraphSampler(cfg, params, mesh=mesh, rules=rules)
    out = sampler.generate(
        tokens,
        prompt_lengths=lengths,
        key=jax.random.PRNGKey(args.seed),
        max_new_tokens=args.new,
        num_samples=args.samples,
        temperature=args.temperature,
        cache_dtype=jnp.dtype(args.dtype),
    )
    lp_fn = learner.make_logprob_fn(cfg, mesh, rules, chunk_size=args.chunk)
    total = bucket_length(args.prompt_len) + args.new
    batch = assemble_batch(prompts, args.samples, np.asarray(out.tokens), np.asarray(out.logprobs),
                           np.asarray(out.loss_mask), np.asarray(out.lengths), total,
                           advantages=np.zeros(len(prompts) * args.samples))  # fmt: skip
    sh = shard(batch, mesh, rules)
    old = lp_fn(params, sh.tokens, sh.attention_mask)
    m = mismatch_metrics(old, sh.old_logprobs, sh.loss_mask, low=args.low, high=args.high)
    res = {k: float(v) for k, v in jax.device_get(m).items()}
    res.update(tokens=int(batch.loss_mask.sum()), device=jax.devices()[0].device_kind)
    res.update(model=args.checkpoint or args.variant, dtype=args.dtype)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default=TINY, help="a mojax.models variant (random weights)")
    ap.add_argument("--checkpoint", default="", help="an HF directory instead of random weights")
    ap.add_argument("--dtype", default="float32", help="compute, parameter and KV-cache dtype")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--prompt_len", type=int, default=32)
    ap.add_argument("--new", type=int, default=64, help="response tokens per row")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--chunk", type=int, default=None, help="learner vocabulary chunk (positions)")
    ap.add_argument("--low", type=float, default=0.5)
    ap.add_argument("--high", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(_harness.machine_info(), flush=True)
    res = measure(args)
    print(f"sampler vs learner, {res['model']} {res['dtype']} on {res['device']}, "
          f"{res['tokens']} tokens:")  # fmt: skip
    for k in ("kl_k3", "kl_k1", "ratio_mean", "ratio_p99", "ratio_min", "ratio_max",
              "frac_outside", "logprob_abs_diff"):  # fmt: skip
        print(f"  {k:<18s} {res[k]:.3e}")
    print("RESULT_JSON " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
