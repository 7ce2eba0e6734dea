"""mojax's side of ``benchmarks/rl_step_peers.py``: one GRPO step through mojax's building blocks.

The pieces ``mojax.rl.step.rl_step`` runs, without the task plumbing (tools, task rewards, logging):
``mojax.sampling.generate`` on the learner's current params (the in-graph sampler, one shared
prefill per prompt), the shared Python reward, ``mojax.advantages.grpo`` (``std_ddof=1``, as TRL),
``mojax.rl.step.assemble_batch`` (+ ``mojax.learner.packing.pack_batch`` for the ``tail``
distribution, as ``ppo``'s trainer does with ``packing.enabled``) and the jitted sharded PPO step
(``mojax.learner.make_train_step``: token-mean PPO-clip, ε 0.2, AdamW, global-norm clip 1, one
epoch, one mini-batch, KL 0, the sampler's log-probs as π_old); one micro-batch, or with
``--micro_rows R`` micro-batches of R rows (``ppo.microbatch_tokens = R x T``; the gradients summed
in-graph before the one AdamW update).

Sides ``mojax-rows`` / ``mojax-batch``: the same with ``ppo.logprob_compact = "rows"`` (chunks of
16 positions per row) / ``"batch"`` (chunks of 1024 positions over the batch; ``--compact_chunk``
overrides either): only the loss positions are projected onto the vocabulary. A ``-fused`` suffix
(``mojax-fused``, ``mojax-batch-fused``): each layer's q/k/v and gate/up products fused in the
sampler's decode loop (``Layouts.fuse_decode_projections``, ``mojax.models.fused``). A ``-kept``
suffix (``mojax-batch-kept``): ``ppo.logprob_remat = False``, the update's backward reuses the
forward's logits chunks instead of recomputing them (one head matmul fewer per chunk).
"""

from __future__ import annotations

import dataclasses
import math

import _harness
import numpy as np
from _peer_common import StepTimer, load_inputs, now, reward_of_ids

#: packed batches get a multiple of this many rows, so a few shapes compile (each new row count
#: compiles the update anew; ``compiles`` in the result counts the timed steps' compilations)
ROW_BUCKET = 16


def main(args) -> None:
    import jax

    import mojax.models as mm
    import mojax.sampling as ms
    from mojax import learner
    from mojax import sharding as shl
    from mojax.advantages.grpo import grpo
    from mojax.learner import packing
    from mojax.models import layouts
    from mojax.rl.step import assemble_batch

    inp = load_inputs(args.ckpt)
    prompts, g, n = inp["prompts"], inp["num_samples"], inp["max_new_tokens"]
    p = len(prompts)
    width = max(len(x) for x in prompts)
    tokens = np.zeros((p, width), np.int32)
    for i, ids in enumerate(prompts):
        tokens[i, : len(ids)] = ids
    lengths = np.array([len(x) for x in prompts], np.int32)
    total_len = inp["max_prompt"] + n  # fixed T: one compiled update for every step
    stop = [inp["eos_id"]] if args.dist == "tail" else []

    model = mm.from_pretrained(args.ckpt, dtype="float32")
    config = model.config
    mesh = shl.make_mesh(1, 1, 1)
    opt = learner.OptimizerConfig(learning_rate=inp["lr"], max_grad_norm=1.0, weight_decay=0.0)
    tx = learner.make_optimizer(opt)
    options = args.worker.split("-")[1:]  # e.g. mojax-batch-fused
    compact = next((o for o in options if o in ("rows", "batch")), "off")
    if "fused" in options:  # fused q/k/v and gate/up products in the sampler's decode loop
        lay = dataclasses.replace(layouts.for_backend(), fuse_decode_projections=True)
        config = config.replace(layouts=lay)
        model = model.replace(config=config)
    chunk = args.compact_chunk or {"off": None, "rows": 16, "batch": 1024}[compact]
    micro = args.micro_rows * total_len if args.micro_rows else None  # rows x T per micro-batch
    ppo = learner.PPOConfig(clip_low=0.2, clip_high=0.2, agg="token-mean", microbatch_tokens=micro,
                            shuffle=False, log_entropy=False, logprob_chunk=chunk,
                            logprob_compact=compact,
                            logprob_remat="kept" not in options)  # fmt: skip
    train_step = learner.make_train_step(config, tx, ppo, mesh)
    state = learner.create_train_state(config, tx, seed=0, mesh=mesh, params=model.params)
    timer = StepTimer()
    key = jax.random.key(inp["seed"])
    for step in range(args.warmup + args.steps):
        t0 = now()
        policy = mm.QwenModel(config, learner.policy_params(state))
        out = ms.generate(
            policy, tokens, prompt_lengths=lengths, key=jax.random.fold_in(key, step),
            max_new_tokens=n, num_samples=g, stop_token_ids=stop, temperature=1.0,
            draw=args.mojax_draw,
        )  # fmt: skip
        out_tokens, out_lens = np.asarray(out.tokens), np.asarray(out.lengths)
        t1 = now()
        rewards = np.array([reward_of_ids(out_tokens[b, : out_lens[b]]) for b in range(p * g)])
        adv = grpo(rewards.reshape(p, g, 1).astype(np.float32), std_ddof=1).advantages
        batch = assemble_batch(prompts, g, out_tokens, np.asarray(out.logprobs),
                               np.asarray(out.loss_mask), out_lens, total_len,
                               advantages=adv)  # fmt: skip
        if args.dist == "tail":  # packed rows rounded up to a multiple of ROW_BUCKET: few shapes
            batch = packing.pack_batch(batch, None, math.lcm(train_step.row_divisor, ROW_BUCKET))
        t2 = now()
        traces = train_step.trace_count
        state, metrics = train_step(state, batch)
        loss = float(jax.block_until_ready(metrics)["loss"])
        t3 = now()
        timer.add(t1 - t0, t3 - t2, t3 - t0, response_len=float(out_lens.mean()),
                  rows=float(batch.tokens.shape[0]), loss=loss,
                  compiles=float(train_step.trace_count - traces))  # fmt: skip
    _harness.emit(timer.result(args.warmup, side=args.worker, devices=str(jax.devices()[0]),
                               logprob_chunk=chunk or 0, micro_rows=args.micro_rows,
                               draw=args.mojax_draw,
                               logprob_remat="kept" not in options))  # fmt: skip
