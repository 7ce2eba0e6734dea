"""ToolRL data: records to examples, and SWiRL-style decomposition of multi-turn dialogues.

AWPO (arXiv:2512.19126), Sec. 4 "Training data", following SWiRL: "a dialogue with K interaction
steps is decomposed into K sub-instances, each conditioned on the full preceding context as input
and supervised with the model's action at that step as the target". In the ToolRL ``rlla_4k`` data
the last user message is the dialogue history (``**Dialogue Records History**`` then ``<user>``,
assistant steps ``<think>`` + ``<tool_call>`` and/or ``<response>``, and ``<obs>`` blocks); the
gold is the next assistant step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mojax.tasks.framework.base import Example

__all__ = ["record_to_example", "dialogue_steps", "swirl_decompose"]

_BLOCK = re.compile(r"<(user|think|tool_call|response|obs)>.*?</\1>", re.DOTALL)
_STEP_TAGS = ("think", "tool_call", "response")


def dialogue_steps(history: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the assistant steps in a dialogue-history text.

    A step starts at a ``<think>`` block (or at a ``<tool_call>``/``<response>`` block not preceded
    by one) and runs over the ``<tool_call>``/``<response>`` blocks that follow it; a ``<user>`` or
    ``<obs>`` block, or the next ``<think>``, ends it.
    """
    spans: list[list[int]] = []
    open_step = False
    for m in _BLOCK.finditer(history):
        tag = m.group(1)
        if tag in _STEP_TAGS:
            if tag == "think" or not open_step:
                spans.append([m.start(), m.end()])
                open_step = True
            else:
                spans[-1][1] = m.end()
        else:
            open_step = False
    return [(a, b) for a, b in spans]


def swirl_decompose(examples: Sequence[Example]) -> list[Example]:
    """SWiRL-style single-step instances of multi-turn dialogues (AWPO's data preparation).

    For an example whose last message (the dialogue history) holds K − 1 assistant steps, returns
    K examples: step j's prompt is the history up to that step (trailing whitespace stripped) and
    its gold is the step's text; the last one is the example itself. Single-step examples pass
    through unchanged. Ids: ``<id>/swirl<j>of<K>`` (j = 1..K − 1); meta gains ``swirl_step``,
    ``swirl_steps`` and ``swirl_source``.
    """
    out: list[Example] = []
    for ex in examples:
        history = str(ex.messages[-1]["content"]) if ex.messages else ""
        spans = dialogue_steps(history)
        k = len(spans) + 1
        for j, (start, end) in enumerate(spans, 1):
            msgs = tuple(dict(m) for m in ex.messages[:-1]) + (
                {"role": ex.messages[-1]["role"], "content": history[:start].rstrip()},
            )
            meta = {**ex.meta, "swirl_step": j, "swirl_steps": k, "swirl_source": ex.id}
            out.append(Example(f"{ex.id}/swirl{j}of{k}", msgs, history[start:end], meta))
        if spans:
            meta = {**ex.meta, "swirl_step": k, "swirl_steps": k, "swirl_source": ex.id}
            out.append(Example(ex.id, ex.messages, ex.target, meta))
        else:
            out.append(ex)
    return out


def record_to_example(rec: dict, index: int, path: str) -> Example:
    """One record of the rlla_4k parquet or of the SFT JSON as an :class:`Example`."""
    if "prompt" in rec and "reward_model" in rec:
        msgs = tuple({"role": m["role"], "content": m["content"]} for m in rec["prompt"])
        gold = rec["reward_model"]["ground_truth"]
        info = rec.get("extra_info") or {}
        ex_id = (
            f"{rec.get('data_source', 'rlla')}/{info.get('split', '')}/{info.get('index', index)}"
        )
    elif "instruction" in rec and "output" in rec:
        msgs = (
            {"role": "system", "content": rec["instruction"]},
            {"role": "user", "content": rec.get("input", "")},
        )
        gold = rec["output"]
        ex_id = f"rlla_sft/{index}"
    else:
        raise ValueError(
            f"{path}: record {index} is neither rlla_4k parquet (prompt, reward_model) nor SFT "
            f"JSON (instruction, input, output); keys: {sorted(rec)}"
        )
    if not isinstance(gold, str):
        raise ValueError(f"{path}: record {index}: ground truth must be a string")
    return Example(ex_id, msgs, gold, {"source": path})
