"""In-graph KV-cached sampler: shared prefill, ``lax.while_loop`` decode, resumable rows.

Single turn::

    out = mojax.sampling.generate(model, prompt_tokens, key=key, max_new_tokens=256,
                                  temperature=1.0, top_p=1.0, top_k=0, num_samples=G,
                                  stop_token_ids=(eos,), prompt_lengths=lengths)
    out.tokens [B, R], out.logprobs [B, R] (fp32 policy log-probs), out.loss_mask [B, R],
    out.lengths [B], out.finish_reason [B] (codes of FINISH_REASONS: 1 "stop", 2 "length")

Rows are prompt-major (row ``p * G + g``). ``temperature=0.0`` is greedy. The log-probs are the
**policy** log-probs ``log_softmax(logits)[token]`` of the raw fp32 logits at temperature 1 (what
the PPO ratio uses), whatever temperature / top-k / top-p the token was drawn with;
``logprobs="sampling"`` switches to the processed distribution.

Multi-turn (tool calls), all rows in one batch::

    out = generate(model, prompts, key=key, max_new_tokens=T_turn, num_samples=G,
                   stop_token_ids=(eos, tool_call_end), max_response_len=R, max_total_len=S)
    while True:
        toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)   # host
        last = toks[np.arange(B), lens - 1]
        resume = (np.asarray(out.finish_reason) == STOP) & (last == tool_call_end) & budget_left
        if not resume.any(): break
        obs, obs_len = run_tools_and_tokenize(toks, lens, resume)        # [B, To], [B]
        out = append_and_continue(model, out.state, obs, obs_len, resume,
                                  max_new_tokens=T_turn, temperature=1.0)
    # out.tokens / out.loss_mask / out.logprobs cover the whole multi-turn response; the PPO batch
    # (prompt + response rows [B, T]) is mojax.rl.step.assemble_batch. mojax.rollout.rollout is
    # this loop, with tools, stop strings and limits.

Size the cache up front: every row advances one slot per decode step of the batch (the loop runs
until the slowest row is done) and ``To`` slots (the observation bucket) per append, so
``max_total_len >= Tb + sum over calls of (max_new_tokens + To)`` never runs out. When the cache
does fill up during decoding, the running rows end with ``finish_reason == LENGTH``; an append
that cannot fit raises a ValueError naming ``max_total_len`` (or ``max_response_len``) before
running. ``append_and_continue`` donates ``out.state``'s cache: continue each state once (arrays
of earlier outputs stay valid). The cache / response layout is in ``mojax.sampling.state``.

Cost model (vs the Tunix "vanilla" sampler): the P prompts are prefilled once and the cache is
repeated to the G samples; decode step ``i`` attends over a growing prefix of the cache (x1.25,
``buckets.segment_caps``) rather than all ``max_total_len`` slots; top-k / top-p thresholds use
a sort-free bisection; one compiled program per (P, G, prompt bucket, R, S, sampling params).
"""

from mojax.sampling.api import append_and_continue, generate, stop_id_array
from mojax.sampling.buckets import bucket_length, next_power_of_two, segment_caps
from mojax.sampling.continuous.engine import ContinuousSampler
from mojax.sampling.decode import continue_from_arrays, generate_from_arrays
from mojax.sampling.processors import SamplingParams, process_logits, sample_step
from mojax.sampling.state import (
    FINISH_REASONS,
    LENGTH,
    RUNNING,
    STOP,
    SamplingOutput,
    SamplingState,
    broadcast_cache,
)
from mojax.sampling.static.engine import InGraphSampler, Sampler

__all__ = [
    "ContinuousSampler",
    "FINISH_REASONS",
    "InGraphSampler",
    "Sampler",
    "LENGTH",
    "RUNNING",
    "STOP",
    "SamplingOutput",
    "SamplingParams",
    "SamplingState",
    "append_and_continue",
    "broadcast_cache",
    "bucket_length",
    "continue_from_arrays",
    "generate",
    "generate_from_arrays",
    "next_power_of_two",
    "process_logits",
    "sample_step",
    "segment_caps",
    "stop_id_array",
]
