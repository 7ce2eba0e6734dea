"""The learner's batches as typed, frozen pytrees: ``PPOBatch`` (the RL update) and ``SFTBatch``
(the warm start's supervised steps).

Both are ``flax.struct`` dataclasses: a field left ``None`` is absent (no leaf, no argument of the
jitted step), so one class covers the unpacked, packed, KL and corrected batches while each
combination of fields compiles its own step. They are never mutated: a stage that adds or changes
fields returns ``dataclasses.replace(batch, ...)`` (``mojax.rl.step.assemble``, ``pack_batch``, the
recompute of ``old_logprobs``). The PPO batch is built in one place, ``mojax.rl.step.assemble``.

:func:`checked` is the learner's validation of either batch before it is placed and compiled
(shapes against ``tokens``, the rows against the step's divisor, one dtype per field); its
errors name the field (``PPOBatch.advantages``). :func:`shard` places every present field on the
mesh (rows over the batch axes, scalars replicated; ``mojax.sharding.shard_batch``).

Several processes: every process builds and checks the same full host batch (the loop's values are
all-gathered before ``assemble``); :func:`shard` then hands over only the rows its own devices hold
(``jax.make_array_from_process_local_data``), a scalar field is the same on every process, and
nothing here writes files.

Shape legend (``mojax/__init__.py``): B sequences (rows), T tokens per row.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import numpy as np

from mojax import sharding as sharding_lib


@flax.struct.dataclass
class PPOBatch:
    """The PPO update's batch (``docs/architecture.md``, "Data contracts").

    Row ``b = p * G + g`` holds prompt ``p`` then its ``g``-th response, right-padded to ``T``.

    Attributes:
      tokens: int32 [B, T], prompt + response (tool observations included), 0-padded.
      loss_mask: float32 [B, T], 1 only on policy tokens (0 on the prompt, the padding, tool
        observations and rows without gradient).
      old_logprobs: float32 [B, T], log π_old of each token given its prefix on policy tokens, 0
        elsewhere (the sampler's, or the learner's under ``ppo.old_logprobs="recompute"``).
      advantages: float32 [B] (one per sequence) or [B, T] (per token: packed rows).
      attention_mask: int32 [B, T], 1 on every real token (None: all ones).
      clip_eps: float32 [], a method's clip radius (AWPO), replacing ``ppo.clip_low/high``.
      ref_logprobs: float32 [B, T], the frozen reference's log-probs (the KL term).
      is_weights: float32 [B, T], off-policy correction weights (``mojax.learner.correction``).
      segment_ids: int32 [B, T], packed rows: 0 padding, ``s >= 1`` the row's s-th sequence.
      positions: int32 [B, T], packed rows: positions restarting per segment.
    """

    tokens: Any
    loss_mask: Any
    old_logprobs: Any
    advantages: Any
    attention_mask: Any = None
    clip_eps: Any = None
    ref_logprobs: Any = None
    is_weights: Any = None
    segment_ids: Any = None
    positions: Any = None

    def arrays(self) -> dict[str, Any]:
        """The present fields by name (field order)."""
        return present(self)


@flax.struct.dataclass
class SFTBatch:
    """A supervised (warm start) batch of right-padded demonstrations.

    Attributes:
      tokens: int32 [B, T], prompt + demonstration response, 0-padded.
      loss_mask: float32 [B, T], 1 on the demonstration's response tokens.
      attention_mask: int32 [B, T], 1 on every real token (None: all ones; the rows are
        right-padded and causal, so real tokens never attend to the padding).
      segment_ids, positions: int32 [B, T], packed rows (as :class:`PPOBatch`).
    """

    tokens: Any
    loss_mask: Any
    attention_mask: Any = None
    segment_ids: Any = None
    positions: Any = None

    def arrays(self) -> dict[str, Any]:
        """The present fields by name (field order)."""
        return present(self)


Batch = PPOBatch | SFTBatch

#: per-sequence fields: [B] or [B, T] (every other array field is [B, T] or a scalar below)
SEQUENCE_FIELDS = ("advantages",)
#: scalar fields (replicated, not split into mini- and micro-batches)
SCALAR_FIELDS = ("clip_eps",)
_INT_FIELDS = ("tokens", "attention_mask", "segment_ids", "positions")


def present(batch: Batch) -> dict[str, Any]:
    """``{field: value}`` of ``batch``'s fields that are not None, in field order."""
    out = {}
    for f in dataclasses.fields(batch):
        v = getattr(batch, f.name)
        if v is not None:
            out[f.name] = v
    return out


def rows_only(batch: Batch) -> Batch:
    """``batch`` without its scalar fields: every leaf has B rows (to split or permute)."""
    return dataclasses.replace(batch, **{k: None for k in SCALAR_FIELDS if hasattr(batch, k)})


def _shape_error(name: str, k: str, shape, b: int, t: int) -> str | None:
    if k in SCALAR_FIELDS:
        return None if shape == () else f"{name}.{k} must be a scalar, got shape {shape}"
    if k in SEQUENCE_FIELDS:
        if shape in ((b,), (b, t)):
            return None
        return f"{name}.{k} must be [B]={b} or [B, T]={(b, t)}, got {shape}"
    if shape != (b, t):
        return f"{name}.{k} must have the shape of tokens {(b, t)}, got {shape}"
    return None


def checked(batch: Batch, required: tuple[str, ...] = (), row_divisor: int = 1) -> Batch:
    """``batch`` validated for a jitted step and cast to one dtype per field (int32 for the
    token-indexed fields, float32 for the rest), so host batches of any numeric dtype hit the same
    compiled step; device arrays stay on their devices.

    Args:
      batch: a :class:`PPOBatch` or :class:`SFTBatch` of host or device arrays.
      required: optional fields the step needs (e.g. ``ref_logprobs`` with ``ppo.kl_coef != 0``).
      row_divisor: B must be a multiple of it (mini-batches x micro-batches).

    Raises:
      ValueError naming the field (``PPOBatch.<field>``) that is missing or has a wrong shape, or
      the row count that the step cannot split.
    """
    name = type(batch).__name__
    missing = [k for k in required if getattr(batch, k) is None]
    if missing:
        raise ValueError(
            f"{name} is missing required field(s) {missing}; got {list(present(batch))}"
        )
    arrays = {
        k: v if isinstance(v, jax.Array) else np.asarray(v) for k, v in present(batch).items()
    }
    if np.ndim(arrays["tokens"]) != 2:
        raise ValueError(f"{name}.tokens must be [B, T], got shape {np.shape(arrays['tokens'])}")
    b, t = np.shape(arrays["tokens"])
    for k, v in arrays.items():
        error = _shape_error(name, k, np.shape(v), b, t)
        if error:
            raise ValueError(error)
    if b % row_divisor:
        raise ValueError(
            f"{name} has B={b} rows, not a multiple of {row_divisor} (mini-batches x "
            "micro-batches x batch shards of the mesh)"
        )
    if not np.issubdtype(arrays["tokens"].dtype, np.integer):
        raise ValueError(f"{name}.tokens must be an integer array, got {arrays['tokens'].dtype}")
    cast = {
        k: _as_dtype(v, np.int32 if k in _INT_FIELDS else np.float32) for k, v in arrays.items()
    }
    return dataclasses.replace(batch, **cast)


def _as_dtype(x, dtype):
    return x if x.dtype == dtype else x.astype(dtype)


def shard(batch: Batch, mesh, rules) -> Batch:
    """Every present field on ``mesh``: rows over the batch axes, scalars replicated
    (``mojax.sharding.shard_batch``; with several processes each process hands over the rows its
    devices hold, the scalars are the same on every process)."""
    return dataclasses.replace(batch, **sharding_lib.shard_batch(present(batch), mesh, rules))


def shardings(batch: Batch, mesh, rules) -> Batch:
    """The batch's in-shardings: each present field's rows over the batch axes (a scalar
    replicated), None where the field is absent."""
    return dataclasses.replace(
        batch,
        **{
            k: sharding_lib.batch_sharding(mesh, rules, np.ndim(v))
            for k, v in present(batch).items()
        },
    )


def signature(batch: Batch) -> tuple:
    """What one compiled step serves: the batch's class and its present fields with their ranks."""
    return (type(batch).__name__,) + tuple((k, np.ndim(v)) for k, v in present(batch).items())
