"""Assembling the PPO rollout batch (``docs/architecture.md``, "Data contracts") from prompts and sampled responses.

Row ``b = p * G + g`` holds prompt ``p`` followed by its ``g``-th response, right-padded to a fixed
``T`` (so the jitted step sees one shape every step):

* ``tokens`` int32 [B, T]: prompt + response (tool observations included), 0-padded;
* ``attention_mask`` int32 [B, T]: 1 on every real token;
* ``loss_mask`` float32 [B, T]: 1 only on policy-generated response tokens (0 on the prompt, the
  padding and tool observations — the sampler's response mask says which are which);
* ``old_logprobs`` float32 [B, T]: at position t, log π_old(tokens[t] | tokens[<t]) for response
  tokens (from the sampler, fp32), 0 elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def assemble_batch(
    prompt_ids: Sequence[Sequence[int]],
    num_samples: int,
    response_tokens: np.ndarray,
    response_logprobs: np.ndarray,
    response_mask: np.ndarray,
    response_lengths: np.ndarray,
    total_len: int,
) -> dict[str, np.ndarray]:
    """The PPO batch for ``P`` prompts and ``B = P * G`` responses.

    Args:
      prompt_ids: P token lists (unpadded).
      num_samples: G.
      response_tokens, response_logprobs, response_mask: [B, R] from the rollout (prompt-major).
      response_lengths: [B] tokens used in each response row (policy and observation tokens).
      total_len: T >= max prompt length + R.

    Raises:
      ValueError naming the argument whose shape does not fit.
    """
    toks = np.asarray(response_tokens)
    b, r = toks.shape
    p = len(prompt_ids)
    if b != p * num_samples:
        raise ValueError(f"response_tokens has {b} rows; expected P*G = {p}*{num_samples}")
    for name, arr in (("response_logprobs", response_logprobs), ("response_mask", response_mask)):
        if np.shape(arr) != (b, r):
            raise ValueError(f"{name} must be [B, R] = {(b, r)}, got {np.shape(arr)}")
    lengths = np.asarray(response_lengths, np.int64)
    if lengths.shape != (b,) or lengths.min(initial=0) < 0 or lengths.max(initial=0) > r:
        raise ValueError(f"response_lengths must be [B]={b} ints in [0, {r}]")
    plen = np.repeat(np.array([len(x) for x in prompt_ids], np.int64), num_samples)
    if plen.max(initial=0) + r > total_len:
        raise ValueError(f"total_len={total_len} < longest prompt {plen.max()} + R={r}")

    tokens = np.zeros((b, total_len), np.int32)
    for i, ids in enumerate(prompt_ids):
        tokens[i * num_samples : (i + 1) * num_samples, : len(ids)] = np.asarray(ids, np.int32)
    # scatter each response right after its prompt: column j of the response goes to plen + j
    cols = plen[:, None] + np.arange(r)[None, :]  # [B, R]
    live = np.arange(r)[None, :] < lengths[:, None]
    rows = np.broadcast_to(np.arange(b)[:, None], (b, r))
    tokens[rows[live], cols[live]] = toks[live]
    loss_mask = np.zeros((b, total_len), np.float32)
    old_logprobs = np.zeros((b, total_len), np.float32)
    loss_mask[rows[live], cols[live]] = np.asarray(response_mask, np.float32)[live]
    old_logprobs[rows[live], cols[live]] = np.asarray(response_logprobs, np.float32)[live]
    old_logprobs *= loss_mask > 0
    attention_mask = (np.arange(total_len)[None, :] < (plen + lengths)[:, None]).astype(np.int32)
    return {
        "tokens": tokens,
        "attention_mask": attention_mask,
        "loss_mask": loss_mask,
        "old_logprobs": old_logprobs,
    }
