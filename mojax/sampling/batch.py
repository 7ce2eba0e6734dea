"""Sampler output -> the rollout batch of design.md (prompt + response in one right-padded row).

Shape legend: P prompts, G samples per prompt, B = P*G rows, Tp prompt width, R response slots,
T = Tp + R.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mojax.sampling.state import SamplingOutput


@jax.jit
def _pack(prompt_tokens, prompt_lengths, tokens, logprobs, loss_mask, lengths, pad_id):
    b, r = tokens.shape
    t = prompt_tokens.shape[1] + r
    pos = jnp.arange(t)[None, :]  # [1, T]
    rel = pos - prompt_lengths[:, None]  # index into the response, [B, T]
    in_prompt = rel < 0
    in_resp = (rel >= 0) & (rel < lengths[:, None])
    gather = jnp.clip(rel, 0, r - 1)
    prompt = jnp.pad(prompt_tokens, ((0, 0), (0, r)))  # [B, T]
    resp_tok = jnp.take_along_axis(tokens, gather, axis=1)
    out_tokens = jnp.where(in_prompt, prompt, jnp.where(in_resp, resp_tok, pad_id))
    mask = in_resp & jnp.take_along_axis(loss_mask, gather, axis=1)
    old = jnp.where(mask, jnp.take_along_axis(logprobs, gather, axis=1), 0.0)
    return out_tokens.astype(jnp.int32), mask, old, prompt_lengths + lengths


def rollout_batch(prompt_tokens, prompt_lengths, out: SamplingOutput, num_samples: int, pad_id=0):
    """Concatenates each row's prompt and response into the design.md rollout batch.

    Args:
      prompt_tokens: int [P, Tp] right-padded prompts given to ``generate``.
      prompt_lengths: int [P] (None = all Tp).
      out: the ``SamplingOutput`` of ``generate`` / ``append_and_continue``.
      num_samples: G used in ``generate``.
      pad_id: written after each row's end.

    Returns:
      dict with ``tokens`` int32 [B, T] (prompt + response, right-padded), ``loss_mask`` bool
      [B, T] (True only on sampled response tokens; False on prompt, observations, padding),
      ``old_logprobs`` fp32 [B, T] (the sampler's log-prob of the token at that position, 0 where
      the mask is False), ``lengths`` int32 [B] (prompt + response).
    """
    prompt_tokens = jnp.asarray(prompt_tokens, jnp.int32)
    p, tp = prompt_tokens.shape
    if prompt_lengths is None:
        prompt_lengths = jnp.full((p,), tp, jnp.int32)
    if out.tokens.shape[0] != p * num_samples:
        raise ValueError(
            f"out has {out.tokens.shape[0]} rows, expected P * num_samples = {p * num_samples}"
        )
    tokens, mask, old, lengths = _pack(
        jnp.repeat(prompt_tokens, num_samples, axis=0),
        jnp.repeat(jnp.asarray(prompt_lengths, jnp.int32), num_samples),
        out.tokens,
        out.logprobs,
        out.loss_mask,
        out.lengths,
        jnp.asarray(pad_id, jnp.int32),
    )
    return {"tokens": tokens, "loss_mask": mask, "old_logprobs": old, "lengths": lengths}
