"""The sampler's loop carry (``SamplingState``), its outputs and the cache reshaping helpers.

Layout of one row ``b`` (B = P*G rows, prompt-major: row ``p*G + g``)::

    cache slots  [0, Tb)                    prompt bucket (slots past the prompt length invalid)
                 [Tb, end)                   one slot per decode step (and per appended chunk token);
                                             slots of steps where the row was finished are invalid
    response     tokens[b, :length[b]]       sampled tokens and appended observation tokens in order
                 sampled[b, :length[b]]      True on sampled (policy) tokens = the PPO loss mask
                 logprobs[b, :length[b]]     fp32 log-prob of each sampled token (0 elsewhere)

Every token of ``tokens[b, :length[b]]`` is already in the cache (the loop feeds each sampled token,
the stop token included, before stopping), and ``logits[b]`` are the next-token logits after it,
so a row can be resumed by appending more tokens (``append_and_continue``) or simply by sampling
again. All rows share the write position ``end`` (= ``cache.end``, equal across rows), which keeps
the cache shape static and the appends one batched call.

Shape legend: B rows, R response slots, C cache slots, V vocab, J stop ids per row.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from mojax.models.cache import KVCache
from mojax.models.layer_cache import LayerKVCache

#: ``finish_reason`` codes. RUNNING: not finished (only seen while decoding); STOP: sampled one of
#: the row's stop ids (the stop token is the last token of the row); LENGTH: reached
#: ``max_new_tokens`` in this call, or the response buffer / cache is full.
RUNNING, STOP, LENGTH = 0, 1, 2
FINISH_REASONS = ("running", "stop", "length")


@flax.struct.dataclass
class SamplingState:
    """Everything the decode loop carries; returned by ``generate`` for resumption.

    Attributes:
      cache: the ``KVCache`` (k/v [L, B, C, K, D]); ``cache.end`` is equal across rows.
      logits: fp32 [B, V] next-token logits of each row (after its last token).
      tokens: int32 [B, R] response tokens (``pad_id`` after ``length``).
      logprobs: fp32 [B, R] log-prob of each sampled token (0 on observations and padding).
      sampled: bool [B, R] True on sampled tokens (the loss mask), False on observations.
      length: int32 [B] used response slots.
      num_new: int32 [B] tokens sampled by the current call (reset on resume).
      max_new: int32 [B] per-row budget of the current call.
      min_new: int32 [B] the row's stop ids cannot be drawn before this many new tokens of the
        current call (transformers' ``min_new_tokens``; 0 = off).
      stop_at: int32 [B] the row's ``stop_at``-th new token of the current call is forced to its
        first stop id (0 = off).
      done: bool [B].
      finish_reason: int32 [B] (``RUNNING``, ``STOP``, ``LENGTH``).
      stop_ids: int32 [B, J] per-row stop token ids (-1 = unused).
      prompt_lengths: int32 [B] real prompt tokens per row.
      row_id: int32 [B] each row's id ``p * G + g`` (its random stream; see ``key``).
      key: the PRNG key of the call; row ``b`` draws the token at response position ``i`` with
        ``processors.row_keys``: ``fold_in(fold_in(key, row_id[b]), i)``, whatever its slot.
      step: int32 [] decode steps run so far (across calls).
      pad_id: int32 [] written after a row's end.
    """

    cache: KVCache
    logits: jax.Array
    tokens: jax.Array
    logprobs: jax.Array
    sampled: jax.Array
    length: jax.Array
    num_new: jax.Array
    max_new: jax.Array
    min_new: jax.Array
    stop_at: jax.Array
    done: jax.Array
    finish_reason: jax.Array
    stop_ids: jax.Array
    prompt_lengths: jax.Array
    row_id: jax.Array
    key: jax.Array
    step: jax.Array
    pad_id: jax.Array

    @property
    def batch(self) -> int:
        return self.tokens.shape[0]

    @property
    def max_response_len(self) -> int:
        return self.tokens.shape[1]

    @property
    def max_total_len(self) -> int:
        return self.cache.max_len


@dataclasses.dataclass(frozen=True)
class SamplingOutput:
    """What ``generate`` / ``append_and_continue`` return.

    Attributes:
      tokens: int32 [B, R] response tokens, ``pad_id`` after ``lengths`` (rows prompt-major).
      logprobs: fp32 [B, R] policy log-prob of each sampled token (0 elsewhere).
      loss_mask: bool [B, R] True on sampled tokens, False on appended observations and padding.
      lengths: int32 [B] response length (sampled + appended tokens, the stop token included).
      finish_reason: int32 [B] codes of ``FINISH_REASONS`` (``STOP`` = 1, ``LENGTH`` = 2).
      state: the ``SamplingState`` to pass to ``append_and_continue`` (its cache is donated there:
        continue a state at most once).
    """

    tokens: jax.Array
    logprobs: jax.Array
    loss_mask: jax.Array
    lengths: jax.Array
    finish_reason: jax.Array
    state: SamplingState

    @classmethod
    def from_state(cls, state: SamplingState) -> SamplingOutput:
        return cls(
            tokens=state.tokens,
            logprobs=state.logprobs,
            loss_mask=state.sampled,
            lengths=state.length,
            finish_reason=state.finish_reason,
            state=state,
        )

    def finish_reason_names(self) -> list[str]:
        """Host-side names of ``finish_reason`` (one device fetch)."""
        return [FINISH_REASONS[int(c)] for c in np.asarray(self.finish_reason)]

    @property
    def last_tokens(self) -> jax.Array:
        """int32 [B]: each row's last token (the stop id when it finished with ``STOP``)."""
        idx = jnp.maximum(self.lengths - 1, 0)[:, None]
        return jnp.take_along_axis(self.tokens, idx, axis=1)[:, 0]


# --------------------------------------------------------------------------------------------------
# cache reshaping (pure, inside jit)


def broadcast_cache(cache: KVCache | LayerKVCache, num_samples: int, max_len: int):
    """Repeats each row ``num_samples`` times (prompt-major) and pads the slots to ``max_len``.

    The prefill runs on P rows and a cache of exactly the prompt bucket; this turns it into the B =
    P*G rows x C slots decode cache (one copy, shared prefill). Either cache layout.
    """
    return cache.broadcast(num_samples, max_len)


def truncate_cache(cache: KVCache | LayerKVCache, cap: int) -> KVCache | LayerKVCache:
    """The first ``cap`` slots of every row (a decode segment's working cache)."""
    return cache.truncate(cap)


def write_back_cache(full: KVCache | LayerKVCache, part: KVCache | LayerKVCache):
    """Writes a segment's cache (the first ``cap`` slots) back into the full cache, in place."""
    return full.write_back(part)
