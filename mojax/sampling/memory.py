"""The engines' part of the dry run (``mojax.rl.dry_run``): their programs compiled abstractly.

Each engine's ``memory_report(spec, mesh, rules, state, model_config, prompt_len, out)`` returns
``(held, transient)``: bytes per device it holds between steps beyond the train state (its own copy
of the weights) and the bytes of a rollout; ``out`` gets the parts (GiB per device). ``spec`` is
the run spec (``config.rollout``, ``config.model.cache_dtype``); ``state`` the abstract train
state; nothing is allocated.

* static (``static_report``): the prefill + decode program of the step's B rows
  (``api.lower_generate``: one decode loop over the whole cache; the run's decode segments each
  work on a truncated copy, counted as one more cache);
* continuous (``mojax.sampling.continuous.engine.memory_report``): the same program for ``continuous.slots``
  rows instead, plus two chunks of the prompt prefill (``compile_prompt_prefill``: ``slots.prefill``
  on ceil(N / G) prompts split over the batch axes) held while their rows enter slots; with
  several processes each process's own engine, compiled on its devices, with its full copy of the
  weights (compute dtype, replicated) counted as held.

Multi-process: every process compiles the same programs on its devices; nothing is gathered.
"""

from __future__ import annotations

import jax
import numpy as np

from mojax import learner, models
from mojax import sharding as sharding_lib
from mojax.sampling import api
from mojax.sampling.buckets import bucket_length
from mojax.sampling.continuous import slots

GIB = 1024**3


def compile_sampler(spec, mesh, rules, state, mc, prompt_len: int):
    """The static engine's prefill + decode program for the step's rows, compiled abstractly."""
    rc = spec.rollout
    params = learner.policy_params(state)
    return api.lower_generate(
        models.QwenModel(mc, params),
        prompts=int(rc.prompts_per_step),
        prompt_len=prompt_len,
        num_samples=int(rc.num_samples),
        max_response_len=int(rc.max_response_len),
        cache_dtype=spec.model.cache_dtype or None,
        mesh=mesh,
        rules=rules,
    ).compile()


def compile_prompt_prefill(spec, mesh, rules, state, mc, prompt_len: int, prompts: int):
    """The continuous engine's prompt prefill (``slots.prefill``) of one chunk of ``prompts``
    prompts, split over the batch axes as ``slots.prefill_rows`` splits them."""
    shards = sharding_lib.num_shards(mesh, rules, "batch")
    p = -(-int(prompts) // shards) * shards
    tb = bucket_length(prompt_len)
    put = lambda shape, dtype: jax.ShapeDtypeStruct(
        shape, dtype, sharding=sharding_lib.batch_sharding(mesh, rules, len(shape))
    )
    model = models.QwenModel(mc, learner.policy_params(state))
    cache_dtype = spec.model.cache_dtype or None
    return slots.prefill.lower(
        model, put((p, tb), np.int32), put((p, tb), np.bool_), put((p,), np.int32),
        cache_dtype=None if cache_dtype is None else np.dtype(cache_dtype).name,
    ).compile()  # fmt: skip


def kv_cache_bytes(spec, mc, mesh, rules, prompt_len: int, rows: int | None = None) -> int:
    """Per device: the KV cache of ``rows`` rows (default ``B``; the continuous engine's
    ``continuous.slots``) of the prompt bucket + the response."""
    rc = spec.rollout
    b = int(rc.prompts_per_step) * int(rc.num_samples) if rows is None else rows
    length = bucket_length(prompt_len) + int(rc.max_response_len)
    rows = -(-b // sharding_lib.batch_divisor(mesh, rules))
    heads = max(1, mc.num_kv_heads // sharding_lib.num_shards(mesh, rules, "kv_heads"))
    item = np.dtype(spec.model.cache_dtype or mc.dtype).itemsize
    return 2 * mc.num_layers * rows * length * heads * mc.head_dim * item


def program_bytes(spec, mesh, rules, state, mc, prompt_len, out, rows=None) -> int:
    """The prefill + decode program's transient bytes plus one more KV cache (``out``: parts)."""
    sm = compile_sampler(spec, mesh, rules, state, mc, prompt_len).memory_analysis()
    kv = kv_cache_bytes(spec, mc, mesh, rules, prompt_len, rows)
    out["kv_cache_gib_per_device"] = kv / GIB
    out["sampler_temp_gib_per_device"] = sm.temp_size_in_bytes / GIB
    return sm.temp_size_in_bytes + sm.output_size_in_bytes + kv


def static_report(spec, mesh, rules, state, mc, prompt_len, out) -> tuple[int, int]:
    """``(0, transient)``: the static engine holds nothing of its own (module docstring)."""
    return 0, program_bytes(spec, mesh, rules, state, mc, prompt_len, out)
