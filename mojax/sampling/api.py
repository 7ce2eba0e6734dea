"""Public sampler entry points: ``generate`` and ``append_and_continue`` (host-side validation).

These check and bucket the inputs on the host (clear errors naming the argument), then call the
compiled cores of ``mojax.sampling.decode``. See ``mojax.sampling`` for the multi-turn recipe.

Shape legend: P prompts, G samples per prompt, B = P*G rows, Tp prompt width, To observation width,
J stop ids per row, R response slots, C cache slots.

Arguments both calls take (they may differ per call):

* ``temperature`` (0.0 = greedy), ``top_p``, ``top_k``, ``min_p``: ``mojax.sampling.processors``;
* ``logprobs``: ``"policy"`` (default; log-softmax of the raw logits at temperature 1, the PPO old
  log-prob) or ``"sampling"`` (under the processed distribution);
* ``draw``: ``"gumbel"`` (default) or ``"inverse_cdf"``: how a token is drawn from the processed
  distribution (the same distribution, another random stream);
* ``min_new_tokens`` (int or per-row, default 0): a row's stop ids cannot be drawn before it has
  this many new tokens in the call (transformers' ``min_new_tokens``: the stop ids' logits are
  ``-inf`` before the processors; the policy log-prob stays that of the raw logits);
* ``force_stop_at`` (int or per-row, default 0 = off): the row's ``force_stop_at``-th new token of
  the call is its first stop id (every other token removed), so it ends with ``STOP`` at exactly
  that many new tokens, e.g. a drawn response-length distribution;
* ``segmented``: attend over growing cache prefixes (faster; False attends over all C slots), and
  ``segment_growth``, the ratio of successive prefix sizes (``buckets.segment_caps``: closer to 1
  reads fewer unused slots per step and compiles more decode loops);
* ``mesh``, ``rules``: shard the batch / heads by the logical axis rules (batch on data, heads on
  tensor).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mojax import distributed
from mojax.models import layouts
from mojax.models.qwen import DEFAULT_LOGICAL_AXIS_RULES, QwenModel
from mojax.sampling import buckets, decode
from mojax.sampling.processors import SamplingParams, uses_stop_controls
from mojax.sampling.state import SamplingOutput, SamplingState


def _per_row(value, name: str, p: int, g: int, dtype) -> np.ndarray:
    """A scalar, a [P] or a [B] array -> a [B] array (prompt-major rows)."""
    a = np.asarray(value, dtype)
    if a.ndim == 0:
        return np.full((p * g,), a, dtype)
    if a.shape == (p * g,):
        return a
    if a.shape == (p,):
        return np.repeat(a, g)
    raise ValueError(f"{name} must be a scalar, [P]={p} or [B]={p * g} values, got {a.shape}")


def stop_controls(min_new_tokens, force_stop_at, stop_ids, max_new, p, g, rows=None):
    """Checked int32 [B] ``min_new`` and ``stop_at`` arrays (see the module docstring).

    ``rows``: bool [B] rows to check (default all): the rows a call resumes / this process holds.
    """
    min_new = _per_row(min_new_tokens, "min_new_tokens", p, g, np.int32)
    stop_at = _per_row(force_stop_at, "force_stop_at", p, g, np.int32)
    rows = np.ones(min_new.shape, bool) if rows is None else rows
    if min_new[rows].min(initial=0) < 0 or stop_at[rows].min(initial=0) < 0:
        raise ValueError(
            f"min_new_tokens and force_stop_at must be >= 0, got {min_new_tokens}, {force_stop_at}"
        )
    forced = rows & (stop_at > 0)
    bad = forced & ((stop_ids[:, 0] < 0) | (stop_at > max_new) | (min_new >= stop_at))
    if bad.any():
        raise ValueError(
            f"force_stop_at needs a stop id, force_stop_at <= max_new_tokens and min_new_tokens < "
            f"force_stop_at; rows {np.flatnonzero(bad).tolist()} break it"
        )
    return min_new, stop_at


def _controls(stop_token_ids, min_new_tokens, force_stop_at, max_new, g):
    """``(stop_ids [B, J], min_new [B], stop_at [B], stop_controls)`` of a ``generate`` call
    (checked; ``stop_controls`` is ``uses_stop_controls`` of the two arguments)."""
    p = len(max_new) // g
    stop_ids = stop_id_array(stop_token_ids, p, g)
    min_new, stop_at = stop_controls(min_new_tokens, force_stop_at, stop_ids, max_new, p, g)
    controls = uses_stop_controls(min_new_tokens, force_stop_at)
    return jnp.asarray(stop_ids), jnp.asarray(min_new), jnp.asarray(stop_at), controls


def stop_id_array(stop_token_ids, p: int, g: int) -> np.ndarray:
    """``stop_token_ids`` (ids shared by all rows, or a [P, J] / [B, J] array padded with -1) ->
    int32 [B, J] (J >= 1; -1 = unused)."""
    if isinstance(stop_token_ids, Sequence) and all(
        isinstance(t, int | np.integer) for t in stop_token_ids
    ):
        ids = np.asarray(list(stop_token_ids) or [-1], np.int32)
        return np.tile(ids[None], (p * g, 1))
    a = np.asarray(stop_token_ids, np.int32)
    if a.ndim == 2 and a.shape[0] == p * g:
        return a if a.shape[1] else np.full((p * g, 1), -1, np.int32)
    if a.ndim == 2 and a.shape[0] == p:
        return np.repeat(a if a.shape[1] else np.full((p, 1), -1, np.int32), g, axis=0)
    raise ValueError(
        f"stop_token_ids must be a sequence of ints or a [P, J] / [B, J] array, got shape {a.shape}"
    )


def _resolved(model: QwenModel) -> QwenModel:
    """``model`` with its config's execution layouts set for this backend (unchanged when set)."""
    config = layouts.resolve(model.config)
    return model if config is model.config else QwenModel(config=config, params=model.params)


def _check_tokens(name: str, tokens: np.ndarray, mask: np.ndarray, vocab: int):
    real = tokens[mask]
    if real.size and (real.min() < 0 or real.max() >= vocab):
        raise ValueError(f"{name} has ids outside [0, {vocab}): min {real.min()}, max {real.max()}")


def generate(
    model: QwenModel,
    prompt_tokens,
    *,
    key: jax.Array,
    max_new_tokens,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    num_samples: int = 1,
    stop_token_ids=(),
    min_new_tokens=0,
    force_stop_at=0,
    prompt_lengths=None,
    pad_id: int = 0,
    logprobs: str = "policy",
    draw: str = "gumbel",
    max_response_len: int | None = None,
    max_total_len: int | None = None,
    cache_dtype=None,
    min_prompt_bucket: int = 16,
    segmented: bool = True,
    segment_growth: float = 1.25,
    mesh=None,
    rules=DEFAULT_LOGICAL_AXIS_RULES,
) -> SamplingOutput:
    """Samples ``num_samples`` continuations of each prompt in one compiled program.

    Args:
      model: a ``QwenModel`` (params may be sharded on ``mesh``).
      prompt_tokens: int32 [P, Tp], right-padded.
      key: PRNG key; the whole call (and its continuations) is deterministic given it.
      max_new_tokens: int, or [P] / [B] per-row budgets for this call.
      num_samples: G; output rows are prompt-major (row ``p * G + g``).
      stop_token_ids: ids shared by all rows, or a per-row [P, J] / [B, J] array padded with -1
        (the stop token is kept as the row's last token).
      prompt_lengths: int [P] real tokens per prompt (None = all Tp), >= 1. pad_id: after a row.
      max_response_len: R, response slots (default ``max(max_new_tokens)``; larger leaves room
        for appended observations and later turns).
      max_total_len: C, cache slots (default ``Tb + R``, Tb the prompt bucket); fixed across calls,
        one compiled program per (P, G, Tb). A decode step uses one slot, an append ``To``.
      cache_dtype: k/v storage dtype (e.g. ``jnp.bfloat16``); default the model's compute dtype.
      min_prompt_bucket: prompts are padded to ``max(min_prompt_bucket, next_pow2(max length))``.
      others: see the module docstring.

    Returns ``SamplingOutput`` (tokens / logprobs / loss_mask [B, R], lengths [B], finish_reason
    [B], state for ``append_and_continue``).
    """
    model = _resolved(model)
    padded, lengths, max_new, g = _prompt_arrays(
        model, prompt_tokens, prompt_lengths, num_samples, max_new_tokens, min_prompt_bucket
    )
    r, s, caps = _sizes(
        padded.shape[1], max_new, max_response_len, max_total_len, segmented, segment_growth
    )
    stop_ids, min_new, stop_at, controls = _controls(
        stop_token_ids, min_new_tokens, force_stop_at, max_new, g
    )
    params = SamplingParams(temperature, top_k, top_p, min_p, logprobs, draw, controls)
    state = decode.generate_from_arrays(
        model,
        jnp.asarray(padded),
        jnp.asarray(lengths, jnp.int32),
        stop_ids,
        jnp.asarray(max_new),
        key,
        jnp.asarray(pad_id, jnp.int32),
        min_new,
        stop_at,
        num_samples=g,
        max_total_len=s,
        max_response_len=r,
        params=params,
        cache_dtype=None if cache_dtype is None else jnp.dtype(cache_dtype).name,
        caps=caps,
        mesh=mesh,
        rules=tuple(rules) if mesh is not None else (),
    )
    return SamplingOutput.from_state(state)


def _sizes(tb, max_new, max_response_len, max_total_len, segmented, growth):
    """``(R, C, segment caps)`` of a ``generate`` call with prompt bucket ``tb`` (checked)."""
    r = int(max_response_len or max_new.max())
    s = int(max_total_len or tb + r)
    if s < tb + 1:
        raise ValueError(f"max_total_len={s} leaves no slot after the prompt bucket {tb}")
    return r, s, buckets.segment_caps(tb, s, growth=growth) if segmented else (s,)


def _prompt_arrays(model, prompt_tokens, prompt_lengths, num_samples, max_new_tokens, bucket):
    """Checked, bucketed host arrays of a ``generate`` call: ``(padded [P, Tb], lengths [P],
    max_new [B], G)``; a ``ValueError`` names the argument that does not fit."""
    tokens = np.asarray(prompt_tokens)
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"prompt_tokens must be int [P, Tp] with Tp >= 1, got {tokens.shape}")
    p, tp = tokens.shape
    g = int(num_samples)
    if g < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    lengths = np.full((p,), tp, np.int32) if prompt_lengths is None else np.asarray(prompt_lengths)
    if lengths.shape != (p,) or lengths.min() < 1 or lengths.max() > tp:
        raise ValueError(f"prompt_lengths must be [P]={p} ints in [1, {tp}], got {lengths}")
    _check_tokens(
        "prompt_tokens", tokens, np.arange(tp)[None] < lengths[:, None], model.config.vocab_size
    )
    max_new = _per_row(max_new_tokens, "max_new_tokens", p, g, np.int32)
    if max_new.min() < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    tb = buckets.bucket_length(int(lengths.max()), bucket)
    padded = np.zeros((p, tb), np.int32)
    width = min(tp, tb)
    padded[:, :width] = np.where(np.arange(width)[None] < lengths[:, None], tokens[:, :width], 0)
    return padded, lengths, max_new, g


def _append_arrays(model, b, obs_tokens, obs_lengths, resume, max_new_tokens, bucket):
    """Checked, bucketed host arrays of an ``append_and_continue`` call: ``(padded [B, To],
    obs_lengths [B] (0 where not resumed), resume [B], max_new [B])``. The bucket is the same on
    every process (each may fill in only its own rows)."""
    obs = np.asarray(obs_tokens, np.int64)
    if obs.ndim != 2 or obs.shape[0] != b:
        raise ValueError(f"obs_tokens must be int [B={b}, To], got {obs.shape}")
    obs_len = np.asarray(obs_lengths, np.int32)
    res = np.asarray(resume, bool)
    if obs_len.shape != (b,) or res.shape != (b,):
        raise ValueError(f"obs_lengths / resume must be [B={b}], got {obs_len.shape}, {res.shape}")
    if obs_len.min(initial=0) < 0 or obs_len.max(initial=0) > obs.shape[1]:
        raise ValueError(f"obs_lengths must be in [0, To={obs.shape[1]}], got {obs_len}")
    obs_len = np.where(res, obs_len, 0)
    _check_tokens(
        "obs_tokens", obs, np.arange(obs.shape[1])[None] < obs_len[:, None], model.config.vocab_size
    )
    max_new = _per_row(max_new_tokens, "max_new_tokens", b, 1, np.int32)
    if max_new[res].min(initial=1) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    longest = int(distributed.global_max([obs_len.max(initial=0)])[0])
    to = buckets.bucket_length(longest, bucket)
    padded = np.zeros((b, to), np.int32)
    width = min(obs.shape[1], to)
    padded[:, :width] = np.where(np.arange(width)[None] < obs_len[:, None], obs[:, :width], 0)
    return padded, obs_len, res, max_new


def _check_room(end: int, to: int, s: int, long_rows: np.ndarray, r: int) -> None:
    """Raises when the cache (``end`` used of ``s`` slots) cannot take a ``to``-slot append and
    one more step, or when rows ``long_rows`` overflow the ``r`` response slots."""
    if end + to + 1 > s:
        raise ValueError(
            f"max_total_len={s} too small: the cache holds {end} slots and appending a {to}-slot "
            "observation bucket leaves no room to decode; pass a larger max_total_len to generate"
        )
    if long_rows.any():
        raise ValueError(
            f"max_response_len={r} too small for the observations of rows "
            f"{np.flatnonzero(long_rows).tolist()}"
        )


def _row_sharding(mesh, rules):
    """Rows over the mesh's batch axes (None without a mesh)."""
    from mojax import sharding as sharding_lib

    return None if mesh is None else sharding_lib.batch_sharding(mesh, rules, 1)


def append_and_continue(
    model: QwenModel,
    state: SamplingState,
    obs_tokens,
    obs_lengths,
    resume,
    *,
    max_new_tokens,
    min_new_tokens=0,
    force_stop_at=0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    logprobs: str = "policy",
    draw: str = "gumbel",
    min_obs_bucket: int = 8,
    segmented: bool = True,
    segment_growth: float = 1.25,
    mesh=None,
    rules=DEFAULT_LOGICAL_AXIS_RULES,
) -> SamplingOutput:
    """Appends observation tokens to the rows in ``resume`` and decodes them further.

    The observations are written into the existing cache (one batched cached call; no prefix is
    recomputed), recorded in the response buffer with ``loss_mask`` False, and the resumed rows
    sample up to ``max_new_tokens`` more tokens. Rows not in ``resume`` stay as they are (finished).

    Args:
      model: the model that produced ``state``.
      state: ``out.state`` of ``generate`` or of a previous ``append_and_continue``. Its cache is
        donated: do not use this state again (``out.tokens`` etc. of earlier calls stay valid).
      obs_tokens: int [B, To] right-padded observation tokens (To >= 0; the rows' chat-template
        glue such as ``<|im_end|>\\n<|im_start|>user\\n`` belongs here).
      obs_lengths: int [B] real tokens per row (ignored where ``resume`` is False).
      resume: bool [B] rows to continue.
      max_new_tokens: int or [B] budget of this call for the resumed rows.
      others: see the module docstring.
      min_obs_bucket: ``To`` is padded to ``max(min_obs_bucket, next_pow2(max obs length))``.

    Multi-process: each process reads only the rows its devices hold from ``obs_tokens``,
    ``obs_lengths``, ``resume`` and ``max_new_tokens`` (``mojax.distributed.put_rows``; the other
    rows may be anything) and checks only those; the longest observation is agreed on by all.

    Raises:
      ValueError: bad shapes / ids, or when the cache (``max_total_len``) or the response buffer
        (``max_response_len``) cannot hold the observations plus one more token.
    """
    controls = uses_stop_controls(min_new_tokens, force_stop_at)
    params = SamplingParams(temperature, top_k, top_p, min_p, logprobs, draw, controls)
    model = _resolved(model)
    b, r, s = state.batch, state.max_response_len, state.max_total_len
    padded, obs_len, res, max_new = _append_arrays(
        model, b, obs_tokens, obs_lengths, resume, max_new_tokens, min_obs_bucket
    )
    to = padded.shape[1]
    layout = distributed.row_layout(_row_sharding(mesh, rules), b)
    length = layout.read(state.length)  # this process's rows only (0 elsewhere)
    end = int(layout.read(state.cache.end)[int(np.argmax(layout.local))])  # same in every row
    _check_room(end, to, s, res & (length + obs_len + 1 > r), r)
    caps = buckets.segment_caps(0, s, growth=segment_growth) if segmented else (s,)
    stop_ids = layout.read(state.stop_ids)
    min_new, stop_at = stop_controls(
        min_new_tokens, force_stop_at, stop_ids, max_new, b, 1, res & layout.local
    )
    new_state = decode.continue_from_arrays(
        model,
        state.replace(cache=None),
        state.cache,
        *(
            layout.put(x, _row_sharding(mesh, rules))
            for x in (padded, obs_len, res, max_new, min_new, stop_at)
        ),
        params=params,
        caps=caps,
        mesh=mesh,
        rules=tuple(rules) if mesh is not None else (),
    )
    return SamplingOutput.from_state(new_state)


def lower_generate(
    model: QwenModel,
    *,
    prompts: int,
    prompt_len: int,
    num_samples: int,
    max_response_len: int,
    cache_dtype=None,
    min_prompt_bucket: int = 16,
    segmented: bool = False,
    segment_growth: float = 1.25,
    mesh=None,
    rules=DEFAULT_LOGICAL_AXIS_RULES,
):
    """The ``jax.stages.Lowered`` program of a ``generate`` call on ``prompts`` prompts of up to
    ``prompt_len`` tokens (``model.params`` may be ``jax.ShapeDtypeStruct`` with shardings: nothing
    is allocated), e.g. for its ``.compile().memory_analysis()`` (``mojax.rl.dry_run``).

    ``segmented=False`` (the default here) compiles one decode loop over the whole cache instead of
    one per segment: the same cache and buffers, one loop body to compile instead of ~20 (each
    segment's truncated cache copy, at most the full cache's size, is then not counted)."""
    model = _resolved(model)
    tb = buckets.bucket_length(int(prompt_len), min_prompt_bucket)
    b = prompts * num_samples
    s = tb + int(max_response_len)
    i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)
    args = (model, i32(prompts, tb), i32(prompts), i32(b, 1), i32(b))
    with decode._mesh_context(mesh):
        return decode._generate_jit.lower(
            *args,
            jax.random.PRNGKey(0),
            jnp.asarray(0, jnp.int32),
            i32(b),
            i32(b),
            num_samples=num_samples,
            max_total_len=s,
            max_response_len=int(max_response_len),
            params=SamplingParams(1.0, 0, 1.0, 0.0, "policy", "gumbel"),
            cache_dtype=None if cache_dtype is None else jnp.dtype(cache_dtype).name,
            caps=buckets.segment_caps(tb, s, growth=segment_growth) if segmented else (s,),
            mesh=mesh,
            rules=tuple(rules) if mesh is not None else (),
        )
