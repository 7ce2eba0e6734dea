"""Tool output -> observation tokens (with truncation inside the markup), and ids -> text.

Host-side helpers of the rollout: what the model sees after a tool call, and how a row's ids are
turned back into text (skipping ids a padded vocabulary has but the tokenizer does not).

Tool and retrieval output is untrusted text: a sandboxed program can print ``<|im_end|>``. Its
tokens never include a control id of the tokenizer (``tokenizer.control_ids``: Qwen's
``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``; a self-built vocabulary's chat markers and
tags). The observation's markup, which the task writes (``<output>…</output>``), keeps its ids.
"""

from __future__ import annotations

from collections import Counter

TRUNCATION_MARK = " ...[truncated]"
# Stands in for the result to find the markup around it (private-use characters: no task strips
# or writes them).
_SLOT = "\ue000\ue001"


def framed_encoder(tokenizer, frame, trusted: bool = False):
    """``body -> ids of frame(body)``, where ``body`` cannot produce a control id.

    The whole text is encoded as before, and that encoding is kept unless it holds more control ids
    than the frame's own markup alone (the body wrote one). Only then is the text encoded in three
    parts: the markup before and after the body as usual, the body with
    ``tokenizer.encode_plain``. So an observation without control-token text gets exactly the ids
    it always had. A frame that is not ``prefix + body + suffix`` (with the body stripped as the
    task strips it) is treated as all body. ``trusted`` (framework-written text, e.g. the
    malformed-call message that names the tool stop), or a tokenizer without ``encode_plain``:
    plain ``tokenizer.encode``.
    """
    encode = lambda text: list(tokenizer.encode(text))
    plain = getattr(tokenizer, "encode_plain", None)
    if trusted or plain is None:
        return lambda body: encode(frame(body))
    control = tokenizer.control_ids
    parts = frame(_SLOT).split(_SLOT)
    prefix, suffix = parts if len(parts) == 2 else ("", "")
    framed = Counter(t for t in encode(prefix) + encode(suffix) if t in control)

    def encode_body(body: str) -> list[int]:
        text = frame(body)
        ids = encode(text)
        if framed >= Counter(t for t in ids if t in control):
            return ids
        end = len(text) - len(suffix)
        if text.startswith(prefix) and text.endswith(suffix) and end >= len(prefix):
            return encode(prefix) + list(plain(text[len(prefix) : end])) + encode(suffix)
        return list(plain(text))

    return encode_body


def encode_observation(
    tokenizer, task, text: str, max_tokens: int, trusted: bool = False
) -> tuple[list[int], bool]:
    """Token ids of ``task.format_observation(text)``, at most ``max_tokens`` (and if it was cut).

    ``text`` never produces a control id of the tokenizer, while the task's markup keeps its ids
    (``framed_encoder``; ``trusted``: framework-written text, encoded as is).

    A long result is shortened inside the observation's own markup (``<output>…</output>`` stays
    well-formed): its head and tail are kept around ``TRUNCATION_MARK`` (a traceback's last line
    says what went wrong), as many characters as fit, found by bisection (O(log len) encodes). A
    hard token cut is the last resort (markup longer than ``max_tokens``).
    """
    encode = framed_encoder(tokenizer, task.format_observation, trusted)

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
