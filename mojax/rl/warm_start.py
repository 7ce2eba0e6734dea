"""The policy a run starts from: random init, an HF checkpoint, or an SFT warm start on top.

The SFT warm start trains on the task's demonstrations (``Task.sft_rows``) and is checkpointed under
``<workdir>/checkpoints_sft`` every ``sft.checkpoint_every`` steps, at the end, and on a signal
(``mojax.infra.preemption``: the run stops after the step under way). A restarted run resumes it from its
last checkpoint (the batches derive from ``(seed, step)``, so it ends as an uninterrupted warm
start would) or reuses the finished one. A corrupt SFT checkpoint is moved aside to
``<step>.corrupt`` (``Checkpointer.restore(fallback=True)``) and the warm start runs again, so a
damaged file never crash-loops the run.

**LoRA in the RL loop**: the frozen base a run's adapters train on, and what its checkpoints name.

With ``config.lora.enabled`` the train state holds the adapters (``TrainState.params``) and their
optimizer moments only; the frozen base (``TrainState.frozen``, quantised for QLoRA) is the run's
initial policy (``mojax.rl.warm_start.initial_params``: the HF checkpoint, the seeded random init,
or the SFT warm start), rebuilt deterministically on every start and resume and never checkpointed:
each checkpoint's host state names it (``lora_base``). Every process builds the same base.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from absl import logging

from mojax import distributed, learner
from mojax.infra import checkpoint as ckpt_lib
from mojax.infra import logbook as log_lib
from mojax.infra import workdir as workdir_lib
from mojax.infra.preemption import Interrupted, Preempted
from mojax.learner import packing
from mojax.models import lora as lora_lib
from mojax.rl.builders import sft_arrays

if TYPE_CHECKING:
    from mojax.spec import RunSpec


def initial_params(run, workdir: str):
    """Params before RL: the checkpoint or a random init, then the SFT warm start if configured."""
    params = None
    dense = run.learner.model_config.replace(lora=None)  # under LoRA: the base's dense weights
    if run.spec.model.checkpoint:
        from mojax.models import load_params

        params = load_params(run.spec.model.checkpoint, dense)
    if run.spec.sft.steps > 0:
        return sft(run, workdir, params)
    if params is None:
        state = learner.create_train_state(
            dense,
            run.learner.tx,
            seed=run.spec.seed,
            mesh=run.learner.mesh,
            rules=run.learner.rules,
        )
        return state.params
    return params


def sft(run, workdir: str, params=None):
    """``sft.steps`` supervised steps on the task's demonstrations, checkpointed every
    ``sft.checkpoint_every`` steps and at the end; a checkpoint short of the end is resumed.

    Raises:
      mojax.infra.preemption.Preempted: a signal (``run.interrupt``) stopped it after a step; that step
        was checkpointed and a rerun resumes from it.
    """
    steps = run.spec.sft.steps
    model_config = run.learner.model_config.replace(lora=None)  # the warm start trains every weight
    tx = learner.make_optimizer(run.spec.sft.optimizer())
    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints_sft"), max_to_keep=1)
    try:
        state, done = _sft_start(run, model_config, tx, ckpt, params)
        if done < steps:
            state = _sft_steps(run, model_config, workdir, tx, ckpt, state, done)
        return state.params
    finally:
        ckpt.close()


def _sft_start(run, model_config, tx, ckpt, params):
    """``(train state, steps done)``: the latest SFT checkpoint, or a fresh state at step 0. A
    damaged checkpoint is moved aside (``restore(fallback=True)``) and SFT starts over."""
    latest = ckpt.latest_step()
    if latest is not None and latest <= run.spec.sft.steps:
        target = learner.abstract_train_state(model_config, tx, run.learner.mesh, run.learner.rules)
        try:
            state, _, step = ckpt.restore(target, fallback=True)
            logging.info("SFT warm start restored at step %d from %s", step, ckpt.directory)
            return state, step
        except ckpt_lib.CorruptCheckpointError as e:  # moved aside by restore: train again
            logging.warning("SFT warm start checkpoint unreadable, running SFT again: %s", e)
    state = learner.create_train_state(
        model_config,
        tx,
        seed=run.spec.seed,
        mesh=run.learner.mesh,
        rules=run.learner.rules,
        params=params,
    )
    return state, 0


def _sft_steps(run, model_config, workdir: str, tx, ckpt, state, done: int):
    """SFT steps ``done + 1 .. sft.steps`` (metrics fetched every 100 steps and at checkpoints,
    no sync per step); returns the final state, checkpointed."""
    sft_spec, steps = run.spec.sft, run.spec.sft.steps
    tokens, mask = sft_arrays(run.spec, run.task, run.tokenizer, run.splits.train)
    step_fn = learner.make_sft_step(model_config, tx, run.learner.mesh, run.learner.rules)
    t0, pending = time.time(), []
    resume = done if done else None
    with log_lib.MetricsWriter(
        workdir, tensorboard=False, filename="sft_metrics.jsonl", resume_step=resume
    ) as w:
        for i in range(done, steps):
            batch = sft_batches(tokens, mask, sft_spec.batch_size, i, run.spec.seed)
            if run.spec.packing.enabled:  # several demonstrations per row
                batch = packing.pack_batch(_with_mask(batch), run.spec.packing.width or None)
            state, m = step_fn(state, batch)
            pending.append(m)
            n = i + 1
            save = n % sft_spec.checkpoint_every == 0 or n == steps
            try:
                if run.interrupt is not None and n < steps:
                    run.interrupt()
            except Interrupted as e:
                _write_sft_metrics(w, pending, n, steps, t0)
                ckpt.save(n, state, {"phase": "sft"}, force=True)
                ckpt.wait()
                distributed.barrier("mojax_preempted_saved")  # all committed before any exits
                raise Preempted(
                    e.signum,
                    n,
                    ckpt.step_path(n),
                    f"after SFT step {n} of {steps}",
                    saved_after_s=e.seconds_since_signal(),
                    grace_s=e.grace_s,
                ) from None
            if n % 100 == 0 or save:
                pending = _write_sft_metrics(w, pending, n, steps, t0)
            if save:
                ckpt.save(n, state, {"phase": "sft"}, force=True)
    ckpt.wait()
    return state


def _write_sft_metrics(writer, pending: list, n: int, steps: int, t0: float) -> list:
    """Writes the metrics of SFT steps ``n - len(pending) + 1 .. n`` (one device fetch); returns
    an empty list."""
    if not pending:
        return []
    fetched = jax.device_get(pending)
    for j, mj in enumerate(fetched, start=n + 1 - len(pending)):
        writer.write(j, {f"sft/{k}": v for k, v in mj.items()})
    if writer.active:  # process 0 reports
        loss, took = float(fetched[-1]["loss"]), time.time() - t0
        print(f"SFT {n}/{steps} loss {loss:.4f} ({took:.0f}s)", flush=True)
    return []


def sft_batches(
    tokens: np.ndarray, mask: np.ndarray, batch_size: int, step: int, seed: int
) -> learner.SFTBatch:
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
    return learner.SFTBatch(tokens=tokens[idx], loss_mask=mask[idx])


def _with_mask(batch: learner.SFTBatch) -> learner.SFTBatch:
    """An SFT batch with its ``attention_mask``: 1 up to each row's last loss token (the
    demonstrations are right-padded and end with their last response token)."""
    mask = np.asarray(batch.loss_mask) > 0
    last = np.where(mask.any(1), mask.shape[1] - np.argmax(mask[:, ::-1], axis=1), 0)
    am = (np.arange(mask.shape[1])[None] < last[:, None]).astype(np.int32)
    return dataclasses.replace(batch, attention_mask=am)


# LoRA: the frozen base the adapters train on.


def enabled(run) -> bool:
    return run.learner.model_config.lora is not None


def base_name(spec: RunSpec) -> dict[str, Any]:
    """What a LoRA checkpoint's frozen base is: the run's initial policy and its storage."""
    return {
        "checkpoint": spec.model.checkpoint,
        "variant": "" if spec.model.checkpoint else spec.model.variant,
        "seed": spec.seed,
        "sft_steps": spec.sft.steps,
        "quant": spec.lora.quant,
        "rank": spec.lora.rank,
        "alpha": spec.lora.alpha,
        "targets": list(spec.lora.targets),
    }


def saved_host(run, host) -> dict[str, Any]:
    """The host state a checkpoint saves: ``host``, the run's resolved config (``config``: the
    copy ``python -m mojax.infra.workdir_restore`` rewrites a damaged ``config.json`` from) and, under
    LoRA, the base's name."""
    out = host.to_dict()
    out["config"] = workdir_lib.config_tree(run.spec.resolved)
    if enabled(run):
        out["lora_base"] = base_name(run.spec)
    return out


def with_base(run, workdir: str, state):
    """A restored state with its frozen base attached (itself without LoRA)."""
    if not enabled(run):
        return state
    dense = initial_params(run, workdir)
    return learner.attach_frozen(
        run.learner.model_config, state, dense, run.learner.mesh, run.learner.rules
    )


def reference_params(run, workdir: str, state, resumed: bool):
    """The KL reference: the initial policy (under LoRA: the base with zero-update adapters)."""
    if not resumed:
        return learner.policy_params(state)
    dense = initial_params(run, workdir)
    if not enabled(run):
        return dense
    fresh = learner.create_train_state(
        run.learner.model_config,
        run.learner.tx,
        seed=run.spec.seed,
        mesh=run.learner.mesh,
        rules=run.learner.rules,
        params=dense,
    )
    return lora_lib.merge(fresh.frozen, fresh.params)
