"""The policy a run starts from: random init, an HF checkpoint, or an SFT warm start on top.

The SFT warm start trains on the task's demonstrations (``Task.sft_rows``) and is checkpointed
once under ``<workdir>/checkpoints_sft``, so a restarted run reuses it instead of training again. A
corrupt SFT checkpoint is moved aside to ``<step>.corrupt`` (``Checkpointer.restore(fallback=True)``)
and the warm start runs again, so a damaged file never crash-loops the run.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np
from absl import logging

from mojax import checkpoint as ckpt_lib
from mojax import learner
from mojax import logbook as log_lib
from mojax.learner import packing
from mojax.rl.builders import sft_arrays


def initial_params(run, workdir: str):
    """Params before RL: the checkpoint or a random init, then the SFT warm start if configured."""
    params = None
    dense = run.model_config.replace(lora=None)  # under LoRA: the base's dense weights
    if run.spec.model.checkpoint:
        from mojax.models import load_params

        params = load_params(run.spec.model.checkpoint, dense)
    if run.spec.sft.steps > 0:
        return sft(run, workdir, params)
    if params is None:
        state = learner.create_train_state(
            dense, run.tx, seed=run.spec.seed, mesh=run.mesh, rules=run.rules
        )
        return state.params
    return params


def sft(run, workdir: str, params=None):
    """``sft.steps`` supervised steps on the task's demonstrations; the result is checkpointed."""
    steps = run.spec.sft.steps
    model_config = run.model_config.replace(lora=None)  # the warm start trains every weight
    tx = learner.make_optimizer(run.spec.sft.optimizer())
    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints_sft"), max_to_keep=1)
    try:
        if ckpt.latest_step() == steps:
            target = learner.abstract_train_state(model_config, tx, run.mesh, run.rules)
            try:
                state, _, _ = ckpt.restore(target, fallback=True)
                logging.info("SFT warm start restored from %s", ckpt.directory)
                return state.params
            except ckpt_lib.CorruptCheckpointError as e:  # moved aside by restore: train again
                logging.warning("SFT warm start checkpoint unreadable, running SFT again: %s", e)
        state = learner.create_train_state(
            model_config, tx, seed=run.spec.seed, mesh=run.mesh, rules=run.rules, params=params
        )
        tokens, mask = sft_arrays(run.spec, run.task, run.tokenizer, run.splits.train)
        step_fn = learner.make_sft_step(model_config, tx, run.mesh, run.rules)
        t0 = time.time()
        pending = []  # every step's metrics, fetched together every 100 steps (no sync per step)
        with log_lib.MetricsWriter(workdir, tensorboard=False, filename="sft_metrics.jsonl") as w:
            for i in range(steps):
                batch = sft_batches(tokens, mask, run.spec.sft.batch_size, i, run.spec.seed)
                if run.spec.packing.enabled:  # several demonstrations per row
                    batch = packing.pack_batch(_with_mask(batch), run.spec.packing.width or None)
                state, m = step_fn(state, batch)
                pending.append(m)
                if (i + 1) % 100 == 0 or i + 1 == steps:
                    fetched = jax.device_get(pending)
                    for j, mj in enumerate(fetched, start=i + 2 - len(pending)):
                        w.write(j, {f"sft/{k}": v for k, v in mj.items()})
                    loss, took, pending = float(fetched[-1]["loss"]), time.time() - t0, []
                    if w.active:  # process 0 reports
                        print(f"SFT {i + 1}/{steps} loss {loss:.4f} ({took:.0f}s)", flush=True)
        ckpt.save(steps, state, {"phase": "sft"}, force=True)
        ckpt.wait()
        return state.params
    finally:
        ckpt.close()


def sft_batches(tokens: np.ndarray, mask: np.ndarray, batch_size: int, step: int, seed: int):
    """The SFT batch of ``step``: a deterministic epoch-wise permutation (resumable by step)."""
    n = tokens.shape[0]
    if batch_size > n:
        raise ValueError(f"config.sft.batch_size={batch_size} > number of demonstrations {n}")
    per_epoch = n // batch_size
    epoch, i = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    idx = order[i * batch_size : (i + 1) * batch_size]
    # right-padded and causal: real tokens never attend to the trailing padding, so no attention
    # mask is needed (the padding is also out of the loss)
    return {"tokens": tokens[idx], "loss_mask": mask[idx]}


def _with_mask(batch: dict) -> dict:
    """An SFT batch with its ``attention_mask``: 1 up to each row's last loss token (the
    demonstrations are right-padded and end with their last response token)."""
    mask = np.asarray(batch["loss_mask"]) > 0
    last = np.where(mask.any(1), mask.shape[1] - np.argmax(mask[:, ::-1], axis=1), 0)
    am = (np.arange(mask.shape[1])[None] < last[:, None]).astype(np.int32)
    return {**batch, "attention_mask": am}
