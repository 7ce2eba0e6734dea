"""Sequence packing: several sequences per row of a training batch, no attention across them.

A rollout (or SFT) batch pads every row to the longest one; with ToolRL's ~4k-token prompts and
32-token responses most of each row is real, but with varied lengths much of the batch is padding.
``pack_batch`` moves the real tokens of each row into as few rows of ``width`` tokens as fit
(first-fit decreasing, Johnson 1973), and adds

* ``segment_ids`` int32 [B', W]: ``s >= 1`` on the tokens of a row's ``s``-th sequence, 0 on padding
  (``mojax.models.Qwen``: a token attends only to the earlier tokens of its segment);
* ``positions`` int32 [B', W]: RoPE positions restarting at 0 in each segment;
* per-token ``advantages`` [B', W] (a sequence's advantage on each of its tokens).

Row fields (``loss_mask``, ``old_logprobs``, ``ref_logprobs``, ``is_weights``) move with their tokens. The loss
stays per sequence: ``packed_aggregation_weights`` counts tokens per segment (not per row) and
sequences as segments, so the packed loss and gradient equal the unpacked ones for every
aggregation of ``mojax.learner.losses`` (Dr.GRPO's constant ``L_max`` defaults to the unpacked
``T``: pack with ``width = T``, the default, or set ``ppo.max_len``).

B' is rounded up to a multiple of ``row_multiple`` (mini-batches x micro-batches x batch shards) with
empty rows, so the step gets rows it can split; distinct B' compile distinct steps. Every process
packs the same full host batch the same way (deterministic), then hands over its own rows.

Shape legend: B rows (sequences), T tokens, B' packed rows, W packed width.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from mojax.learner import losses
from mojax.learner.batch import Batch, present

#: [B, T] fields that move with their tokens
ROW_FIELDS = ("tokens", "attention_mask", "loss_mask", "old_logprobs", "ref_logprobs", "is_weights")


def bins_first_fit(lengths: np.ndarray, width: int) -> list[list[int]]:
    """Sequence indices per bin: first-fit decreasing of ``lengths`` into bins of ``width``."""
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = int(lengths[i])
        if n == 0:
            continue
        j = next((j for j, r in enumerate(room) if r >= n), None)
        if j is None:
            bins.append([i])
            room.append(width - n)
        else:
            bins[j].append(i)
            room[j] -= n
    return bins


def pack_batch(batch: Batch, width: int | None = None, row_multiple: int = 1) -> Batch:
    """The packed batch of a right-padded rollout / SFT batch (see the module docstring).

    Args:
      batch: a :class:`PPOBatch` or :class:`SFTBatch`, not packed yet: ``tokens [B, T]``, optional
        ``attention_mask`` (default all ones) and the other [B, T] fields, a PPO batch's
        ``advantages`` [B] or [B, T]; a scalar (``clip_eps``) is kept as it is.
      width: W, tokens per packed row (default T); a sequence longer than W is an error.
      row_multiple: B' is a multiple of it.

    Returns:
      A batch of the same class with every [B, T] field [B', W], ``advantages`` [B', W] and the
      rows' ``segment_ids`` / ``positions``.
    """
    if batch.segment_ids is not None:
        raise ValueError(f"pack_batch: this {type(batch).__name__} is packed already")
    fields = present(batch)
    tokens = np.asarray(batch.tokens)
    b, t = tokens.shape
    width = int(width or t)
    mask = np.asarray(fields.get("attention_mask", np.ones((b, t))), bool)
    if (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError("pack_batch: rows must be right-padded (attention_mask 1s then 0s)")
    lengths = mask.sum(axis=1)
    if lengths.max(initial=0) > width:
        raise ValueError(f"pack_batch: a sequence of {lengths.max()} tokens > width {width}")
    bins = bins_first_fit(lengths, width)
    rows = -(-max(len(bins), 1) // row_multiple) * row_multiple
    src = {k: np.asarray(fields[k]) for k in ROW_FIELDS if k in fields and k != "attention_mask"}
    out = {k: np.zeros((rows, width), v.dtype) for k, v in src.items()}
    out["attention_mask"] = np.zeros((rows, width), np.int32)
    seg = np.zeros((rows, width), np.int32)
    pos = np.zeros((rows, width), np.int32)
    adv_in = fields.get("advantages")
    adv_in = None if adv_in is None else np.asarray(adv_in, np.float32)
    adv = np.zeros((rows, width), np.float32)
    for r, members in enumerate(bins):
        at = 0
        for s, i in enumerate(sorted(members), start=1):
            n = int(lengths[i])
            for k, v in src.items():
                out[k][r, at : at + n] = v[i, :n]
            out["attention_mask"][r, at : at + n] = 1
            seg[r, at : at + n] = s
            pos[r, at : at + n] = np.arange(n)
            if adv_in is not None:
                adv[r, at : at + n] = adv_in[i] if adv_in.ndim == 1 else adv_in[i, :n]
            at += n
    out["segment_ids"], out["positions"] = seg, pos
    if adv_in is not None:
        out["advantages"] = adv
    return dataclasses.replace(batch, **out)


def padding_fraction(attention_mask) -> float:
    """The fraction of a batch's positions that are padding."""
    m = np.asarray(attention_mask)
    return float(1.0 - m.sum() / max(m.size, 1))


def packed_aggregation_weights(
    loss_mask: jax.Array,
    segment_ids: jax.Array,
    agg: str = "token-mean",
    max_len=None,
    num_seqs=None,
) -> jax.Array:
    """``mojax.learner.losses.aggregation_weights`` of packed rows: ``n_b`` (loss tokens of a
    sequence) and ``N`` (sequences with a loss token) count segments, not rows. fp32 [B', W]."""
    if agg == "token-mean":
        return losses.aggregation_weights(loss_mask, agg)
    m = loss_mask.astype(jnp.float32)
    seg = segment_ids.astype(jnp.int32)
    w = seg.shape[1]
    per_seg = jax.vmap(lambda mm, ss: jax.ops.segment_sum(mm, ss, num_segments=w + 1))(m, seg)
    per_seg = per_seg.at[:, 0].set(0.0)  # padding is no sequence
    n_tok = jnp.take_along_axis(per_seg, seg, axis=1)  # [B', W]: loss tokens of the token's seq
    if num_seqs is None:
        num_seqs = jnp.maximum(jnp.sum(per_seg > 0), 1).astype(jnp.float32)
    else:
        num_seqs = jnp.asarray(num_seqs, jnp.float32)
    if agg == "seq-mean-token-mean":
        return m / (jnp.maximum(n_tok, 1.0) * num_seqs)
    if agg == "seq-mean-token-sum":
        return m / num_seqs
    if agg != "seq-mean-token-sum-norm":
        raise ValueError(f"agg={agg!r} is not one of {list(losses.AGGREGATIONS)}")
    norm = float(w if max_len is None else max_len)
    return m / (num_seqs * norm)
