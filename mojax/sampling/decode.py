"""Compiled prefill + ``lax.while_loop`` decode, and the resumable append-and-continue step.

One call of ``generate`` is one compiled XLA program per (P, G, prompt bucket, S, R, sampling
params): the P prompts are prefilled once on a cache of exactly the prompt bucket, the cache and
the next-token logits are repeated to the B = P*G rows (``broadcast_cache``), then the decode loop
runs until every row is done, with no host round-trip per token.

Decode segments: the loop is split into segments over cache prefixes of growing size
(``buckets.segment_caps``, x1.25 by default), so a step attends over at most ~1.25x the slots in
use instead of all S (the Tunix "vanilla" sampler attends over the whole cache every step). Each
segment truncates the cache once and writes it back once (``dynamic_update_slice``, in place),
O(log S) copies in all.

Each loop step, for every row still running: draw a token from the current logits
(``processors.sample_step``), append it to the response buffer, mark the row done on a stop id, on
its ``max_new_tokens`` budget or when the buffer / cache is full, then feed the token (finished
rows feed padding with an invalid slot) to get the next logits. The stop token is fed too, so the
cache always holds every response token and a stopped row can be resumed.

Shape legend: P prompts, G samples per prompt, B = P*G rows, Tb prompt bucket, To observation
bucket, R response slots, C cache slots, V vocab, E embed.
"""

from __future__ import annotations

import contextlib
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from mojax.models import fused, layouts
from mojax.models.cache import CACHE_LOGICAL_AXES, KVCache, init_cache, set_rows
from mojax.models.layer_cache import (
    LAYER_CACHE_LOGICAL_AXES,
    LayerKVCache,
    to_layer_major,
    to_stacked,
)
from mojax.models.paged_cache import PagedKVCache
from mojax.models.qwen import Qwen, QwenModel, unstack_layers
from mojax.sampling import state as state_lib
from mojax.sampling.processors import SamplingParams, row_keys, sample_step, stop_bias
from mojax.sampling.state import LENGTH, RUNNING, STOP, SamplingState


def _rules_context(mesh, rules):
    """Logical axis rules inside the trace (the mesh itself is set outside jit, see
    ``_mesh_context``)."""
    return contextlib.nullcontext() if mesh is None else nn.logical_axis_rules(rules)


def _mesh_context(mesh):
    """``jax.set_mesh`` (outside jit): flax's logical constraints only apply under it."""
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def _constrain_cache(cache: KVCache | LayerKVCache) -> KVCache | LayerKVCache:
    """Batch on ("data", "fsdp"), kv heads on "tensor" (no-op outside a mesh + rules context; a
    ``PagedKVCache``, which runs without a mesh, is returned as is)."""
    if isinstance(cache, PagedKVCache):
        return cache
    if isinstance(cache, LayerKVCache):
        axes = LAYER_CACHE_LOGICAL_AXES
        return LayerKVCache(
            k=tuple(nn.with_logical_constraint(a, axes["k"]) for a in cache.k),
            v=tuple(nn.with_logical_constraint(a, axes["v"]) for a in cache.v),
            slot_mask=nn.with_logical_constraint(cache.slot_mask, axes["slot_mask"]),
            end=nn.with_logical_constraint(cache.end, axes["end"]),
        )
    return KVCache(
        **{
            name: nn.with_logical_constraint(getattr(cache, name), axes)
            for name, axes in CACHE_LOGICAL_AXES.items()
        }
    )


def _constrain_rows(state: SamplingState) -> SamplingState:
    """Row-major state arrays sharded on the batch axis like the cache."""
    rows = nn.with_logical_constraint
    return state.replace(
        cache=_constrain_cache(state.cache),
        logits=rows(state.logits, ("batch", "vocab")),
        tokens=rows(state.tokens, ("batch", None)),
        logprobs=rows(state.logprobs, ("batch", None)),
        sampled=rows(state.sampled, ("batch", None)),
    )


def _forward(model: QwenModel, tokens, mask, cache, last_index):
    """Cached call on ``tokens [B, T]``; returns fp32 logits [B, V] at ``last_index [B]`` + cache.

    Only the gathered hidden state is projected to the vocabulary (not all T positions).
    """
    variables = {"params": model.params}
    hidden, cache = model.apply_fn(
        variables, tokens, attention_mask=mask, cache=cache, return_hidden=True
    )
    last = jnp.take_along_axis(hidden, last_index[:, None, None], axis=1)[:, 0]  # [B, E]
    logits = model.apply_fn(variables, last, method=Qwen.logits)  # fp32 [B, V]
    return logits, _constrain_cache(cache)


def _decode_step(model: QwenModel, params: SamplingParams, max_len: int, s: SamplingState):
    """One token for every running row (see the module docstring)."""
    r = s.tokens.shape[1]
    active = ~s.done
    bias = None
    if params.stop_controls:  # static: a call without min_new_tokens / force_stop_at skips it
        bias = stop_bias(s.stop_ids, s.num_new, s.min_new, s.stop_at, s.logits.shape[-1])
    keys = row_keys(s.key, s.row_id, s.length)
    tok, lp = sample_step(s.logits, keys, params, bias=bias, per_row=True)
    tok = jnp.where(active, tok, s.pad_id)
    idx = jnp.where(active, s.length, r)  # out of range -> dropped for finished rows
    length = s.length + active
    num_new = s.num_new + active
    is_stop = active & jnp.any(tok[:, None] == s.stop_ids, axis=-1)
    full = (length >= r) | (s.cache.end + 1 >= max_len)  # no slot left for another step
    hit_len = active & ~is_stop & ((num_new >= s.max_new) | full)
    # finished rows feed token 0 into an invalid slot (never pad_id: it may be outside the vocab,
    # and NaN k/v in an invalid slot would still poison 0 * NaN in a resumed row's attention)
    feed = jnp.where(active, tok, 0)[:, None]
    logits, cache = _forward(model, feed, active[:, None], s.cache, jnp.zeros_like(tok))
    s = s.replace(
        cache=cache,
        logits=jnp.where(active[:, None], logits, s.logits),
        tokens=set_rows(s.tokens, 0, idx, tok),  # one row's write each: no collective
        logprobs=set_rows(s.logprobs, 0, idx, lp),
        sampled=set_rows(s.sampled, 0, idx, jnp.ones_like(active)),
        length=length,
        num_new=num_new,
        done=s.done | is_stop | hit_len,
        finish_reason=jnp.where(is_stop, STOP, jnp.where(hit_len, LENGTH, s.finish_reason)),
        step=s.step + 1,
    )
    return _constrain_rows(s)


def _decode(model, s: SamplingState, params: SamplingParams, caps: tuple[int, ...]):
    """Runs the decode loop segment by segment until every row is done (or the cache is full).

    With ``Layouts.decode_per_layer`` (the CPU and GPU layouts) the loop runs unrolled layers
    (``unstack_layers``, once before the loop: a scanned layer copies its weight slices on every
    token) and carries the cache in the decode layout (``LayerKVCache``: one array per layer, keys
    with the slot axis minor), whose attention reads no slice copies and reduces over non-minor
    axes; the state comes back in the stacked ``KVCache`` layout. Otherwise the model and the cache
    stay as they are.
    """
    if layouts.of(model.config).decode_per_layer:
        model = unstack_layers(model)
        s = s.replace(cache=_constrain_cache(to_layer_major(s.cache)))
    model = fused.for_decode(model)
    max_len = s.cache.max_len
    step = functools.partial(_decode_step, model, params, max_len)
    for cap in caps:
        part = s.replace(cache=state_lib.truncate_cache(s.cache, cap))

        def cond(x, cap=cap):  # every row's end is the same (each step writes one slot in all)
            return jnp.any(~x.done & (x.cache.end < cap))  # one reduction over rows

        part = jax.lax.while_loop(cond, step, part)
        s = _constrain_rows(part.replace(cache=state_lib.write_back_cache(s.cache, part.cache)))
    return _constrain_rows(s.replace(cache=to_stacked(s.cache)))


@functools.partial(
    jax.jit,
    static_argnames=(
        "num_samples",
        "max_total_len",
        "max_response_len",
        "params",
        "cache_dtype",
        "caps",
        "mesh",
        "rules",
    ),
)
def _generate_jit(
    model: QwenModel,
    prompt_tokens: jax.Array,  # int32 [P, Tb]
    prompt_lengths: jax.Array,  # int32 [P]
    stop_ids: jax.Array,  # int32 [B, J]
    max_new: jax.Array,  # int32 [B]
    key: jax.Array,
    pad_id: jax.Array,  # int32 []
    min_new: jax.Array,  # int32 [B]
    stop_at: jax.Array,  # int32 [B]
    *,
    num_samples: int,
    max_total_len: int,
    max_response_len: int,
    params: SamplingParams,
    cache_dtype: str | None,
    caps: tuple[int, ...],
    mesh=None,
    rules=(),
) -> SamplingState:
    """The compiled core of ``generate`` (validated, bucketed arrays in; the final state out)."""
    with _rules_context(mesh, rules):
        p, tb = prompt_tokens.shape
        b = p * num_samples
        mask = jnp.arange(tb)[None, :] < prompt_lengths[:, None]  # right-padded prompts
        cache = _constrain_cache(init_cache(model.config, p, tb, cache_dtype))
        logits, cache = _forward(model, prompt_tokens, mask, cache, prompt_lengths - 1)
        if layouts.of(model.config).decode_per_layer:  # the decode layout (``_decode``), P rows
            cache = _constrain_cache(to_layer_major(cache))
        cache = _constrain_cache(state_lib.broadcast_cache(cache, num_samples, max_total_len))
        s = SamplingState(
            cache=cache,
            logits=jnp.repeat(logits, num_samples, axis=0),
            tokens=jnp.full((b, max_response_len), pad_id, jnp.int32),
            logprobs=jnp.zeros((b, max_response_len), jnp.float32),
            sampled=jnp.zeros((b, max_response_len), bool),
            length=jnp.zeros((b,), jnp.int32),
            num_new=jnp.zeros((b,), jnp.int32),
            max_new=max_new.astype(jnp.int32),
            min_new=min_new.astype(jnp.int32),
            stop_at=stop_at.astype(jnp.int32),
            done=jnp.zeros((b,), bool),
            finish_reason=jnp.full((b,), RUNNING, jnp.int32),
            stop_ids=stop_ids.astype(jnp.int32),
            prompt_lengths=jnp.repeat(prompt_lengths, num_samples),
            row_id=jnp.arange(b, dtype=jnp.int32),
            key=key,
            step=jnp.zeros((), jnp.int32),
            pad_id=jnp.asarray(pad_id, jnp.int32),
        )
        return _decode(model, _constrain_rows(s), params, caps)


@functools.partial(
    jax.jit, static_argnames=("params", "caps", "mesh", "rules"), donate_argnames=("cache",)
)
def _continue_jit(
    model: QwenModel,
    state: SamplingState,  # its cache field is ignored (passed separately, donated)
    cache: KVCache,
    obs_tokens: jax.Array,  # int32 [B, To]
    obs_lengths: jax.Array,  # int32 [B]
    resume: jax.Array,  # bool [B]
    max_new: jax.Array,  # int32 [B]
    min_new: jax.Array,  # int32 [B]
    stop_at: jax.Array,  # int32 [B]
    *,
    params: SamplingParams,
    caps: tuple[int, ...],
    mesh=None,
    rules=(),
) -> SamplingState:
    """The compiled core of ``append_and_continue``: one batched append, then the decode loop."""
    with _rules_context(mesh, rules):
        s = state.replace(cache=cache)
        r = s.tokens.shape[1]
        to = obs_tokens.shape[1]
        obs_lengths = jnp.where(resume, obs_lengths, 0)
        mask = jnp.arange(to)[None, :] < obs_lengths[:, None]  # [B, To]
        logits, cache = _forward(model, obs_tokens, mask, s.cache, jnp.maximum(obs_lengths - 1, 0))
        idx = jnp.where(mask, s.length[:, None] + jnp.arange(to)[None, :], r)
        s = s.replace(
            cache=cache,
            logits=jnp.where((obs_lengths > 0)[:, None], logits, s.logits),
            tokens=set_rows(s.tokens, 0, idx, obs_tokens),
            logprobs=set_rows(s.logprobs, 0, idx, jnp.zeros(idx.shape)),
            sampled=set_rows(s.sampled, 0, idx, jnp.zeros(idx.shape, bool)),
            length=s.length + obs_lengths,
            num_new=jnp.where(resume, 0, s.num_new),
            max_new=jnp.where(resume, max_new, s.max_new),
            min_new=jnp.where(resume, min_new, s.min_new),
            stop_at=jnp.where(resume, stop_at, s.stop_at),
            done=s.done & ~resume,
            finish_reason=jnp.where(resume, RUNNING, s.finish_reason),
        )
        return _decode(model, _constrain_rows(s), params, caps)


def generate_from_arrays(*args, mesh=None, **kwargs) -> SamplingState:
    """The compiled core of ``generate``: validated, bucketed arrays in, the final state out.

    Args: as ``_generate_jit`` (``model, prompt_tokens [P, Tb], prompt_lengths [P], stop_ids [B, J],
    max_new [B], key, pad_id, min_new [B], stop_at [B]`` and the static keywords). Under ``mesh`` the call runs inside
    ``jax.set_mesh`` so the logical sharding constraints of the model and the cache apply.
    """
    with _mesh_context(mesh):
        return _generate_jit(*args, mesh=mesh, **kwargs)


def continue_from_arrays(*args, mesh=None, **kwargs) -> SamplingState:
    """The compiled core of ``append_and_continue`` (``cache`` donated); see
    ``generate_from_arrays``."""
    with _mesh_context(mesh):
        return _continue_jit(*args, mesh=mesh, **kwargs)
