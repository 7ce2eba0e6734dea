"""Retrieval tools for ``<search>`` calls: BM25 over a local corpus, and a Search-R1 server client.

Both return top-k passages formatted exactly as Search-R1 shows them to the model
(``search_r1/llm_agent/generation.py: _passages2string``)::

    Doc 1(Title: <title>) <text>
    Doc 2(Title: <title>) <text>

where a corpus entry's ``contents`` is ``"<title>\\n<text>"`` (first line = title, as in the
Search-R1 wiki-18 corpus). The server protocol is Search-R1's ``retrieval_server.py``: ``POST
/retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}``, answered by ``{"result":
[[{"document": {"id": ..., "contents": ...}, "score": ...}, ...], ...]}`` (one list per query).
"""

import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from mojax.rollout.tools.result import ToolResult

_MAX_RESPONSE_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class Passage:
    """One retrieved passage: Search-R1's ``contents`` split into title and text."""

    title: str
    text: str
    score: float = 0.0
    id: str = ""

    @classmethod
    def from_contents(cls, contents: str, score: float = 0.0, id: str = "") -> "Passage":
        """Search-R1's split: the first line is the title, the rest the text."""
        title, _, text = contents.partition("\n")
        return cls(title=title, text=text, score=float(score), id=str(id))


def format_passages(passages: Sequence[Passage]) -> str:
    """Search-R1's observation text: ``"Doc {i}(Title: {title}) {text}\\n"`` per passage."""
    return "".join(f"Doc {i + 1}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages))


def _as_passage(entry, index: int) -> Passage:
    if isinstance(entry, Passage):
        return entry
    if isinstance(entry, str):
        return Passage.from_contents(entry, id=str(index))
    if isinstance(entry, dict):
        if "contents" in entry:
            return Passage.from_contents(entry["contents"], id=str(entry.get("id", index)))
        if "title" in entry and "text" in entry:
            return Passage(title=entry["title"], text=entry["text"], id=str(entry.get("id", index)))
    raise ValueError(
        f"corpus[{index}]: expected a Passage, a 'title\\ntext' string or a dict with 'contents' "
        f"or 'title'+'text', got {type(entry).__name__}"
    )


def _check_topk(topk) -> int:
    if not isinstance(topk, int) or isinstance(topk, bool) or topk <= 0:
        raise ValueError(f"topk must be a positive int, got {topk!r}")
    return topk


class BM25Retriever:
    """BM25 (``bm25s``, Lucene variant) over an in-memory corpus.

    Score (Lucene; Kamphuis et al. 2020): ``sum_t idf(t) * tf / (tf + k1 (1 - b + b |d| / avgdl))``
    with ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` (no ``(k1 + 1)`` factor: rank-preserving).

    Passages are indexed on ``title + " " + text`` with English stopwords removed; queries use the
    same tokenizer and vocabulary. Passages with score 0 (no query term in common) are not returned.

    Args:
      corpus: passages: ``Passage``, ``"title\\ntext"`` strings or dicts (``contents`` or
        ``title``/``text``).
      topk: default number of passages per query (Search-R1 uses 3).
      k1, b: BM25 parameters.
    """

    def __init__(self, corpus: Sequence, topk: int = 3, k1: float = 1.5, b: float = 0.75):
        import bm25s  # heavy import (numpy, scipy) only when a retriever is built
        from bm25s.tokenization import Tokenizer

        self.passages = [_as_passage(e, i) for i, e in enumerate(corpus)]
        if not self.passages:
            raise ValueError("BM25Retriever: corpus is empty")
        self.topk = _check_topk(topk)
        self._tokenizer = Tokenizer(stopwords="en")
        texts = [f"{p.title} {p.text}" for p in self.passages]
        tokens = self._tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index(tokens, show_progress=False)

    def search(self, queries: Sequence[str], topk: int | None = None) -> list[list[Passage]]:
        """Top-``topk`` passages (best first) for each query."""
        if isinstance(queries, str):
            raise TypeError("BM25Retriever.search: queries must be a list of strings, not a str")
        k = min(_check_topk(self.topk if topk is None else topk), len(self.passages))
        if not queries:
            return []
        ids = self._tokenizer.tokenize(
            list(queries), update_vocab=False, return_as="ids", show_progress=False
        )
        docs, scores = self._bm25.retrieve(ids, k=k, show_progress=False)
        return [
            [
                dataclasses.replace(self.passages[int(d)], score=float(s))
                for d, s in zip(row_docs, row_scores)
                if s > 0
            ]
            for row_docs, row_scores in zip(docs, scores)
        ]

    def run(self, query: str) -> ToolResult:
        """One ``<search>`` call: the formatted top-k passages, or an error for an empty query."""
        start = time.monotonic()
        if not isinstance(query, str) or not query.strip():
            return ToolResult(
                output="Error: empty search query", error="empty search query", exit_reason="error"
            )
        passages = self.search([query])[0]
        output = format_passages(passages) if passages else "No results found.\n"
        return ToolResult(output=output, duration_s=time.monotonic() - start)


class RetrievalClient:
    """HTTP client for a Search-R1-style retrieval server (``POST /retrieve``).

    Never raises on server trouble from ``run``: a refused connection, timeout, HTTP error status or
    malformed JSON becomes ``ToolResult(error=..., exit_reason="error" | "timeout")``, so a rollout
    continues with an observation that says the search failed.

    Args:
      url: the endpoint, e.g. ``"http://127.0.0.1:8000/retrieve"``.
      topk: passages per query.
      timeout_s: socket timeout per request.
    """

    def __init__(self, url: str, topk: int = 3, timeout_s: float = 10.0):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"RetrievalClient: url must be an http(s) URL, got {url!r}")
        if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"RetrievalClient: timeout_s must be positive, got {timeout_s!r}")
        self.url = url
        self.topk = _check_topk(topk)
        self.timeout_s = float(timeout_s)

    def search(self, queries: Sequence[str]) -> list[list[Passage]]:
        """Top-k passages per query; raises ``RetrievalError`` (or ``TimeoutError``) on failure."""
        if isinstance(queries, str):
            raise TypeError("RetrievalClient.search: queries must be a list of strings, not a str")
        payload = {"queries": list(queries), "topk": self.topk, "return_scores": True}
        request = urllib.request.Request(
            self.url,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read(_MAX_RESPONSE_BYTES + 1)
        except TimeoutError:
            raise TimeoutError(f"retrieval server timed out after {self.timeout_s:g} s") from None
        except urllib.error.HTTPError as e:
            raise RetrievalError(f"retrieval server answered HTTP {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise TimeoutError(
                    f"retrieval server timed out after {self.timeout_s:g} s"
                ) from None
            raise RetrievalError(f"retrieval server unreachable: {e.reason}") from None
        if len(body) > _MAX_RESPONSE_BYTES:
            raise RetrievalError(f"retrieval response larger than {_MAX_RESPONSE_BYTES} bytes")
        try:
            results = json.loads(body)["result"]
            if not isinstance(results, list) or len(results) != len(payload["queries"]):
                raise ValueError(f"expected {len(payload['queries'])} result lists")
            return [[self._passage(item) for item in row] for row in results]
        except (ValueError, KeyError, TypeError) as e:
            raise RetrievalError(f"malformed retrieval response: {type(e).__name__}: {e}") from None

    @staticmethod
    def _passage(item) -> Passage:
        if "document" in item:  # return_scores=True: {"document": {...}, "score": s}
            doc = item["document"]
            return Passage.from_contents(doc["contents"], item.get("score", 0.0), doc.get("id", ""))
        return Passage.from_contents(item["contents"], 0.0, item.get("id", ""))

    def run(self, query: str) -> ToolResult:
        """One ``<search>`` call; failures become an error result, never an exception."""
        start = time.monotonic()
        if not isinstance(query, str) or not query.strip():
            return ToolResult(
                output="Error: empty search query", error="empty search query", exit_reason="error"
            )
        try:
            passages = self.search([query])[0]
        except TimeoutError as e:
            return ToolResult(
                output=f"Error: {e}",
                error=f"timeout: {e}",
                timed_out=True,
                exit_reason="timeout",
                duration_s=time.monotonic() - start,
            )
        except (RetrievalError, OSError) as e:
            return ToolResult(
                output=f"Error: {e}",
                error=str(e),
                exit_reason="error",
                duration_s=time.monotonic() - start,
            )
        output = format_passages(passages) if passages else "No results found.\n"
        return ToolResult(output=output, duration_s=time.monotonic() - start)


class RetrievalError(RuntimeError):
    """The retrieval server could not be reached or answered something unusable."""
