"""Token log-probabilities (and entropies) of a sequence under the Qwen policy, in fp32.

``token_logprobs(config, params, tokens)[b, t] = log π(tokens[b, t] | tokens[b, :t])`` — aligned with
the tokens as the rollout batch contract fixes (``docs/architecture.md``), 0 at t = 0 (no prediction there; the
loss mask is 0 on the prompt anyway). The vocabulary projection is done from the final hidden
states in chunks of ``chunk_size`` positions, the backward pass recomputing each chunk's logits, so
neither the forward nor the backward pass holds the whole ``[B, T, V]`` logits (V = 152k for Qwen):
only ``[B, chunk, V]`` at a time, in fp32. ``chunk_size=None`` projects all positions at once
(fastest for small V). ``remat=False`` keeps the chunks' logits from the forward instead: the
backward skips one of the projection's three matmuls, for ``[n, B, chunk, V]`` of memory (worth it
where the loss positions are few or V small: ``ppo.logprob_remat``).

``need`` ([B, T] bool, aligned with the tokens, e.g. the loss mask) skips the projection of every
chunk in which no row needs a log-prob (``lax.cond``; those positions get 0). With long prompts
and short responses (ToolRL's ~4k-token prompts, 32-token responses) almost every chunk is prompt:
the projection onto V = 152k is then most of the step, and skipping it changes no value that is
used (the chunks that run are computed exactly as before).

Shape legend (``mojax/__init__.py``): B sequences, T tokens, V vocab, E embed; ``Tc`` positions per
chunk, ``n = T / Tc`` chunks.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from mojax.models import Qwen, QwenConfig, QwenModel, layouts
from mojax.models.qwen import head_logits, output_head, unstack_layers


def _logit_terms(logits: jax.Array, targets: jax.Array, entropy: bool, vocab_sharded: bool):
    """fp32 log π(target) [..., Tc] and entropy [..., Tc] (zeros without ``entropy``) from fp32
    logits [..., Tc, V]."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    if vocab_sharded:  # a masked sum keeps vocab-sharded logits sharded (no gather of [B, Tc, V])
        vocab_ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
        picked = jnp.sum(jnp.where(vocab_ids == targets[..., None], logits, 0.0), axis=-1)
    else:  # a gather of the picked logits
        picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    lp = picked - lse
    if not entropy:
        return lp, jnp.zeros_like(lp)
    probs = jnp.exp(logits - lse[..., None])
    return lp, lse - jnp.sum(probs * logits, axis=-1)


def _chunk_terms(
    module: Qwen,
    params: Any,
    hidden: jax.Array,
    targets: jax.Array,
    entropy: bool,
    vocab_sharded: bool,
):
    """fp32 log π(target) [B, Tc] and entropy [B, Tc] from hidden [B, Tc, E]."""
    logits = module.apply({"params": params}, hidden, method=Qwen.logits)  # [B, Tc, V] fp32
    return _logit_terms(logits.astype(jnp.float32), targets, entropy, vocab_sharded)


def _head_terms(config, head, hidden, targets, entropy, vocab_sharded, keep_logits=False):
    """``_chunk_terms`` of the output head alone (what a chunk's gradient needs); with
    ``keep_logits`` also the fp32 logits [B, Tc, V]."""
    logits = head_logits(config, head, hidden).astype(jnp.float32)  # [B, Tc, V]
    lp, ent = _logit_terms(logits, targets, entropy, vocab_sharded)
    return (lp, ent, logits) if keep_logits else (lp, ent)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _chunked_terms(config, entropy, vocab_sharded, remat, head, h, y, live):
    """Log-probs and entropies ``[n, B, Tc]`` of ``n`` chunks of hidden states ``h [n, B, Tc,
    E]`` (chunks not ``live`` give 0), one ``[B, Tc, V]`` logits chunk at a time.

    A custom VJP: the backward pass adds each live chunk's head gradient into one ``[V, E]``
    accumulator (a ``lax.scan`` carry). Differentiating ``lax.map`` over a ``lax.cond`` of a
    closed-over head (the skipped chunks) instead stacks one head gradient per chunk, ``[n, V,
    E]`` (4.7 GiB for 65 chunks of Qwen's 152k vocabulary at E = 128), before summing them.
    ``remat``: the backward recomputes each chunk's logits (one ``[B, Tc, V]`` chunk in memory
    at a time); otherwise the forward keeps every chunk's fp32 logits (``[n, B, Tc, V]``) and the
    backward skips that head matmul, a third of the head's FLOPs."""
    return _chunked_fwd(config, entropy, vocab_sharded, remat, head, h, y, live)[0]


def _chunked_fwd(config, entropy, vocab_sharded, remat, head, h, y, live):
    def chunk(args):
        hc, yc, on = args
        zeros = jnp.zeros(yc.shape, jnp.float32)
        if remat:
            fn = lambda: _head_terms(config, head, hc, yc, entropy, vocab_sharded)
            return jax.lax.cond(on, fn, lambda: (zeros, zeros))
        fn = lambda: _head_terms(config, head, hc, yc, entropy, vocab_sharded, True)
        skip = jnp.zeros((*yc.shape, config.vocab_size), jnp.float32)
        return jax.lax.cond(on, fn, lambda: (zeros, zeros, skip))

    out = jax.lax.map(chunk, (h, y, live))
    if remat:
        return out, (head, h, y, live, None)
    return out[:2], (head, h, y, live, out[2])


def _chunked_bwd(config, entropy, vocab_sharded, remat, res, cts):
    head, h, y, live, logits = res
    g_lp, g_ent = cts

    def chunk_grads(hc, yc, glc, gec, zc):
        if zc is None:  # remat: recompute the chunk's logits
            fn = lambda hd, hh: _head_terms(config, hd, hh, yc, entropy, vocab_sharded)
            return jax.vjp(fn, head, hc)[1]((glc, gec))
        terms = lambda z: _logit_terms(z, yc, entropy, vocab_sharded)
        (d_logits,) = jax.vjp(terms, zc)[1]((glc, gec))
        # the primal product of this vjp is unused: XLA removes it (one head matmul fewer)
        return jax.vjp(lambda hd, hh: head_logits(config, hd, hh), head, hc)[1](d_logits)

    def step(acc, args):
        hc, yc, on, glc, gec, zc = args

        def grads():
            d_head, d_h = chunk_grads(hc, yc, glc, gec, zc)
            return acc + d_head.astype(acc.dtype), d_h

        return jax.lax.cond(on, grads, lambda: (acc, jnp.zeros_like(hc)))

    acc0 = jnp.zeros(head.shape, jnp.promote_types(head.dtype, jnp.float32))
    d_head, d_h = jax.lax.scan(step, acc0, (h, y, live, g_lp, g_ent, logits))
    return d_head.astype(head.dtype), d_h, None, None


_chunked_terms.defvjp(_chunked_fwd, _chunked_bwd)


#: ``compact`` modes of ``logprobs_from_hidden`` (``ppo.logprob_compact``)
COMPACT_MODES = ("off", "rows", "batch")


def _chunked(config, params, hidden, targets, chunk_size, live_of, entropy, vocab_sharded,
             remat):  # fmt: skip
    """``_chunked_terms`` over ``hidden [B, T, E]`` cut into chunks of ``chunk_size`` positions;
    ``live_of(n, pad)`` gives the [n] chunks to project. Returns [B, T] log-probs and entropies."""
    b, t = targets.shape
    n = -(-t // chunk_size)
    pad = n * chunk_size - t
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    y = jnp.pad(targets, ((0, 0), (0, pad)))
    h = jnp.moveaxis(h.reshape(b, n, chunk_size, -1), 1, 0)  # [n, B, Tc, E]
    y = jnp.moveaxis(y.reshape(b, n, chunk_size), 1, 0)  # [n, B, Tc]
    head = output_head(config, params)
    lp, ent = _chunked_terms(config, entropy, vocab_sharded, remat, head, h, y, live_of(n, pad))
    lp = jnp.moveaxis(lp, 0, 1).reshape(b, n * chunk_size)[:, :t]
    ent = jnp.moveaxis(ent, 0, 1).reshape(b, n * chunk_size)[:, :t]
    return lp, ent


def _compacted(config, params, hidden, targets, need_h, chunk_size, entropy, vocab_sharded,
               remat):  # fmt: skip
    """Log-probs and entropies [B, T] of the positions ``need_h`` (hidden-aligned) only: each row's
    needed positions are moved to its front (stable order), projected in chunks while any row has
    one left, and moved back; every other position gets 0. Rows are not mixed (a batch-sharded
    mesh keeps its rows on their devices)."""
    order = jnp.argsort(~need_h, axis=1, stable=True)  # [B, T]: needed positions first
    h = jnp.take_along_axis(hidden, order[..., None], axis=1)
    y = jnp.take_along_axis(targets, order, axis=1)
    count = jnp.max(jnp.sum(need_h, axis=1))  # positions to project in the fullest row

    def live_of(n, pad):
        return jnp.arange(n) * chunk_size < count

    lp, ent = _chunked(config, params, h, y, chunk_size, live_of, entropy, vocab_sharded, remat)
    back = jnp.argsort(order, axis=1)  # the inverse permutation
    lp = jnp.where(need_h, jnp.take_along_axis(lp, back, axis=1), 0.0)
    ent = jnp.where(need_h, jnp.take_along_axis(ent, back, axis=1), 0.0)
    return lp, ent


def logprobs_from_hidden(
    config: QwenConfig,
    params: Any,
    hidden: jax.Array,
    tokens: jax.Array,
    *,
    chunk_size: int | None = None,
    with_entropy: bool = False,
    vocab_sharded: bool = False,
    need: jax.Array | None = None,
    compact: str = "off",
    remat: bool = True,
) -> tuple[jax.Array, jax.Array | None]:
    """Aligned token log-probs [B, T] (and entropies [B, T]) from final hidden states [B, T, E].

    Position t uses the hidden state at t − 1; position 0 gets 0. ``vocab_sharded``: the logits'
    vocab axis is split over devices (tensor parallelism); pick the target logit with a masked sum
    instead of a gather. ``need``: optional [B, T] bool of the positions whose values are used;
    with ``chunk_size``, chunks with none are not projected (their positions get 0). ``compact``
    (with ``need`` and ``chunk_size``; ``COMPACT_MODES``): ``"rows"`` gathers each row's needed
    positions to the front of the row, so only ``ceil(max_b need_b / chunk_size)`` chunks are
    projected whatever the positions (prompts, padding and packed neighbours skipped); ``"batch"``
    gathers the needed positions of all rows together (``ceil(Σ need / chunk_size)`` chunks; on a
    batch-sharded mesh the gather crosses devices); ``"off"``: neither. With compaction the
    positions outside ``need`` get 0. ``remat`` (with ``chunk_size``): the backward pass
    recomputes each chunk's logits; ``False`` keeps all chunks' fp32 logits from the forward
    (``[n, B, Tc, V]`` in memory) and saves a third of the projection's FLOPs.
    """
    module = Qwen(config)
    b, t = tokens.shape
    # next-token targets: hidden[:, s] predicts tokens[:, s + 1]; the last position is discarded.
    targets = jnp.concatenate([tokens[:, 1:], jnp.zeros((b, 1), tokens.dtype)], axis=1)
    if compact not in COMPACT_MODES:
        raise ValueError(f"compact must be one of {COMPACT_MODES}, got {compact!r}")
    compact = compact if need is not None else "off"
    if chunk_size is None or (chunk_size >= t and compact == "off"):
        lp, ent = _chunk_terms(module, params, hidden, targets, with_entropy, vocab_sharded)
    elif need is None:
        live_of = lambda n, pad: jnp.ones((n,), bool)  # noqa: E731
        lp, ent = _chunked(config, params, hidden, targets, chunk_size, live_of, with_entropy,
                           vocab_sharded, remat)  # fmt: skip
    else:
        # hidden position s yields the value of position s + 1: shift to the hidden layout
        need_h = jnp.pad(jnp.asarray(need, bool)[:, 1:], ((0, 0), (0, 1)))
        if compact != "off":
            shape = (1, b * t) if compact == "batch" else (b, t)  # "batch": one row of all
            lp, ent = _compacted(config, params, hidden.reshape(*shape, -1),
                                 targets.reshape(shape), need_h.reshape(shape), chunk_size,
                                 with_entropy, vocab_sharded, remat)  # fmt: skip
            lp, ent = lp.reshape(b, t), ent.reshape(b, t)
        else:

            def live_of(n, pad):
                shifted = jnp.pad(need_h, ((0, 0), (0, pad)))
                return jnp.any(shifted.reshape(b, n, chunk_size), axis=(0, 2))  # [n]

            lp, ent = _chunked(config, params, hidden, targets, chunk_size, live_of,
                               with_entropy, vocab_sharded, remat)  # fmt: skip
    zero = jnp.zeros((b, 1), jnp.float32)
    lp = jnp.concatenate([zero, lp[:, :-1]], axis=1)
    ent = jnp.concatenate([zero, ent[:, :-1]], axis=1) if with_entropy else None
    return lp, ent


def token_logprobs(
    config: QwenConfig,
    params: Any,
    tokens: jax.Array,
    attention_mask: jax.Array | None = None,
    *,
    chunk_size: int | None = None,
    with_entropy: bool = False,
    vocab_sharded: bool = False,
    need: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    positions: jax.Array | None = None,
    lora_rng: jax.Array | None = None,
    compact: str = "off",
    remat_chunks: bool = True,
) -> tuple[jax.Array, jax.Array | None]:
    """Aligned fp32 log π(tokens[:, t] | tokens[:, :t]) [B, T] (+ entropy [B, T]) of the policy.

    Args:
      config: the model config (static).
      params: the model parameters (policy, or the frozen reference for ``ref_logprobs``).
      tokens: int32 [B, T], prompt + response, right-padded.
      attention_mask: [B, T] (default all ones; right padding needs none — causal attention).
      chunk_size: positions per vocabulary-projection chunk (None = all at once).
      with_entropy: also return the per-token entropy of π (for the entropy bonus / metrics).
      vocab_sharded: the vocab axis is split over devices (see ``logprobs_from_hidden``).
      need: optional bool [B, T], the positions whose values are used (e.g. the loss mask):
        chunks with none skip the vocabulary projection and return 0 (see the module docstring).
      segment_ids, positions: int32 [B, T] of packed rows (``mojax.learner.packing``): tokens
        attend within their segment only, positions restart per segment. The value at a
        segment's first position is predicted from the segment before it: it must be out of the
        loss (it is: every packed sequence starts with its prompt).
      lora_rng: a PRNG key for the LoRA adapters' dropout (``config.lora.dropout``; None = off).
      compact: ``"off"`` | ``"rows"`` | ``"batch"``: project only the ``need`` positions, gathered
        per row or over the batch (``logprobs_from_hidden``).
      remat_chunks: with ``chunk_size``, recompute each chunk's logits in the backward pass
        (``False``: keep them all from the forward; ``logprobs_from_hidden``'s ``remat``).
    """
    body = QwenModel(config, params)
    if layouts.of(config).learner_unrolled and config.remat == "none":  # no-op when unrolled
        # the gradient flows back through the split into the stacked parameters. With remat the
        # layers stay scanned: XLA CPU schedules an unrolled model's recomputations early, all
        # layers' activations live at once, and remat would save nothing
        body = unstack_layers(body)
    hidden = Qwen(body.config).apply(
        {"params": body.params},
        tokens,
        attention_mask=attention_mask,
        positions=positions,
        return_hidden=True,
        segment_ids=segment_ids,
        rngs=None if lora_rng is None else {"dropout": lora_rng},
    )
    return logprobs_from_hidden(
        config,
        params,
        hidden,
        tokens,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        vocab_sharded=vocab_sharded,
        need=need,
        compact=compact,
        remat=remat_chunks,
    )
