"""AWPO judges: verdict parsing, the offline overlap judge (worked by hand), the HTTP judge against a
local OpenAI-compatible server (incl. failures), and failures counted as NaN, never raised."""

import http.server
import json
import threading

import numpy as np
import pytest

from mojax.tasks import judge as judge_lib


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
