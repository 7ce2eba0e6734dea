"""Multi-hop QA with search (NQ / HotpotQA, Search-R1 format; ParetoPO Sec. 4).

The model reasons in ``<think>``, calls the retriever with ``<search>query</search>`` (stop
string ``</search>``), reads ``<information>…</information>`` and answers in ``<answer>…</answer>``
(the last complete block counts). ``r_task`` is the normalised exact match against the alias list
(Search-R1's reward; ``metric="f1"`` switches to token F1), ``r_tool`` is external (ParetoPO Eq. 4).

The answer normalisation is SQuAD's (lowercase, drop punctuation, drop articles a/an/the, collapse
whitespace), which is also MuSiQue's official one.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax.tasks.framework import data as data_lib
from mojax.tasks.framework.base import Example, Objective, Task, clean_response

__all__ = [
    "normalize_answer",
    "exact_match",
    "token_f1",
    "extract_tag",
    "format_passages",
    "QATask",
    "SEARCH_R1_TEMPLATE",
]

SEARCH_R1_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times as "
    "your want. If you find no further external knowledge needed, you can directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>. Question: {question}\n"
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: Any) -> str:
    """SQuAD / MuSiQue normalisation: lowercase, no punctuation, no articles, single spaces."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _aliases(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def exact_match(pred: str | None, golds: str | Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised alias."""
    if pred is None:
        return 0.0
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _aliases(golds)))


def token_f1(pred: str | None, golds: str | Sequence[str]) -> float:
    """Best token F1 over the aliases (SQuAD F1 on normalised tokens)."""
    if pred is None:
        return 0.0
    p_tokens = normalize_answer(pred).split()
    best = 0.0
    for g in _aliases(golds):
        g_tokens = normalize_answer(g).split()
        if not p_tokens or not g_tokens:
            best = max(best, float(p_tokens == g_tokens))
            continue
        common = collections.Counter(p_tokens) & collections.Counter(g_tokens)
        n = sum(common.values())
        if n == 0:
            continue
        precision, recall = n / len(p_tokens), n / len(g_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def extract_tag(text: Any, tag: str, last: bool = True) -> str | None:
    """Content of the last (or first) complete ``<tag>…</tag>`` block, or None."""
    text = "" if text is None else str(text)
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    if last:
        end = text.rfind(close_t)
        if end < 0:
            return None
        start = text.rfind(open_t, 0, end)
        return None if start < 0 else text[start + len(open_t) : end]
    start = text.find(open_t)
    if start < 0:
        return None
    end = text.find(close_t, start + len(open_t))
    return None if end < 0 else text[start + len(open_t) : end]


def format_passages(passages: Sequence[tuple[str, str]]) -> str:
    """Search-R1's retrieval text: ``Doc i(Title: title) text`` per passage, one per line."""
    return "".join(f"Doc {i + 1}(Title: {t}) {x}\n" for i, (t, x) in enumerate(passages))


def _golds(rec: dict) -> list[str] | None:
    for key in ("golden_answers", "answers", "answer"):
        if key in rec:
            v = rec[key]
            return [str(a) for a in v] if isinstance(v, (list, tuple)) else [str(v)]
    rm = rec.get("reward_model")
    if isinstance(rm, dict) and isinstance(rm.get("ground_truth"), dict):
        target = rm["ground_truth"].get("target")
        if target is not None:
            return [str(a) for a in (target if isinstance(target, (list, tuple)) else [target])]
    return None


class QATask(Task):
    """Search-augmented QA with objectives ``(r_task, r_tool)``; scalar ``w = (0.6, 0.4)``.

    Args:
      metric: ``"em"`` (default, Search-R1 / ParetoPO) or ``"f1"`` for ``r_task``.
    """

    name = "qa"
    objectives = (
        Objective("r_task", 0.0, 1.0, success=True),
        Objective("r_tool", 0.0, 1.0, external=True),
    )
    scalar_weights = (0.6, 0.4)
    tool_stop = "</search>"

    def __init__(self, metric: str = "em"):
        if metric not in ("em", "f1"):
            raise ValueError(f"metric must be 'em' or 'f1'; got {metric!r}")
        self.metric = metric

    def make_tool(self, rollout, splits):
        """A Search-R1 retrieval server (``rollout.retrieval_url``) or, without one, BM25 over the
        titled paragraphs the loaded examples carry (HotpotQA's ``context``)."""
        from mojax.rollout import tools

        if rollout.retrieval_url:
            return tools.RetrievalClient(rollout.retrieval_url, timeout_s=rollout.tool_timeout_s)
        corpus = {}
        for ex in (splits.train + splits.validation) if splits is not None else []:
            for para in (ex.meta or {}).get("context") or ():
                if isinstance(para, (list, tuple)) and len(para) == 2:
                    title, sents = para
                    text = " ".join(sents) if isinstance(sents, (list, tuple)) else str(sents)
                    corpus[(str(title), text)] = None
        if not corpus:
            raise ValueError(
                "config.rollout.retrieval_url: the qa task needs a retrieval server or examples "
                "that carry a 'context' corpus"
            )
        return tools.BM25Retriever([f"{t}\n{x}" for t, x in corpus])

    def load(self, path: str) -> list[Example]:
        """Examples from HotpotQA / Bamboogle / NQ JSONL (``question`` + ``answer`` or
        ``golden_answers``) or a Search-R1 parquet (``reward_model.ground_truth.target``)."""
        out = []
        for i, rec in enumerate(data_lib.read_records(path)):
            golds = _golds(rec)
            question = rec.get("question")
            if question is None and isinstance(rec.get("prompt"), list):
                question = None  # the Search-R1 parquet carries its prompt ready-made
                msgs = tuple({"role": m["role"], "content": m["content"]} for m in rec["prompt"])
            elif question is not None:
                msgs = ({"role": "user", "content": SEARCH_R1_TEMPLATE.format(question=question)},)
            else:
                msgs = None
            if golds is None or msgs is None:
                raise ValueError(
                    f"{path}: record {i} needs 'question' (or 'prompt') and 'answer' / "
                    f"'golden_answers'; keys: {sorted(rec)}"
                )
            ex_id = str(rec.get("_id", rec.get("id", f"{path}#{i}")))
            out.append(Example(ex_id, msgs, tuple(golds), rec))
        return out

    def parse_tool_call(self, text: str) -> str | None:
        """The query of the last ``<search>…</search>`` in ``text``, or None."""
        q = extract_tag(text, "search")
        return None if q is None or not q.strip() else q.strip()

    def format_observation(self, result_text: str) -> str:
        """Search-R1's observation: ``\\n\\n<information>…</information>\\n\\n``."""
        return f"\n\n<information>{str(result_text).strip()}</information>\n\n"

    def count_tool_calls(self, response: str) -> int:
        return str(response).count("</search>")

    def score(self, response: str, example: Example) -> np.ndarray:
        text = clean_response(response)
        pred = extract_tag(text, "answer")
        fn = exact_match if self.metric == "em" else token_f1
        return np.array([fn(pred, example.target), 0.0])
