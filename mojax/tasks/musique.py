"""MuSiQue-Ans multi-hop reading comprehension (VPO App. A.2, prompts App. E.1).

Each prompt embeds the question and its 20 paragraphs as ``[idx] (Title: …) text``. The model emits
``<support>`` (paragraph indices; the first four distinct ones count) and ``<answer>``. Reward
``float32 [5]``: ``hop_1..hop_4`` ∈ {0, 1} — whether ``<support>`` cites the paragraph of gold hop
i (``question_decomposition[i].paragraph_support_idx``) — and ``answer_f1`` (best token F1 over
the answer and its aliases, MuSiQue/SQuAD normalisation). GRPO scalar ``(Σ hop_i + 3·F1) / 7``.

mojax decisions: a question with fewer than four hops scores ``missing_hop_value`` (default 0:
there is no gold hop to cite) on the absent hops; in multi-answer sets a ``<response_i>`` block
without an ``<answer>`` block is unparseable (invalid row); the last complete tag block counts.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mojax.tasks.framework import data as data_lib
from mojax.tasks.framework.base import Example, Objective, Task, clean_response
from mojax.tasks.qa import extract_tag, token_f1

__all__ = ["MuSiQueTask", "parse_support", "musique_reward", "format_paragraphs"]

MAX_HOPS = 4
_HEADER = (
    "Read the paragraphs below and answer the multi-hop question. Identify which paragraphs "
    "support your answer.\n\nParagraphs:\n{paragraphs}\n\nQuestion: {question}\n\n"
)
_SINGLE = (
    "First reason about which paragraphs are relevant, then output your supporting paragraph\n"
    "indices and answer.\n"
    "<support>comma-separated paragraph indices (e.g., 3, 7, 12)</support>\n"
    "<answer>your answer</answer>"
)
_MULTI = (
    "Give {m} different answers in <response_i>...</response_i> tags, each with\n"
    "<support>indices</support> and <answer>answer</answer>."
)
_INT = re.compile(r"\d+")


def format_paragraphs(paragraphs: list[dict]) -> str:
    """``[{idx}] (Title: {title}) {paragraph_text}`` per paragraph, one per line (App. E.1)."""
    return "\n".join(
        f"[{p['idx']}] (Title: {p.get('title', '')}) {p.get('paragraph_text', '')}"
        for p in paragraphs
    )


def parse_support(text: str | None) -> list[int]:
    """The first four distinct integers of a ``<support>`` block (VPO caps citations at four)."""
    out: list[int] = []
    for tok in _INT.findall(text or "")[:10_000]:
        v = int(tok[:18])
        if v not in out:
            out.append(v)
            if len(out) == MAX_HOPS:
                break
    return out


def musique_reward(
    response: Any, hops: list[int], answers: list[str], *, missing_hop_value: float = 0.0
) -> np.ndarray:
    """``[hop_1, hop_2, hop_3, hop_4, answer_f1]`` of one response (App. A.2)."""
    text = clean_response(response)
    cited = set(parse_support(extract_tag(text, "support")))
    out = np.full(MAX_HOPS + 1, missing_hop_value, np.float64)
    for i, idx in enumerate(hops[:MAX_HOPS]):
        out[i] = float(idx in cited)
    out[MAX_HOPS] = token_f1(extract_tag(text, "answer"), answers)
    return out


class MuSiQueTask(Task):
    """MuSiQue with objectives ``hop_1..hop_4, answer_f1``; scalar weights ``(1,1,1,1,3)/7``."""

    name = "musique"
    objectives = (
        *(Objective(f"hop_{i}", 0.0, 1.0) for i in range(1, MAX_HOPS + 1)),
        Objective("answer_f1", 0.0, 1.0, success=True),
    )
    scalar_weights = (1 / 7, 1 / 7, 1 / 7, 1 / 7, 3 / 7)

    def __init__(self, missing_hop_value: float = 0.0):
        if missing_hop_value not in (0.0, 1.0):
            raise ValueError(f"missing_hop_value must be 0 or 1; got {missing_hop_value!r}")
        self.missing_hop_value = float(missing_hop_value)

    @staticmethod
    def load(path: str) -> list[Example]:
        """Examples from a MuSiQue-Ans JSONL (``paragraphs``, ``question``,
        ``question_decomposition``, ``answer``, ``answer_aliases``)."""
        out = []
        for i, rec in enumerate(data_lib.read_records(path)):
            missing = [
                k
                for k in ("paragraphs", "question", "question_decomposition", "answer")
                if k not in rec
            ]
            if missing:
                raise ValueError(f"{path}: record {i} lacks MuSiQue keys {missing}")
            out.append(MuSiQueTask.example(rec, str(rec.get("id", f"{path}#{i}"))))
        return out

    @staticmethod
    def example(rec: dict, ex_id: str) -> Example:
        hops = [int(d["paragraph_support_idx"]) for d in rec["question_decomposition"]]
        answers = [str(rec["answer"]), *map(str, rec.get("answer_aliases") or [])]
        header = _HEADER.format(
            paragraphs=format_paragraphs(rec["paragraphs"]), question=rec["question"]
        )
        msgs = ({"role": "user", "content": header + _SINGLE},)
        return Example(ex_id, msgs, {"hops": hops, "answers": answers, "header": header}, rec)

    def messages(self, example: Example, *, num_answers: int | None = None):
        if num_answers is None:
            return [dict(m) for m in example.messages]
        body = example.target["header"] + _MULTI.format(m=int(num_answers))
        return [{"role": "user", "content": body}]

    def parseable(self, answer: str, example: Example) -> bool:
        return extract_tag(answer, "answer") is not None

    def score(self, response: str, example: Example) -> np.ndarray:
        t = example.target
        return musique_reward(
            response, t["hops"], t["answers"], missing_hop_value=self.missing_hop_value
        )
