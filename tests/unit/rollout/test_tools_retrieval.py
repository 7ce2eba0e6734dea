"""Retrieval tools: BM25 vs a numpy BM25 from the equations, planted passages, HotpotQA recall,
and the Search-R1 HTTP client against a local server (also one that is down, slow or broken)."""

import collections
import http.server
import json
import math
import socket
import threading
import time

import numpy as np
import pytest

from mojax.rollout.tools import BM25Retriever, Passage, RetrievalClient, format_passages

CORPUS = [
    {
        "title": "Aurelian Vossberg",
        "text": "Aurelian Vossberg was a cartographer born in Lindqvist harbour.",
    },
    {
        "title": "Lindqvist harbour",
        "text": "Lindqvist harbour is a fishing port on the northern coast.",
    },
    {
        "title": "Quorvath lighthouse",
        "text": "The Quorvath lighthouse was designed by Mirela Tansk in 1887.",
    },
    {"title": "Mirela Tansk", "text": "Mirela Tansk was an engineer who also designed bridges."},
    {
        "title": "Northern coast",
        "text": "The northern coast is known for storms, fishing and lighthouses.",
    },
    {"title": "Cartography", "text": "Cartography is the study and practice of making maps."},
]


def test_planted_passage_is_retrieved_first():
    retriever = BM25Retriever(CORPUS, topk=3)
    hits = retriever.search(["Who designed the Quorvath lighthouse?", "Where was Vossberg born?"])
    assert hits[0][0].title == "Quorvath lighthouse"
    assert hits[1][0].title == "Aurelian Vossberg"
    assert all(len(h) <= 3 for h in hits)
    assert hits[0][0].score >= hits[0][-1].score > 0


def _reference_bm25(docs_tokens, query_tokens, k1=1.5, b=0.75):
    """Lucene's BM25 (Kamphuis et al. 2020, "Which BM25 do you mean?") from the equations:
    idf = ln(1 + (N - df + 0.5) / (df + 0.5)), w = idf * tf / (tf + k1 (1 - b + b |d| / avgdl)).
    Lucene drops the classic (k1 + 1) numerator factor (rank-preserving), and so does bm25s."""
    n = len(docs_tokens)
    avgdl = sum(len(d) for d in docs_tokens) / n
    df = collections.Counter(t for d in docs_tokens for t in set(d))
    scores = np.zeros(n)
    for i, doc in enumerate(docs_tokens):
        tf = collections.Counter(doc)
        for term in query_tokens:
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                norm = tf[term] + k1 * (1 - b + b * len(doc) / avgdl)
                scores[i] += idf * tf[term] / norm
    return scores


def test_scores_match_the_bm25_equations():
    from bm25s.tokenization import Tokenizer

    retriever = BM25Retriever(CORPUS, topk=len(CORPUS))
    tokenizer = Tokenizer(stopwords="en")
    docs = tokenizer.tokenize(
        [f"{c['title']} {c['text']}" for c in CORPUS], return_as="string", show_progress=False
    )
    for query in ["northern fishing lighthouse storms", "designed bridges engineer", "maps"]:
        q = tokenizer.tokenize([query], return_as="string", show_progress=False)[0]
        expected = _reference_bm25(docs, q)
        got = {p.title: p.score for p in retriever.search([query])[0]}
        for c, e in zip(CORPUS, expected):
            np.testing.assert_allclose(got.get(c["title"], 0.0), e, rtol=1e-5, atol=1e-6)


def test_formatting_matches_search_r1():
    passages = [
        Passage.from_contents('"Mirela Tansk"\nAn engineer.\nSecond line.'),
        Passage("T", "x"),
    ]
    assert passages[0].title == '"Mirela Tansk"'
    assert format_passages(passages) == (
        'Doc 1(Title: "Mirela Tansk") An engineer.\nSecond line.\nDoc 2(Title: T) x\n'
    )
    result = BM25Retriever(CORPUS, topk=2).run("Mirela Tansk engineer")
    assert result.ok and result.output.startswith("Doc 1(Title: Mirela Tansk) Mirela Tansk was")
    assert result.output.count("\n") == 2


def test_corpus_forms_and_bad_input():
    retriever = BM25Retriever(["Alpha\nfirst doc about zebras", Passage("Beta", "second doc")])
    assert retriever.search(["zebras"])[0][0].title == "Alpha"
    assert retriever.run("qqqq unknownword").output == "No results found.\n"
    assert retriever.run("   ").error == "empty search query"
    assert retriever.search([]) == []
    with pytest.raises(ValueError, match=r"corpus\[0\]"):
        BM25Retriever([3])
    with pytest.raises(ValueError, match="corpus is empty"):
        BM25Retriever([])
    with pytest.raises(ValueError, match="topk"):
        retriever.search(["zebras"], topk=0)
    with pytest.raises(TypeError, match="list of strings"):
        retriever.search("zebras")


def test_hotpotqa_supporting_paragraph_recall(shared):
    """Real multi-hop questions over the 4,947 unique HotpotQA dev500 paragraphs.

    Observed (bm25s 0.3, Lucene k1=1.5, b=0.75): a supporting paragraph is in the top-1 for 77.8%
    of the questions, top-3 88.8%, top-5 93.0%, top-10 99.4%; both supporting paragraphs are in the
    top-10 for 71.8%. Asserted with a margin of about 5 points.
    """
    rows = [json.loads(line) for line in (shared / "data/qa/hotpotqa_dev500.jsonl").open()]
    corpus = {}
    for row in rows:
        for title, sentences in row["context"]:
            corpus.setdefault(title, "".join(sentences))
    retriever = BM25Retriever([{"title": t, "text": x} for t, x in corpus.items()])
    hits = retriever.search([row["question"] for row in rows], topk=10)

    def recall(k, need_all=False):
        ok = 0
        for row, passages in zip(rows, hits):
            gold = {title for title, _ in row["supporting_facts"]}
            top = {p.title for p in passages[:k]}
            ok += gold <= top if need_all else bool(gold & top)
        return ok / len(rows)

    assert recall(1) >= 0.72
    assert recall(3) >= 0.83
    assert recall(5) >= 0.88
    assert recall(10) >= 0.95
    assert recall(10, need_all=True) >= 0.65


class _Handler(http.server.BaseHTTPRequestHandler):
    """Search-R1's /retrieve protocol over the test corpus (BM25 behind it)."""

    retriever = None
    mode = "ok"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).last_request = (self.path, body)
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "500":
            self.send_error(500, "index not loaded")
            return
        if self.path != "/retrieve":
            self.send_error(404)
            return
        results = self.retriever.search(body["queries"], topk=body["topk"])
        payload = {
            "result": [
                [
                    {"document": {"id": p.id, "contents": f"{p.title}\n{p.text}"}, "score": p.score}
                    for p in row
                ]
                for row in results
            ]
        }
        data = b"{not json" if self.mode == "garbage" else json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:
            pass  # the client gave up (the timeout test)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    _Handler.retriever = BM25Retriever(CORPUS)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_http_client_against_local_server(server):
    _Handler.mode = "ok"
    url = f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    client = RetrievalClient(url, topk=2, timeout_s=5)
    result = client.run("Who designed the Quorvath lighthouse?")
    assert _Handler.last_request == (
        "/retrieve",
        {"queries": ["Who designed the Quorvath lighthouse?"], "topk": 2, "return_scores": True},
    )
    local = BM25Retriever(CORPUS, topk=2).run("Who designed the Quorvath lighthouse?")
    assert result.ok and result.output == local.output
    assert result.output.startswith("Doc 1(Title: Quorvath lighthouse) The Quorvath lighthouse")
    batch = client.search(["Vossberg cartographer", "storms"])
    assert [row[0].title for row in batch] == ["Aurelian Vossberg", "Northern coast"]


@pytest.mark.parametrize(
    "mode, reason, message",
    [
        ("slow", "timeout", "timed out after 0.3 s"),
        ("500", "error", "HTTP 500"),
        ("garbage", "error", "malformed retrieval response"),
    ],
)
def test_http_client_server_trouble_is_an_error_result(server, mode, reason, message):
    _Handler.mode = mode
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/retrieve"
        result = RetrievalClient(url, timeout_s=0.3).run("lighthouse")
    finally:
        _Handler.mode = "ok"
    assert result.exit_reason == reason and message in result.error, result
    assert result.timed_out == (reason == "timeout")
    assert result.output.startswith("Error: ")


def test_http_client_server_down_is_an_error_result():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    result = RetrievalClient(f"http://127.0.0.1:{port}/retrieve", timeout_s=2).run("lighthouse")
    assert time.monotonic() - start < 2
    assert result.exit_reason == "error" and "unreachable" in result.error, result
    with pytest.raises(ValueError, match="url"):
        RetrievalClient("ftp://x")
