"""AWPO judges: verdict parsing, the offline overlap judge (worked by hand), the HTTP judge against a
local OpenAI-compatible server (incl. failures), and failures counted as NaN, never raised."""

import http.server
import json
import threading
import time

import numpy as np
import pytest

from mojax.tasks.framework import judge as judge_lib


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Reasoning ok.\nTier: II", 0.8),
        ("tier: vi", 0.0),
        ("Tier - I", 1.0),
        ("first Tier: V then revised. Tier: III", 0.6),
        ("score: 0.75", 0.75),
        ("score: 1.5", None),
        ("no verdict here", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_verdict(text, expected):
    assert judge_lib.parse_verdict(text) == expected


FOUR = (
    "The plan is sound but one argument is off.\n"
    "Reasoning path: Tier II\nTool selection: Tier I\nParameter setting: Tier IV\n"
    "Execution strategy: Tier III\nContradicts reference: no"
)


@pytest.mark.parametrize(
    "text,expected",
    [
        # AWPO App. B: 0.35 * 0.8 + 0.30 * 1.0 + 0.25 * 0.4 + 0.10 * 0.6 = 0.74
        (FOUR, 0.74),
        # the hard constraint: contradicting the reference caps the result at Tier IV (0.4)
        (FOUR.replace("reference: no", "reference: yes"), 0.4),
        # below the cap it changes nothing: 0.35 * 0.2 + 0.30 * 0 + 0.25 * 0.2 + 0.10 * 0.4 = 0.16
        (
            "reasoning path - tier V\ntool selection: Tier VI\nparameter setting: tier: V\n"
            "execution strategy: Tier IV\ncontradicts reference: yes",
            0.16,
        ),
        # the last rating of a dimension counts (a revised verdict)
        (
            FOUR.replace(
                "Execution strategy: Tier III",
                "Execution strategy: Tier V\nExecution strategy: Tier I",
            ),
            0.78,
        ),  # fmt: skip
        # three of four dimensions: a partial verdict is a failure, not a guess
        ("Reasoning path: Tier I\nTool selection: Tier I\nParameter setting: Tier I", None),
        # prose that names a dimension without a tier is not a rating
        ("Reasoning path: I think it is fine. Tier: III", 0.6),
    ],
)
def test_parse_four_dimension_verdict(text, expected):
    got = judge_lib.parse_verdict(text)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-12))


def test_rubric_names_the_four_weighted_dimensions_and_output_lines():
    rubric = judge_lib.RUBRIC
    for (name, weight), line in zip(
        judge_lib.DIMENSIONS,
        ("Reasoning path", "Tool selection", "Parameter setting", "Execution strategy"),
    ):
        assert name == line.lower()
        assert f"{line} (weight {round(weight * 100)}%)" in rubric
        assert f"\n{line}: Tier <VI|V|IV|III|II|I>" in rubric
    assert sum(w for _, w in judge_lib.DIMENSIONS) == pytest.approx(1.0)
    assert "at most Tier IV" in rubric and rubric.endswith("Contradicts reference: <yes|no>")


def test_reason_column_marks_only_failures():
    values, ok = judge_lib.reason_column(np.array([0.5, np.nan, 0.0, np.nan], np.float32))
    np.testing.assert_array_equal(values, [0.5, 0.0, 0.0, 0.0])
    assert ok.tolist() == [True, False, True, False] and values.dtype == np.float32


def test_overlap_judge_is_token_f1_of_think_blocks():
    j = judge_lib.OverlapJudge()
    ref = "<think>call the weather tool for Paris</think><tool_call>...</tool_call>"
    # response think tokens: call, weather, api, for, paris (5); reference: call, the, weather,
    # tool, for, paris (6); common = call, weather, for, paris = 4 -> P = 4/5, R = 4/6
    resp = "<think>Call weather API for Paris</think><tool_call>x</tool_call>"
    p, r = 4 / 5, 4 / 6
    assert j.score("q", resp, ref) == pytest.approx(2 * p * r / (p + r))
    assert j.score("q", "no think block", ref) == 0.0
    assert j.score("q", "<think>unrelated words</think>", ref) == 0.0
    assert j.score("q", "<think>call the weather tool for Paris</think>", ref) == pytest.approx(1.0)


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append(body)
        if _Handler.mode == "error":
            self.send_response(500)
            self.end_headers()
            return
        content = "Tier: II" if _Handler.mode == "ok" else "I cannot judge this."
        payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
        data = b"not json" if _Handler.mode == "badjson" else json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_http_judge_and_failures_become_nan(server):
    j = judge_lib.make_judge("http", url=server, model="judge-model", timeout_s=5)
    _Handler.mode = "ok"
    scores, failures = judge_lib.judge_batch(j, ["q1", "q2"], ["r1", "r2"], ["g1", "g2"])
    np.testing.assert_allclose(scores, [0.8, 0.8])
    assert failures == 0
    sent = _Handler.seen[-1]
    assert sent["model"] == "judge-model" and sent["messages"][0]["content"] == judge_lib.RUBRIC
    assert "## Reference trajectory\ng2" in sent["messages"][1]["content"]
    for mode in ("error", "badjson", "noverdict"):
        _Handler.mode = mode
        scores, failures = judge_lib.judge_batch(j, ["q"], ["r"], ["g"])
        assert np.isnan(scores).all() and failures == 1, mode
    down = judge_lib.HTTPJudge("http://127.0.0.1:9", timeout_s=1)  # nothing listens on port 9
    scores, failures = judge_lib.judge_batch(down, ["q"], ["r"], ["g"])
    assert np.isnan(scores).all() and failures == 1


def test_raising_judge_fails_only_its_sample():
    class Flaky:
        def score(self, prompt, response, reference):
            if response == "boom":
                raise RuntimeError("judge crashed")
            return 2.0 if response == "out of range" else 0.5

    scores, failures = judge_lib.judge_batch(
        Flaky(), ["q"] * 3, ["ok", "boom", "out of range"], ["g"] * 3
    )
    assert scores[0] == 0.5 and np.isnan(scores[1:]).all() and failures == 2


def test_unknown_judge_kind_is_named():
    with pytest.raises(ValueError, match="judge.kind='gpt'"):
        judge_lib.make_judge("gpt")
    with pytest.raises(ValueError, match="judge.url"):
        judge_lib.make_judge("http")


@pytest.fixture()
def black_hole():
    """A TCP port that accepts connections and never answers: every HTTP call times out."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(256)
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


def test_a_down_judge_costs_a_few_timeouts_per_batch_not_one_per_row(black_hole):
    """40 rows against a judge that never answers (1 s per call): one call at a time that is 40 s;
    with 4 calls in flight and a stop after 4 failures in a row, the batch ends after ~1 call
    timeout with every row failed and at most 7 sent (4, then one more after each of the first 3
    failures while fewer than 4 in a row had failed)."""
    j = judge_lib.HTTPJudge(black_hole, timeout_s=1.0)
    budget = judge_lib.JudgeBudget(workers=4, max_failures_in_a_row=4)
    t0 = time.monotonic()
    scores, counts = judge_lib.judge_rows(j, ["q"] * 40, ["r"] * 40, ["g"] * 40, budget)
    took = time.monotonic() - t0
    assert np.isnan(scores).all() and counts["failures"] == 40
    assert 33 <= counts["skipped"] <= 36, counts
    assert took < 10, took


def test_one_deadline_per_batch_leaves_late_rows_unjudged():
    """A judge that answers one call in 0.3 s, 2 in flight, a 1 s deadline for 20 rows: the rows
    answered in time keep their scores, the others are skipped, and the batch does not wait."""

    class Slow:
        def score(self, prompt, response, reference):
            time.sleep(0.3)
            return 0.5

    budget = judge_lib.JudgeBudget(workers=2, deadline_s=1.0)
    t0 = time.monotonic()
    scores, counts = judge_lib.judge_rows(Slow(), ["q"] * 20, ["r"] * 20, ["g"] * 20, budget)
    took = time.monotonic() - t0
    answered = ~np.isnan(scores)
    assert 2 <= answered.sum() <= 8 and (scores[answered] == 0.5).all(), scores
    assert counts["skipped"] == 20 - answered.sum() == counts["failures"]
    assert took < 3, took


def test_failures_that_are_not_in_a_row_do_not_stop_the_batch():
    class Alternating:
        def score(self, prompt, response, reference):
            return None if int(response) % 2 else 0.25

    budget = judge_lib.JudgeBudget(workers=1, max_failures_in_a_row=2)
    rows = [str(i) for i in range(10)]
    scores, counts = judge_lib.judge_rows(Alternating(), rows, rows, rows, budget)
    assert counts == {"failures": 5, "skipped": 0}
    np.testing.assert_array_equal(np.isnan(scores), [i % 2 == 1 for i in range(10)])
