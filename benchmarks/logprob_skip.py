"""Long prompts, short responses: the PPO loss gradient with and without skipping the vocabulary
projection of log-prob chunks that hold no loss token (``token_logprobs(..., need=loss_mask)``).

The shape is the tiny AWPO default's (``configs/awpo.py``): the tiny Qwen3 over the real Qwen2
vocabulary (151,936), B rows of a ``--prompt``-token prompt and a ``--response``-token response,
log-probs in chunks of 64 positions. Both sides compute the same loss (PPO-clip, token-mean on the
loss mask) and its gradient; ``all-chunks`` projects every position (the behaviour before the
skip), ``skip`` only the chunks with a response token. Sides alternate in separate processes
(``_harness``)::

    python benchmarks/logprob_skip.py                      # B=4, 4096 + 32 tokens, 3 rounds
    python benchmarks/logprob_skip.py --batch 2 --prompt 256 --response 16 --force   # smoke test
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402


def worker(args) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from mojax import defaults, models
    from mojax.learner import losses, token_logprobs

    shape = dict(defaults.TINY_CALC_MODEL, vocab_size=151936, max_position_embeddings=8192)
    shape["tie_word_embeddings"] = True
    config = models.layouts.resolve(models.get_variant("tiny-qwen3", **shape))
    params = models.Qwen(config).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    b, t = args.batch, args.prompt + args.response
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, 151936, (b, t)), jnp.int32)
    mask = jnp.asarray(np.arange(t)[None].repeat(b, 0) >= args.prompt, jnp.float32)
    old = jnp.where(mask > 0, -11.9, 0.0)
    adv = jnp.asarray(rng.standard_normal(b), jnp.float32)
    skip = args.worker == "skip"

    def loss(p):
        lp, _ = token_logprobs(config, p, tokens, chunk_size=64, need=(mask > 0) if skip else None)
        out = losses.ppo_clip_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
        return out[0] if isinstance(out, tuple) else out

    grad = jax.jit(jax.grad(loss))
    secs = _harness.time_calls(lambda: jax.block_until_ready(grad(params)), args.steps)
    _harness.emit({"grad_s": secs})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--response", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2, help="timed calls per worker (min is kept)")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    _harness.check_load(args.force, args.rounds)
    print(_harness.machine_info())
    flags = ["--batch", str(args.batch), "--prompt", str(args.prompt),
             "--response", str(args.response), "--steps", str(args.steps)]  # fmt: skip
    runs = _harness.alternate(__file__, {"all-chunks": flags, "skip": flags}, args.rounds)
    title = f"PPO loss gradient, B={args.batch}, {args.prompt} + {args.response} tokens, V=151936"
    _harness.report(title, runs, "grad_s", anchor="all-chunks", subjects=["skip"], unit="ms")


if __name__ == "__main__":
    main()
