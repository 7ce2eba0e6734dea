"""``config.dry_run``: compile the run's real steps abstractly and report XLA's memory per device.

Nothing is allocated: the train state (under LoRA with its frozen base) is ``jax.eval_shape``-d with
its shardings, and the two programs a step runs are compiled on the run's mesh (forced host
devices stand in for accelerators: ``XLA_FLAGS=--xla_force_host_platform_device_count=8``):

* the PPO update (``mojax.learner.make_train_step``) on an abstract rollout batch of
  ``B = prompts_per_step x num_samples`` rows of ``T`` tokens, the run's own T: the bucket of the
  longest prompt (``rollout.max_prompt_len``, else measured from the task's data with the run's
  tokenizer) + ``max_response_len``;
* the sampler's programs, as its engine reports them (``protocol.memory_report``, the engine
  module's ``memory_report``; ``mojax.sampling.memory``): the static engine's prefill + decode
  program for the same rows (one decode loop over the whole cache; the run's decode segments each
  work on a truncated copy of the cache, counted as one more cache); the continuous engine's same
  program for ``continuous.slots`` rows instead, plus two chunks of the prompt prefill held while
  their rows enter slots, and with several processes its own full copy of the weights on each
  process's devices, counted as held (``engine_weights``).

Each compiled program's ``memory_analysis()`` is XLA's own buffer assignment for one device:
arguments, outputs, aliased (donated) bytes and temporaries (activations, gradients, logits chunks,
the KV cache and decode buffers, scratch). The report per device: parameters, optimizer state and
frozen base (from the shard shapes), the update's batch and temporaries, the sampler's
temporaries (the KV cache among them, also given on its own), and the peak = the persistent state
+ the larger of the two programs' transient bytes. On the CPU backend the update's temporaries are
what the process allocates when it runs the step (``tests/system/rl/test_dry_run.py`` measures it).

The programs are compiled with the layouts of the backend the dry run runs on
(``mojax.models.layouts.for_backend``): on the CPU the uncached attention runs in query blocks that
hold one block's ``[rows, H, block, T]`` scores at a time, where a GPU's cuDNN attention holds
none, so for a GPU target the attention share of the update's temporaries is an upper bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import numpy as np

from mojax import learner, models
from mojax import sharding as sharding_lib
from mojax.sampling import protocol
from mojax.spec.model_config import qwen_config

if TYPE_CHECKING:
    from mojax.spec import RunSpec

GIB = 1024**3


def prompt_length(spec: RunSpec) -> tuple[int, str]:
    """``(tokens, how)``: the longest prompt the run will see: ``rollout.max_prompt_len``, else
    measured from the task's data with the run's tokenizer (as ``mojax.rl.builders.build_run``
    sizes T), else 1024 when the data cannot be read here."""
    if spec.rollout.max_prompt_len:
        return int(spec.rollout.max_prompt_len), "rollout.max_prompt_len"
    import tempfile

    from mojax.rl import builders

    try:
        task = spec.build_task()
        splits = builders.load_splits(task, spec)
        with tempfile.TemporaryDirectory(prefix="mojax_dry_run_") as tmp:
            tok = builders.build_tokenizer(spec, task, splits, tmp)
            s = spec.task.num_answers or None
            n = max(len(tok.encode(task.build_prompt(ex, tok, num_answers=s))) for ex in splits.all)
        return n, "measured from the data"
    except (OSError, ValueError) as e:
        return 1024, f"assumed (the data could not be read: {type(e).__name__})"


def batch_shape(spec: RunSpec, prompt_len: int | None = None) -> tuple[int, int]:
    """``(B, T)`` of the run's rollout batch: T = the prompt bucket + ``max_response_len``."""
    rc = spec.rollout
    b = int(rc.prompts_per_step) * int(rc.num_samples)
    p = prompt_length(spec)[0] if prompt_len is None else prompt_len
    return b, protocol.bucket_length(p) + int(rc.max_response_len)


def abstract_batch(spec: RunSpec, mesh, rules, prompt_len: int | None = None) -> learner.PPOBatch:
    """The rollout batch as a ``PPOBatch`` of ``jax.ShapeDtypeStruct`` rows over the mesh's batch
    axes."""
    b, t = batch_shape(spec, prompt_len)
    shapes = {
        "tokens": ((b, t), np.int32),
        "attention_mask": ((b, t), np.int32),
        "loss_mask": ((b, t), np.float32),
        "old_logprobs": ((b, t), np.float32),
        "advantages": ((b,), np.float32),
    }
    if spec.ppo.kl_coef:
        shapes["ref_logprobs"] = ((b, t), np.float32)
    return learner.PPOBatch(
        **{
            k: jax.ShapeDtypeStruct(s, d, sharding=sharding_lib.batch_sharding(mesh, rules, len(s)))
            for k, (s, d) in shapes.items()
        }
    )


def compile_train_step(spec: RunSpec, mesh, rules, mc=None, prompt_len: int | None = None):
    """``(compiled, state)``: the PPO update of ``spec`` compiled for the abstract train state."""
    mc = qwen_config(spec, tokenizer=None) if mc is None else mc
    tx = learner.make_optimizer(spec.optimizer)
    state = learner.abstract_train_state(mc, tx, mesh, rules, with_frozen=True)
    batch = abstract_batch(spec, mesh, rules, prompt_len)
    sched = learner.make_schedule(spec.optimizer)
    step = learner.make_train_step(mc, tx, spec.ppo, mesh, rules, lr_schedule=sched)
    return step.jitted(batch).lower(state, batch).compile(), state


def dry_run(spec: RunSpec, sampler: bool = True) -> dict[str, float]:
    """Prints and returns the per-device memory of ``spec``'s run on its mesh (GiB)."""
    mesh = sharding_lib.mesh_from_config(spec.mesh.as_dict())
    rules = spec.rules
    mc = qwen_config(spec, tokenizer=None)  # the vocabulary of tokenizer.vocab_size
    prompt_len, how = prompt_length(spec)
    train, state = compile_train_step(spec, mesh, rules, mc, prompt_len)
    tm = train.memory_analysis()
    persistent = sharding_lib.bytes_per_device((state.params, state.opt_state, state.frozen))
    batch = tm.argument_size_in_bytes - sharding_lib.bytes_per_device(state)
    train_transient = tm.temp_size_in_bytes + tm.output_size_in_bytes - tm.alias_size_in_bytes
    out = {
        "devices": float(mesh.devices.size),
        "params_total": float(models.param_count(mc.replace(lora=None))),
        "params_gib_per_device": sharding_lib.bytes_per_device(state.params) / GIB,
        "optimizer_gib_per_device": sharding_lib.bytes_per_device(state.opt_state) / GIB,
        "frozen_base_gib_per_device": sharding_lib.bytes_per_device(state.frozen) / GIB,
        "batch_gib_per_device": max(batch, 0) / GIB,
        "train_temp_gib_per_device": tm.temp_size_in_bytes / GIB,
        "train_transient_gib_per_device": (train_transient + max(batch, 0)) / GIB,
    }
    peak = persistent + train_transient + max(batch, 0)
    if sampler:  # the engine's own report (``mojax.sampling.memory``)
        held, transient = protocol.memory_report(
            spec.sampler.engine,
            spec,
            spec.engine_options,
            mesh,
            rules,
            state,
            mc,
            prompt_len,
            out,
        )
        persistent, peak = persistent + held, peak + held  # e.g. its own copy of the weights
        peak = max(peak, persistent + transient)
    out["peak_gib_per_device"] = peak / GIB
    if jax.process_index() == 0:  # every process compiles; process 0 reports
        _report(spec, mesh, mc, out, prompt_len, how)
    return out


def _report(spec: RunSpec, mesh, mc, out, prompt_len, how) -> None:
    n_dev, n_proc = int(out["devices"]), jax.process_count()
    procs = f", {n_proc} processes" if n_proc > 1 else ""
    lora = f", LoRA r={mc.lora.rank} base {mc.lora.quant}" if mc.lora is not None else ""
    b, t = batch_shape(spec, prompt_len)
    print(
        f"mojax dry run: mesh {dict(mesh.shape)} ({n_dev} devices{procs}), model "
        f"{spec.model.checkpoint or spec.model.variant} ({out['params_total'] / 1e9:.3f}B "
        f"params, {mc.dtype} compute / {mc.param_dtype} params, remat={mc.remat}{lora})"
    )
    print(f"  rollout batch B={b} x T={t} (longest prompt {prompt_len} tokens, {how})")
    line = protocol.describe(spec.sampler.engine, spec.rollout, spec.engine_options)
    if line:
        print(f"  {line}")
    print("  XLA memory analysis of the compiled update and sampler, per device (GiB):")
    for k, v in out.items():
        if k.endswith("per_device"):
            print(f"  {k.removesuffix('_gib_per_device'):<22} {v:9.3f}")
    print("  train step lowered with explicit shardings: OK (compiled)")
