"""AWPO's reasoning reward: an LLM-as-a-Judge scores a response's reasoning in [0, 1].

AWPO (arXiv:2512.19126), App. B. The protocol is one method, ``score(prompt, response, reference)
-> float | None`` (None = the judge failed: no answer, timeout, unparseable verdict).
:func:`judge_batch` turns failures into NaN; :func:`reason_column` turns those into the format the
AWPO estimator takes — values (0 where failed) and ``reason_valid`` (False where failed): a judge
failure invalidates the reasoning objective of that sample only, never the sample, never a crash.
Three implementations:

* :class:`OverlapJudge` — offline and deterministic: token F1 between the response's ``<think>``
  and the reference rationale (the gold's ``<think>``). A stand-in for a judge where none is served;
  it rewards reasoning that covers the reference's content.
* :class:`HTTPJudge` — any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, SGLang, a
  hosted API) prompted with :data:`RUBRIC`.
* :class:`ModelJudge` — a local mojax model (and tokenizer) prompted with the same rubric,
  decoded greedily by a sampler (``mojax.sampling.protocol``; a model: the static engine).

The rubric follows App. B (Figure 2, "Tool-use Consistency Evaluator"): four weighted dimensions —
reasoning path 35%, tool selection 30%, parameter setting 25%, execution strategy 10% — each judged
against the reference trajectory on the discrete six-tier scale (Tier VI … Tier I ↦ 0.0, 0.2, …,
1.0, fixed values to reduce judge variance); the score is the weighted sum of the four tier values,
capped at Tier IV (0.4) when the judge reports that the tool calls contradict the reference (the
figure's hard constraint on the ground-truth tool trajectory). The wording is mojax's own (the paper
shows the prompt only as a figure). A verdict that rates some dimensions but not all is a failure;
a verdict with none of them falls back to one overall ``Tier: X`` (or ``score: s``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence

import numpy as np
from absl import logging

from mojax.tasks.qa import extract_tag

TIER_VALUES = {"VI": 0.0, "V": 0.2, "IV": 0.4, "III": 0.6, "II": 0.8, "I": 1.0}
DIMENSIONS = (
    ("reasoning path", 0.35),
    ("tool selection", 0.30),
    ("parameter setting", 0.25),
    ("execution strategy", 0.10),
)
CONTRADICTION_CAP = TIER_VALUES["IV"]

RUBRIC = """You are a strict tool-use consistency evaluator. Compare the assistant's reasoning and \
tool calls with the reference trajectory (the ground truth) and rate four dimensions separately, \
each on the six-tier scale below.
1. Reasoning path (weight 35%): is the chain of thought coherent, logically sound, complete and \
factually correct for the user's request? When it is poor, judge how far it deviates from the \
reference reasoning.
2. Tool selection (weight 30%): are the chosen tools the ones the reference uses, with no missing \
or extra calls?
3. Parameter setting (weight 25%): are the parameter names and values right and grounded in the \
dialogue?
4. Execution strategy (weight 10%): are the order and number of calls sensible?
Tiers: Tier I = 1.0 fully consistent with the reference; Tier II = 0.8 minor flaws; Tier III = 0.6 \
partly correct; Tier IV = 0.4 major flaws; Tier V = 0.2 mostly wrong; Tier VI = 0.0 unusable.
Hard constraint: if the tool calls contradict the reference trajectory, the overall result can be \
at most Tier IV.
After an optional short justification, end with exactly these five lines:
Reasoning path: Tier <VI|V|IV|III|II|I>
Tool selection: Tier <VI|V|IV|III|II|I>
Parameter setting: Tier <VI|V|IV|III|II|I>
Execution strategy: Tier <VI|V|IV|III|II|I>
Contradicts reference: <yes|no>"""

_TIER = r"(VI|IV|V|III|II|I)\b"
_DIM_RES = tuple(
    re.compile(name.replace(" ", r"\s*") + r"\s*[:\-]\s*tier\s*[:\-]?\s*" + _TIER, re.IGNORECASE)
    for name, _ in DIMENSIONS
)
_CONTRA_RE = re.compile(r"contradicts\s*reference\s*[:\-]\s*(yes|no)\b", re.IGNORECASE)
_TIER_RE = re.compile(r"tier\s*[:\-]?\s*" + _TIER, re.IGNORECASE)
_SCORE_RE = re.compile(r"score\s*[:=]\s*([01](?:\.\d+)?)\b", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)


def parse_verdict(text: str) -> float | None:
    """The score in [0, 1] of a judge's answer (module docstring), None if it cannot be read.

    The four dimension tiers (last occurrence of each) give ``sum_d weight_d * tier_value_d``,
    capped at 0.4 when the answer ends ``Contradicts reference: yes``. Some but not all four →
    None. None of them → the last overall ``Tier: X``, else the last ``score: s`` in [0, 1].
    """
    if not isinstance(text, str):
        return None
    text = text[-20000:]
    dims = [rx.findall(text) for rx in _DIM_RES]
    if any(dims):
        if not all(dims):
            return None  # a partial verdict is a failure, not a guess
        score = sum(w * TIER_VALUES[d[-1].upper()] for d, (_, w) in zip(dims, DIMENSIONS))
        contra = _CONTRA_RE.findall(text)
        if contra and contra[-1].lower() == "yes":
            score = min(score, CONTRADICTION_CAP)
        return float(round(score, 10))
    tiers = _TIER_RE.findall(text)
    if tiers:
        return TIER_VALUES[tiers[-1].upper()]
    scores = [float(s) for s in _SCORE_RE.findall(text)]
    scores = [s for s in scores if 0.0 <= s <= 1.0]
    return scores[-1] if scores else None


def judge_messages(prompt: str, response: str, reference: str) -> list[dict[str, str]]:
    """The chat messages sent to an LLM judge (system rubric + one user turn)."""
    user = (
        f"## Task given to the assistant\n{prompt}\n\n## Reference trajectory\n{reference}\n\n"
        f"## Assistant response to evaluate\n{response}\n"
    )
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": user}]


_SLOT = "\ue000"  # a private-use character: where the response goes in the rendered prompt


def judge_prompt_ids(tokenizer, prompt: str, response: str, reference: str) -> list[int]:
    """The local judge's prompt ids: the chat template of :func:`judge_messages`, encoded.

    The response is the policy's text (its tool observations included), so it is encoded as plain
    text (``tokenizer.encode_plain``) whenever it would otherwise yield a control id (a written-out
    ``<|im_end|>``, say): it can never close the judge's user turn or open an assistant turn of
    its own. Any other response gives the ids of the whole rendered text, as before."""
    render = lambda r: tokenizer.apply_chat_template(
        judge_messages(prompt, r, reference), tokenize=False
    )
    controls = getattr(tokenizer, "control_ids", frozenset())
    if not controls or not set(tokenizer.encode(response)) & set(controls):
        return tokenizer.encode(render(response))
    prompt, reference = prompt.replace(_SLOT, ""), reference.replace(_SLOT, "")
    head, tail = render(_SLOT).split(_SLOT)
    return tokenizer.encode(head) + tokenizer.encode_plain(response) + tokenizer.encode(tail)


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _WORD.findall(text or "")]


class OverlapJudge:
    """Offline judge: token-level F1 between the ``<think>`` of the response and of the reference.

    With no ``<think>`` in the reference the whole reference is used; a response without
    ``<think>`` scores 0 (no reasoning to reward).
    """

    name = "overlap"

    def score(self, prompt: str, response: str, reference: str) -> float | None:
        del prompt
        ref = extract_tag(reference or "", "think")
        ref = reference if ref is None else ref
        hyp = extract_tag(response or "", "think")
        if hyp is None:
            return 0.0
        r, h = Counter(_tokens(ref)), Counter(_tokens(hyp))
        common = sum((r & h).values())
        if common == 0:
            return 0.0
        precision, recall = common / sum(h.values()), common / sum(r.values())
        return 2 * precision * recall / (precision + recall)


class HTTPJudge:
    """A judge served behind an OpenAI-compatible ``POST {url}/v1/chat/completions`` endpoint."""

    name = "http"

    def __init__(
        self, url: str, model: str = "", *, timeout_s: float = 30.0, max_tokens: int = 256
    ):
        if not url:
            raise ValueError("judge.url: an http judge needs the server's base URL")
        self.url = url.rstrip("/")
        if not self.url.endswith("/chat/completions"):
            self.url += "/v1/chat/completions"
        self.model, self.timeout_s, self.max_tokens = model, float(timeout_s), int(max_tokens)

    def score(self, prompt: str, response: str, reference: str) -> float | None:
        body = {
            "model": self.model,
            "messages": judge_messages(prompt, response, reference),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        req = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                payload = json.loads(resp.read(1 << 20).decode("utf-8", "replace"))
            text = payload["choices"][0]["message"]["content"]
        except (
            urllib.error.URLError,
            TimeoutError,
            OSError,
            ValueError,
            KeyError,
            IndexError,
            TypeError,
        ):
            return None
        return parse_verdict(text)


class ModelJudge:
    """A local mojax model as the judge, decoded greedily by a sampler (e.g. a served-size Qwen3).

    Args:
      sampler: a ``mojax.sampling.protocol.Sampler`` with the judge's weights (``open``: one
        session per batch of verdicts), or a ``QwenModel`` (the static in-graph engine over it).
      tokenizer: its tokenizer (chat template applied).
      max_new_tokens: verdict budget.

    A batch of verdicts is stepped by this process alone: use a sampler over this process's
    devices (each process judges its own rows).
    """

    name = "model"

    def __init__(self, sampler, tokenizer, *, max_new_tokens: int = 64, seed: int = 0):
        from mojax.sampling import protocol

        if not hasattr(sampler, "open"):  # a model: the static engine over it
            sampler = protocol.in_graph(sampler)
        self.sampler, self.tokenizer = sampler, tokenizer
        self.max_new_tokens, self.seed = int(max_new_tokens), int(seed)

    @property
    def model(self):
        """The judge's ``QwenModel`` (the sampler's)."""
        return self.sampler.model

    @classmethod
    def from_hf(cls, path: str, *, dtype: str = "bfloat16", max_new_tokens: int = 256):
        """The judge in the HF checkpoint directory ``path`` (``config.json``, safetensors and
        the tokenizer files; ``config.judge.model``), loaded onto this process's default device:
        each process holds its own copy and judges only its own rows."""
        from mojax import models

        model = models.from_pretrained(path, dtype=dtype)
        return cls(model, models.load_tokenizer(path), max_new_tokens=max_new_tokens)

    def score_batch(self, prompts, responses, references) -> list[float | None]:
        return [parse_verdict(t) for t in self.verdicts(prompts, responses, references)]

    def verdicts(self, prompts, responses, references) -> list[str]:
        """The judge's greedy verdict texts, one per row (up to and excluding its EOS)."""
        import jax

        from mojax.sampling import protocol

        rows = zip(prompts, responses, references)
        ids = [judge_prompt_ids(self.tokenizer, p, r, ref) for p, r, ref in rows]
        width = max(len(i) for i in ids)
        tokens = np.zeros((len(ids), width), np.int32)
        for row, i in enumerate(ids):
            tokens[row, : len(i)] = i
        eos = self.tokenizer.eos_token_id
        new = self.max_new_tokens
        requests = protocol.Requests(  # one turn: the cache holds the prompt bucket + the verdict
            prompt_tokens=tokens,
            prompt_lengths=np.array([len(i) for i in ids], np.int32),
            key=jax.random.PRNGKey(self.seed),
            num_samples=1,
            max_new_tokens=new,
            stop_token_ids=() if eos is None else (int(eos),),
            max_response_len=new,
            limits=protocol.Limits(turns=1, turn_tokens=new, obs_tokens=1),
        )
        session = self.sampler.open(requests, {"temperature": 0.0})
        while session.busy:
            session.step()
        out = session.output()
        toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
        ends = [n - int(n > 0 and eos is not None and t[n - 1] == eos) for t, n in zip(toks, lens)]
        return [self.tokenizer.decode(t[:n]) for t, n in zip(toks, ends)]

    def score(self, prompt: str, response: str, reference: str) -> float | None:
        return self.score_batch([prompt], [response], [reference])[0]


def make_judge(
    kind: str,
    *,
    url: str = "",
    model: str = "",
    timeout_s: float = 30.0,
    dtype: str = "bfloat16",
    **kwargs,
):
    """A judge from ``config.judge`` (``kind`` in overlap | http | model). ``kind='model'``
    loads the HF directory ``model`` (in ``dtype``), or takes ``model_obj=`` and ``tokenizer=``
    already loaded."""
    if kind == "overlap":
        return OverlapJudge()
    if kind == "http":
        return HTTPJudge(url, model, timeout_s=timeout_s)
    if kind == "model":
        if "model_obj" in kwargs and "tokenizer" in kwargs:
            return ModelJudge(kwargs["model_obj"], kwargs["tokenizer"])
        if not model:
            raise ValueError(
                "judge.model: a local judge (judge.kind='model') needs its HF directory"
            )
        return ModelJudge.from_hf(model, dtype=dtype)
    raise ValueError(f"judge.kind={kind!r} is not one of ['overlap', 'http', 'model']")


@dataclasses.dataclass(frozen=True)
class JudgeBudget:
    """What one batch of judge calls may cost (``config.judge``).

    Attributes:
      workers: calls in flight at once (threads; a served judge answers them in parallel).
      deadline_s: one deadline for the whole batch, from its start (None = none): rows not
        answered by then fail (skipped) and the batch returns without waiting for them.
      max_failures_in_a_row: after this many failed calls in a row (in the order they finish),
        the remaining rows are not sent (skipped): a judge that is down costs a few call timeouts
        per batch, not one per row (0 = never stop early).
    """

    workers: int = 1
    deadline_s: float | None = None
    max_failures_in_a_row: int = 0


def _valid_score(s) -> float:
    ok = s is not None and isinstance(s, (int, float)) and math.isfinite(s) and 0 <= s <= 1
    return float(s) if ok else math.nan


def _call(judge, p, r, ref) -> float:
    try:
        return _valid_score(judge.score(p, r, ref))
    except Exception:  # noqa: BLE001 - a judge failure marks the sample invalid
        return math.nan


def judge_rows(
    judge,
    prompts: Sequence[str],
    responses: Sequence[str],
    references: Sequence[str],
    budget: JudgeBudget | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Scores float32 [N] in [0, 1] (NaN where the judge failed or the row was skipped) and counts
    ``{"failures": NaN rows, "skipped": rows never answered within the budget}``.

    A judge with ``score_batch`` (in-graph) scores the batch in one call, without the budget. A
    judge that raises on one sample fails that sample only.
    """
    n = len(responses)
    budget = JudgeBudget() if budget is None else budget
    out = np.full((n,), np.nan, np.float32)
    if hasattr(judge, "score_batch"):
        try:
            raw = list(judge.score_batch(prompts, responses, references))
        except Exception:  # noqa: BLE001 - a judge failure marks the samples invalid
            raw = [None] * n
        out[:] = [_valid_score(x) for x in raw]
        return out, {"failures": int(np.isnan(out).sum()), "skipped": 0}
    answered = np.zeros((n,), bool)
    end = None if budget.deadline_s is None else time.monotonic() + budget.deadline_s
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, budget.workers))
    try:
        running, nxt, in_a_row = {}, 0, 0
        while nxt < n or running:
            while nxt < n and len(running) < max(1, budget.workers):
                args = (judge, prompts[nxt], responses[nxt], references[nxt])
                running[pool.submit(_call, *args)] = nxt
                nxt += 1
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            done, _ = concurrent.futures.wait(
                running, timeout=left, return_when=concurrent.futures.FIRST_COMPLETED
            )
            if not done:  # the deadline passed
                break
            for f in done:
                i = running.pop(f)
                out[i], answered[i] = f.result(), True
                in_a_row = in_a_row + 1 if math.isnan(out[i]) else 0
            if budget.max_failures_in_a_row and in_a_row >= budget.max_failures_in_a_row:
                nxt = n  # send nothing more; wait for the calls in flight
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    skipped = int((~answered).sum())
    if skipped:
        logging.warning(
            "judge: %d of %d rows not judged (%s); their r_reason is invalid",
            skipped,
            n,
            "deadline passed"
            if end is not None and time.monotonic() >= end
            else f"{budget.max_failures_in_a_row} failures in a row",
        )
    return out, {"failures": int(np.isnan(out).sum()), "skipped": skipped}


def judge_batch(
    judge, prompts: Sequence[str], responses: Sequence[str], references: Sequence[str]
) -> tuple[np.ndarray, int]:
    """Scores float32 [N] in [0, 1] (NaN where the judge failed) and the number of failures: every
    row judged, one call at a time (:func:`judge_rows` without a budget)."""
    out, counts = judge_rows(judge, prompts, responses, references)
    return out, counts["failures"]


def reason_column(scores) -> tuple[np.ndarray, np.ndarray]:
    """``(values, reason_valid)`` from :func:`judge_batch`'s scores (NaN = failure).

    ``values`` float32: the score, 0.0 where the judge failed; ``reason_valid`` bool: False there.
    Pass ``values`` as AWPO's ``R_reason`` column and ``reason_valid`` to
    :func:`mojax.advantages.awpo` (``reason_valid=``), and keep the sample valid: a judge failure
    invalidates the reasoning objective only.
    """
    s = np.asarray(scores, dtype=np.float32)
    ok = np.isfinite(s)
    return np.where(ok, s, 0.0).astype(np.float32), ok
