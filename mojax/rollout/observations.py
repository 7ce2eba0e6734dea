"""Tool output -> observation tokens (with truncation inside the markup), and ids -> text.

Host-side helpers of the rollout: what the model sees after a tool call, and how a row's ids are
turned back into text (skipping ids a padded vocabulary has but the tokenizer does not).
"""

from __future__ import annotations

TRUNCATION_MARK = " ...[truncated]"


def encode_observation(tokenizer, task, text: str, max_tokens: int) -> tuple[list[int], bool]:
    """Token ids of ``task.format_observation(text)``, at most ``max_tokens`` (and if it was cut).

    A long result is shortened inside the observation's own markup (``<output>…</output>`` stays
    well-formed): its head and tail are kept around ``TRUNCATION_MARK`` (a traceback's last line
    says what went wrong), as many characters as fit, found by bisection (O(log len) encodes). A
    hard token cut is the last resort (markup longer than ``max_tokens``).
    """

    def encode(body: str) -> list[int]:
        return list(tokenizer.encode(task.format_observation(body)))

    def shortened(k: int) -> str:  # k characters of text: ceil(k/2) from the head, the rest tail
        head, tail = (k + 1) // 2, k // 2
        return text[:head] + TRUNCATION_MARK + (text[len(text) - tail :] if tail else "")

    ids = encode(text)
    if len(ids) <= max_tokens:
        return ids, False
    lo, hi = 0, len(text)  # shortened(lo) fits (or lo == 0); shortened(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(encode(shortened(mid))) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return encode(shortened(lo))[:max_tokens], True


def decode_ids(tokenizer, ids) -> str:
    """``tokenizer.decode`` that skips ids the tokenizer does not have (a model's padded vocab
    rows, e.g. Qwen's 151936 logits over 151665 tokens, can be sampled by an untrained model)."""
    n = int(tokenizer.vocab_size)
    return tokenizer.decode([int(i) for i in ids if 0 <= int(i) < n])


def malformed_message(stop_text: str) -> str:
    """The observation a malformed call gets (the model learns why nothing ran)."""
    return f"Error: malformed tool call before {stop_text}"
