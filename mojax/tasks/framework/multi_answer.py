"""Multi-answer parsing for VPO and Multi-RLVR (VPO Sec. 3 and App. E).

A multi-answer completion holds ``S`` numbered blocks ``<response_1>…</response_1>`` …
``<response_S>…</response_S>`` (maze: ``<route_i>``). Each block becomes one row of the set; a
missing or unclosed block is an invalid row (VPO App. E: "Closing tags are required on every outer
attempt"), and with ``dedup`` a block identical (after whitespace normalisation) to an earlier valid
block is invalid too (Multi-RLVR dedups identical answers before averaging; methods.md).

Parsing is linear in the completion length (no backtracking regex), so a huge or adversarial
completion cannot stall a reward worker.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

__all__ = ["Block", "parse_blocks", "normalise_block"]

_WS = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True)
class Block:
    """One slot of the set: ``text`` (None when invalid) and why it is invalid."""

    text: str | None
    reason: str | None = None


def normalise_block(text: str) -> str:
    """Whitespace-collapsed, stripped text: the key used by ``dedup``."""
    return _WS.sub(" ", text).strip()


def parse_blocks(response: Any, num_answers: int, *, tag: str = "response", dedup: bool = False):
    """The ``S = num_answers`` blocks of a multi-answer completion, padded with invalid slots.

    Args:
      response: the completion text (anything; non-strings are converted).
      num_answers: ``S``, the number of slots returned.
      tag: block tag stem: ``"response"`` → ``<response_i>``, ``"route"`` → ``<route_i>``.
      dedup: mark later duplicates of an earlier valid block invalid (reason ``"duplicate"``).

    Returns:
      A list of ``S`` :class:`Block`; block ``i`` holds the text between the first
      ``<tag_{i+1}>`` and the first ``</tag_{i+1}>`` after it. Reasons for invalid slots:
      ``"missing"`` (no opening tag), ``"unclosed"`` (no closing tag), ``"duplicate"``.
    """
    if num_answers < 1:
        raise ValueError(f"num_answers must be >= 1; got {num_answers}")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", tag):
        raise ValueError(f"tag must be an identifier-like tag name; got {tag!r}")
    text = "" if response is None else str(response)
    blocks: list[Block] = []
    seen: set[str] = set()
    for i in range(1, num_answers + 1):
        open_tag, close_tag = f"<{tag}_{i}>", f"</{tag}_{i}>"
        start = text.find(open_tag)
        if start < 0:
            blocks.append(Block(None, "missing"))
            continue
        start += len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            blocks.append(Block(None, "unclosed"))
            continue
        body = text[start:end]
        if dedup:
            key = normalise_block(body)
            if key in seen:
                blocks.append(Block(None, "duplicate"))
                continue
            seen.add(key)
        blocks.append(Block(body))
    return blocks
