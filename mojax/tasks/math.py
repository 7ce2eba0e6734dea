"""Tool-integrated math (ParetoPO's ToRL setting, arXiv:2606.16111 Sec. 4 / App. A): answers and ``r_task``.

Problems come in the public JSONL shapes (MATH500 ``problem``/``answer``; AIME24 also
``question``; AIME25 an int ``answer``; OlympiadBench ``question``/``final_answer`` list; AMC
``answer`` float). The final answer is the last ``\\boxed{…}`` (or ``\\fbox``), else the last
``<answer>…</answer>``, else a plain "answer is X" / "Final Answer: X" line. Equivalence is decided
by the ``math-verify`` library (no hand-written LaTeX comparison); ``r_task`` = 1 if equivalent.

Objectives ``(r_task, r_tool)``: ``r_tool = exp(−α|N_call − N_opt|)`` (ParetoPO Eq. 4) needs the
rollout's ``N_call`` and the per-prompt ``N_opt`` tracker (``mojax.pareto.tool_efficiency``), so it
is an *external* objective the trainer fills; ``is_success`` on ``r_task`` gives the trajectories
whose call counts update ``N_opt``.

Tool protocol (what the rollout driver needs; the Python sandbox is ``mojax.rollout.tools``):
``tool_format="torl"`` (default; ToRL / Qwen2.5-Math TIR): the model writes a
````` ```python … ``` ````` block and then ````` ```output `````, which is the stop string; the
observation ``"\\n<result>\\n```\\n"`` closes the output block. ``tool_format="tags"``:
``<code>…</code>`` (stop ``</code>``) and ``<output>…</output>``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax.tasks.framework import data as data_lib
from mojax.tasks.framework.base import Example, Objective, Task, clean_response

__all__ = [
    "extract_boxed",
    "extract_answer",
    "is_equivalent",
    "MathTask",
    "TOOL_FORMATS",
    "UnsafeToVerify",
]

TOOL_FORMATS = ("torl", "tags")
_MAX_ANSWER_CHARS = 1000  # longer "answers" are not answers; math-verify is not run on them

QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
TIR_INSTRUCTION = (
    "Please integrate natural language reasoning with programs to solve the problem above, and "
    "put your final answer within \\boxed{}."
)
TAGS_INSTRUCTION = (
    "You may run Python code by writing it inside <code>...</code>; its output is returned inside "
    "<output>...</output>. Put your final answer within \\boxed{}."
)


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` / ``\\fbox{…}`` (balanced braces), or ``\\boxed X``."""
    text = str(text)
    best = None
    for cmd in ("\\boxed", "\\fbox"):
        k = text.rfind(cmd)
        if k >= 0 and (best is None or k > best[0]):
            best = (k, cmd)
    if best is None:
        return None
    k = best[0] + len(best[1])
    rest = text[k:]
    if rest.startswith(" ") and not rest.lstrip().startswith("{"):
        m = re.match(r"\s+([^\s$]+)", rest)
        return m.group(1) if m else None
    rest = rest.lstrip()
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None  # unbalanced (truncated output)


_PLAIN = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*:?\s*([^\n]+)", re.IGNORECASE)


def extract_answer(text: Any) -> str | None:
    """The final answer string of a response (see module docstring), or None."""
    text = clean_response(text)
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed.strip()
    end = text.rfind("</answer>")
    if end >= 0:
        start = text.rfind("<answer>", 0, end)
        if start >= 0:
            return text[start + len("<answer>") : end].strip()
    matches = _PLAIN.findall(text[-5000:])
    if matches:
        ans = matches[-1].strip().rstrip(".").strip()
        return ans.strip("$").strip() or None
    return None


class UnsafeToVerify(ValueError):
    """Raised off the main thread for an answer that could make sympy run without bound."""


def _timeout() -> int | None:
    # math-verify's timeouts use signal.alarm, which only works in the main thread.
    return 5 if threading.current_thread() is threading.main_thread() else None


def _unbounded_risk(ans: str) -> bool:
    """Power towers and factorials can make sympy run for hours (``9^{9^{9^{9}}}``)."""
    return ans.count("^") >= 2 or "!" in ans or "\\uparrow" in ans


def _as_latex(ans: str) -> str:
    ans = ans.strip()
    return ans if ans.startswith("$") or "\\boxed" in ans else f"${ans}$"


def is_equivalent(pred: str | None, gold: str | Sequence[str]) -> bool:
    """Whether ``pred`` equals any of the gold answers, decided by ``math_verify.verify``.

    In the main thread every parse/compare has math-verify's 5 s timeout (a timeout counts as not
    equivalent). Off the main thread math-verify cannot time out (it uses ``signal.alarm``), so
    answers that could run without bound (power towers, factorials) raise :class:`UnsafeToVerify`,
    which :meth:`Task.score_safe` turns into an invalid sample with that reason counted.
    """
    if pred is None or not str(pred).strip() or len(str(pred)) > _MAX_ANSWER_CHARS:
        return False
    from math_verify import parse, verify  # local import: heavy (sympy)

    golds = [gold] if isinstance(gold, str) else list(gold)
    t = _timeout()
    if t is None and _unbounded_risk(str(pred)):
        # no timeout is possible here: let score_safe mark the sample invalid and count it
        raise UnsafeToVerify("answer with a power tower or factorial scored off the main thread")
    target = parse(_as_latex(str(pred)), parsing_timeout=t)
    if not target:
        return False
    for g in golds:
        parsed_gold = parse(_as_latex(str(g)), parsing_timeout=t)
        if parsed_gold and verify(parsed_gold, target, timeout_seconds=t):
            return True
    return False


def _gold_strings(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _gold_strings(v)]
    if isinstance(value, float) and value.is_integer():
        return [str(int(value))]
    return [str(value)]


class MathTask(Task):
    """Tool-integrated math with objectives ``(r_task, r_tool)``; scalar ``w = (0.6, 0.4)``.

    Args:
      tool_format: ``"torl"`` (markdown python/output blocks) or ``"tags"`` (<code>/<output>).
    """

    name = "math"
    objectives = (
        Objective("r_task", 0.0, 1.0, success=True),
        Objective("r_tool", 0.0, 1.0, external=True),
    )
    scalar_weights = (0.6, 0.4)

    def __init__(self, tool_format: str = "torl"):
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"tool_format must be one of {TOOL_FORMATS}; got {tool_format!r}")
        self.tool_format = tool_format
        self.tool_stop = "```output" if tool_format == "torl" else "</code>"

    # ------------------------------------------------------------------ data
    def make_tool(self, rollout, splits):
        """The sandboxed Python interpreter (isolation ``rollout.sandbox``: "bwrap", or
        "unsafe_fallback" by name only)."""
        from mojax.rollout.tools import PythonSandbox

        del splits
        return PythonSandbox(timeout_s=float(rollout.tool_timeout_s), mode=rollout.sandbox)

    def load(self, path: str) -> list[Example]:
        """Examples from a MATH500 / AIME / AMC / OlympiadBench JSONL (or JSON, parquet) file."""
        out = []
        for i, rec in enumerate(data_lib.read_records(path)):
            problem = rec.get("problem", rec.get("question"))
            answer = next(
                (rec[k] for k in ("answer", "final_answer", "gt", "ground_truth") if k in rec),
                None,
            )
            if problem is None or answer is None:
                raise ValueError(
                    f"{path}: record {i} needs 'problem' (or 'question') and 'answer' (or "
                    f"'final_answer'); keys: {sorted(rec)}"
                )
            out.append(self.example(str(problem), answer, f"{path}#{rec.get('id', i)}", rec))
        return out

    def example(self, problem: str, answer: Any, ex_id: str, meta: dict | None = None) -> Example:
        instruction = TIR_INSTRUCTION if self.tool_format == "torl" else TAGS_INSTRUCTION
        msgs = (
            {"role": "system", "content": QWEN_MATH_SYSTEM},
            {"role": "user", "content": f"{problem}\n{instruction}"},
        )
        return Example(ex_id, msgs, tuple(_gold_strings(answer)), dict(meta or {}))

    # ------------------------------------------------------------------ tool protocol
    def parse_tool_call(self, text: str) -> str | None:
        """The code of the last tool call in ``text`` (which ends at the stop string), or None."""
        text = str(text)
        if self.tool_format == "torl":
            k = text.rfind("```python")
            if k < 0:
                return None
            body = text[k + len("```python") :]
            end = body.find("```")
            code = body if end < 0 else body[:end]
        else:
            end = text.rfind("</code>")
            if end < 0:
                return None
            start = text.rfind("<code>", 0, end)
            if start < 0:
                return None
            code = text[start + len("<code>") : end]
        return code.strip("\n") or None

    def format_observation(self, result_text: str) -> str:
        """Observation text appended after the stop string (loss-masked by the rollout)."""
        result = str(result_text).strip("\n")
        if self.tool_format == "torl":
            return f"\n{result}\n```\n"
        return f"<output>{result}</output>"

    def count_tool_calls(self, response: str) -> int:
        """Tool calls in a full transcript (fallback when the rollout's ``n_calls`` is absent)."""
        return str(response).count(self.tool_stop)

    # ------------------------------------------------------------------ reward
    def score(self, response: str, example: Example) -> np.ndarray:
        pred = extract_answer(response)
        return np.array([float(is_equivalent(pred, example.target)), 0.0])
