"""ToolRL function calling (the ``rlla_4k`` corpus): format, correctness, AWPO and VPO rewards.

Sources: SAW App. C (Eqs. 11-17), AWPO Eqs. 14-19, VPO App. A.4 / E.4, and
``methods.md`` ("ToolRL rewards"). ``response`` is the assistant text; ``gold`` is the
``reward_model.ground_truth`` string: ``<think>…</think>`` then a ``<tool_call>`` block (one JSON
object ``{"name", "parameters"}`` per line) and/or a ``<response>`` block.

* **Format** (SAW Eq. 11, AWPO Eq. 15) ∈ {0, 1}: the stripped response has exactly the gold's
  structure: ``<think>…</think>\\n<tool_call>\\n…\\n</tool_call>`` (tool gold),
  ``<think>…</think>\\n<response>…</response>`` (response gold), both in that order, or
  ``<think>…</think>`` alone; each present tag occurs exactly once (the authors' regexes and tag
  counts, checked here without a backtracking regex so huge outputs stay linear).
* **Correctness** (SAW Eqs. 12-17) ∈ [−3, 3]: 0 if the gold makes no tool call; −3 on any parse
  error (no ``<tool_call>…</tool_call>``, a line that is not a JSON object with a string ``name``
  and a dict ``parameters``); +3 on exact match; else ``6·score/S_max − 3`` with ``score`` =
  multiset Jaccard of tool names + Σ over matched pairs (Jaccard of parameter keys + count of equal
  values) and ``S_max = 1 + Σ_gold (1 + |params|)``. ``matching="optimal"`` (paper: the
  maximum-score assignment, ``scipy.optimize.linear_sum_assignment``; default) or ``"greedy"``
  (the authors' code: gold order, same name, first strictly-best unused prediction).
* **AWPO execution score** (AWPO arXiv:2512.19126, Eq. 19) ∈ [0, 1]: the same sum over
  ``1 + |T| + Σ|v(T_i)|``, i.e. ``(correctness + 3) / 6`` for a gold with tool calls. For a gold
  without tool call (T empty) Eq. 19 read literally is ``r_name / 1`` with the Jaccard of two empty
  name sets = 1: **1 if the response calls no tool, 0 for a spurious call** (``direct_reply="eq19"``,
  default; a ``<tool_call>`` block that does not parse counts as a call, an empty block as none).
  ``direct_reply="neutral"`` scores such a response a constant 0.5 (ToolRL's neutral 0 mapped into
  [0, 1]), under which a spurious call costs nothing. ``R_out = format + exec`` ∈ [0, 2].
* **Tool-name Jaccard** (``name_jaccard``): ``"multiset"`` (default; the ToolRL authors' code,
  ``Counter`` intersection over ``len(a) + len(b) − inter``, with their quirks: equal lists → 1,
  one empty list → 0) or ``"set"`` (AWPO Eq. 16 and SAW Eq. 12 as written: ``|N_T ∩ N_P| /
  |N_T ∪ N_P|`` over name *sets*, so a repeated call of the same tool is not penalised).
* **VPO 4-D vector** (App. A.4): ``(format, tool-name multiset F1, mean parameter-key F1 over
  aligned calls, value token F1 over the aligned calls' common keys)``; alignment is greedy by name
  then by key overlap. mojax's decisions where the paper is silent: a gold without tool call scores
  1 on the three tool dimensions iff the response has no ``<tool_call>`` (else 0); no aligned pair
  → key and value F1 are 0; an aligned pair without common keys scores value F1 1 iff both key
  sets are empty.

* **SWiRL decomposition** (AWPO Sec. 4 "Training data", following SWiRL): a dialogue whose history
  holds K − 1 earlier assistant steps (``<think>`` + ``<tool_call>`` and/or ``<response>``) becomes
  K single-step instances, each conditioned on the full preceding context (the history text up to
  that step) with that step as the gold; the K-th is the original example.
  :func:`swirl_decompose` (or ``ToolRLTask(swirl=True)``, which decomposes every file it loads).

mojax tolerates blank lines inside ``<tool_call>`` (the authors' ``split("\\n")`` would fail on
them); everything else follows their code.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from mojax.tasks.framework import data as data_lib
from mojax.tasks.framework.base import Example, Objective, Task, clean_response
from mojax.tasks.toolrl_data import dialogue_steps, record_to_example, swirl_decompose

__all__ = [
    "ToolCallParseError",
    "parse_tool_calls",
    "format_reward",
    "correctness_score",
    "correctness_reward",
    "execution_score",
    "vpo_reward_vector",
    "ToolRLTask",
    "dialogue_steps",
    "swirl_decompose",
    "MATCHING_MODES",
    "NAME_JACCARD_MODES",
    "DIRECT_REPLY_MODES",
    "MULTI_ANSWER_INSTRUCTION",
]

MATCHING_MODES = ("optimal", "greedy")
NAME_JACCARD_MODES = ("multiset", "set")
DIRECT_REPLY_MODES = ("eq19", "neutral")

# VPO App. E.4: appended to the *user* message for multi-answer methods.
MULTI_ANSWER_INSTRUCTION = (
    "\n\n---\nADDITIONAL INSTRUCTION (overrides the single-attempt output format above): Provide "
    "{m} different attempts at the task. Wrap each attempt in numbered outer tags "
    "<response_1>...</response_1> through <response_{m}>...</response_{m}>. Inside each "
    "<response_i>, follow the original output format from the system prompt (your <think>, "
    "optional <tool_call>, and inner <response> sections). The {m} attempts should be genuinely "
    "different --- different tool choices, different argument values, or different reasoning --- "
    "not paraphrases. Closing tags are required on every outer attempt."
)


class ToolCallParseError(ValueError):
    """The ``<tool_call>`` block is missing or holds something other than tool-call JSON lines."""


def parse_tool_calls(text: str) -> list[dict[str, Any]]:
    """Tool calls of the first ``<tool_call>…</tool_call>`` block (the authors' extraction).

    Raises:
      ToolCallParseError: no opening/closing tag, invalid JSON, or a line that is not an object
        with a string ``name`` and a dict ``parameters``.
    """
    start = text.find("<tool_call>")
    if start < 0:
        raise ToolCallParseError("no <tool_call>")
    start += len("<tool_call>")
    end = text.find("</tool_call>", start)
    if end < 0:
        raise ToolCallParseError("no </tool_call>")
    calls = []
    for line in text[start:end].strip().split("\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise ToolCallParseError(f"invalid JSON: {type(e).__name__}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ToolCallParseError("a tool call must be an object with a string 'name'")
        if not isinstance(obj.get("parameters"), dict):
            raise ToolCallParseError(f"tool call {obj['name']!r}: 'parameters' must be an object")
        calls.append(obj)
    return calls


def _gold_answer(gold: Any) -> str:
    """The gold's answer part: the text after its first ``</think>`` (the whole gold without one).

    The distilled SFT golds mention ``<tool_call>``/``<response>`` inside ``<think>``; the gold's
    structure is decided by what follows the thought. Responses are parsed as the authors do.
    """
    gold = str(gold)
    k = gold.find("</think>")
    return gold if k < 0 else gold[k + len("</think>") :]


# --------------------------------------------------------------------------- format
def _think_prefix_ok(text: str, head_end: int) -> bool:
    """``text[:head_end]`` is ``<think>…</think>\\n`` (any content, lazily matched)."""
    head = text[:head_end]
    return (
        head.startswith("<think>")
        and head.endswith("</think>\n")
        and len(head) >= len("<think>") + len("</think>\n")
    )


def format_reward(response: Any, gold: str) -> float:
    """SAW Eq. 11 / AWPO Eq. 15: 1.0 if the response has the gold answer's structure, else 0.0."""
    text = clean_response(response)
    gold = _gold_answer(gold)
    has_call, has_resp = "<tool_call>" in gold, "<response>" in gold
    if not has_call and not has_resp:
        ok = text.startswith("<think>") and text.endswith("</think>") and len(text) >= 15
        return float(ok)
    counts_ok = True
    if has_call:
        counts_ok &= text.count("<tool_call>") == 1 and text.count("</tool_call>") == 1
    if has_resp:
        counts_ok &= text.count("<response>") == 1 and text.count("</response>") == 1
    if not counts_ok:
        return 0.0
    if has_resp:  # tail must be "<response>…</response>"
        if not text.endswith("</response>"):
            return 0.0
        r = text.index("<response>")
        if r + len("<response>") > len(text) - len("</response>"):
            return 0.0
        head_end = r
    if has_call:
        c = text.index("<tool_call>")
        c_end = text.index("</tool_call>")
        tail_start = c_end + len("</tool_call>")
        if has_resp:
            if text[tail_start:head_end] != "\n":
                return 0.0
        elif tail_start != len(text):
            return 0.0
        # "<tool_call>\n" + anything + "\n</tool_call>" (the two newlines may not overlap)
        if text[c : c + len("<tool_call>\n")] != "<tool_call>\n" or text[c_end - 1] != "\n":
            return 0.0
        if c_end - 1 < c + len("<tool_call>\n"):
            return 0.0
        head_end = c
    return float(_think_prefix_ok(text, head_end))


# --------------------------------------------------------------------------- correctness
def _match_score(list1: Sequence, list2: Sequence) -> float:
    """Multiset Jaccard of two lists (the authors' ``match_score``: equal lists → 1, empty → 0)."""
    if list(list1) == list(list2):
        return 1.0
    if not list1 or not list2:
        return 0.0
    c1, c2 = collections.Counter(list1), collections.Counter(list2)
    inter = sum((c1 & c2).values())
    union = len(list1) + len(list2) - inter
    return inter / union if union > 0 else 0.0


def _set_jaccard(list1: Sequence, list2: Sequence) -> float:
    """Jaccard of the *sets* of names (AWPO Eq. 16 as written); two empty sets → 1."""
    a, b = set(list1), set(list2)
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def _name_score(gold_names: Sequence, pred_names: Sequence, name_jaccard: str) -> float:
    if name_jaccard == "set":
        return _set_jaccard(gold_names, pred_names)
    return _match_score(gold_names, pred_names)


def _check_modes(matching: str, name_jaccard: str = "multiset", direct_reply: str = "eq19"):
    for key, value, allowed in (
        ("matching", matching, MATCHING_MODES),
        ("name_jaccard", name_jaccard, NAME_JACCARD_MODES),
        ("direct_reply", direct_reply, DIRECT_REPLY_MODES),
    ):
        if value not in allowed:
            raise ValueError(f"{key} must be one of {allowed}; got {value!r}")


def _pair_score(gold_call: dict, pred_call: dict) -> float:
    """Jaccard of parameter keys + number of gold parameters whose value is equal (Eqs. 13-14)."""
    g, p = gold_call["parameters"], pred_call["parameters"]
    keys = _match_score(list(g.keys()), list(p.keys()))
    values = sum(1.0 for k, v in g.items() if k in p and p[k] == v)
    return keys + values


def correctness_score(
    gold_calls: Sequence[dict],
    pred_calls: Sequence[dict],
    matching: str = "optimal",
    name_jaccard: str = "multiset",
) -> tuple[float, float]:
    """``(score, S_max)`` of SAW Eqs. 12-16 under the chosen matching and name Jaccard."""
    _check_modes(matching, name_jaccard)
    s_max = 1.0 + sum(1.0 + len(g["parameters"]) for g in gold_calls)
    if list(gold_calls) == list(pred_calls):
        return s_max, s_max
    score = _name_score(
        [g["name"] for g in gold_calls], [p["name"] for p in pred_calls], name_jaccard
    )
    if matching == "greedy":
        used: set[int] = set()
        for g in gold_calls:
            best, best_i = 0.0, -1
            for i, p in enumerate(pred_calls):
                if i in used or p["name"] != g["name"]:
                    continue
                s = _pair_score(g, p)
                if s > best:
                    best, best_i = s, i
            if best_i >= 0:
                used.add(best_i)
                score += best
    else:
        if gold_calls and pred_calls:
            from scipy.optimize import linear_sum_assignment

            mat = np.zeros((len(gold_calls), len(pred_calls)))
            for i, g in enumerate(gold_calls):
                for j, p in enumerate(pred_calls):
                    if p["name"] == g["name"]:
                        mat[i, j] = _pair_score(g, p)
            rows, cols = linear_sum_assignment(mat, maximize=True)
            score += float(mat[rows, cols].sum())
    return score, s_max


def correctness_reward(
    response: Any, gold: str, matching: str = "optimal", name_jaccard: str = "multiset"
) -> float:
    """SAW Eq. 17: ``6·score/S_max − 3`` ∈ [−3, 3] (0 if the gold has no tool call)."""
    _check_modes(matching, name_jaccard)
    gold = _gold_answer(gold)
    if "<tool_call>" not in gold:
        return 0.0
    gold_calls = parse_tool_calls(gold)  # a broken gold is a data error: let score_safe count it
    try:
        pred_calls = parse_tool_calls(clean_response(response))
    except ToolCallParseError:
        return -3.0
    score, s_max = correctness_score(gold_calls, pred_calls, matching, name_jaccard)
    return float(np.clip(6.0 * score / s_max - 3.0, -3.0, 3.0))


def _calls_no_tool(response: Any) -> bool:
    """The response's predicted tool-name set is empty: no ``<tool_call>`` tag, or a block that
    parses to zero calls. A block that does not parse is a (broken) call attempt."""
    text = clean_response(response)
    if "<tool_call>" not in text:
        return True
    try:
        return not parse_tool_calls(text)
    except ToolCallParseError:
        return False


def execution_score(
    response: Any,
    gold: str,
    matching: str = "optimal",
    *,
    name_jaccard: str = "multiset",
    direct_reply: str = "eq19",
) -> float:
    """AWPO Eq. 19: ``(r_name + r_para + r_value) / (1 + |T| + Σ|v(T_i)|)`` ∈ [0, 1].

    Args:
      response, gold: assistant text and ``reward_model.ground_truth``.
      matching: ``"optimal"`` or ``"greedy"`` pairing of predicted and gold calls.
      name_jaccard: ``"multiset"`` (ToolRL authors' code) or ``"set"`` (Eq. 16 as written).
      direct_reply: a gold without tool call: ``"eq19"`` (default; 1 if the response calls no
        tool, 0 for a spurious call) or ``"neutral"`` (the constant 0.5 mojax used before).
    """
    _check_modes(matching, name_jaccard, direct_reply)
    if "<tool_call>" not in _gold_answer(gold):
        if direct_reply == "neutral":
            return 0.5
        return float(_calls_no_tool(response))
    return (correctness_reward(response, gold, matching, name_jaccard) + 3.0) / 6.0


# --------------------------------------------------------------------------- VPO vector
_TOKEN = re.compile(r"\w+")


def _value_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, ensure_ascii=False)


def _f1_counts(pred: collections.Counter, gold: collections.Counter) -> float:
    inter = sum((pred & gold).values())
    if inter == 0:
        return 0.0
    p, r = inter / sum(pred.values()), inter / sum(gold.values())
    return 2 * p * r / (p + r)


def _value_f1(gold_v: Any, pred_v: Any) -> float:
    gs, ps = _value_text(gold_v), _value_text(pred_v)
    gt, pt = _TOKEN.findall(gs.lower()), _TOKEN.findall(ps.lower())
    if not gt or not pt:
        return float(gs.strip().lower() == ps.strip().lower())
    return _f1_counts(collections.Counter(pt), collections.Counter(gt))


def _key_f1(gold_keys: set, pred_keys: set) -> float:
    if not gold_keys and not pred_keys:
        return 1.0
    inter = len(gold_keys & pred_keys)
    if inter == 0:
        return 0.0
    p, r = inter / len(pred_keys), inter / len(gold_keys)
    return 2 * p * r / (p + r)


def vpo_reward_vector(response: Any, gold: str) -> np.ndarray:
    """VPO App. A.4: ``float32 [4]`` = (format, tool_name F1, arg_key F1, arg_value F1)."""
    text = clean_response(response)
    gold = str(gold)
    fmt = format_reward(text, gold)
    gold = _gold_answer(gold)
    if "<tool_call>" not in gold:
        t = float("<tool_call>" not in text)
        return np.array([fmt, t, t, t], np.float32)
    gold_calls = parse_tool_calls(gold)
    try:
        pred_calls = parse_tool_calls(text)
    except ToolCallParseError:
        return np.array([fmt, 0.0, 0.0, 0.0], np.float32)
    name_f1 = _f1_counts(
        collections.Counter(p["name"] for p in pred_calls),
        collections.Counter(g["name"] for g in gold_calls),
    )
    used: set[int] = set()
    key_f1s, value_f1s = [], []
    for g in gold_calls:  # greedy alignment: same name, then the largest key overlap
        gk = set(g["parameters"])
        best_i, best_overlap = -1, -1
        for i, p in enumerate(pred_calls):
            if i in used or p["name"] != g["name"]:
                continue
            overlap = len(gk & set(p["parameters"]))
            if overlap > best_overlap:
                best_i, best_overlap = i, overlap
        if best_i < 0:
            continue
        used.add(best_i)
        p = pred_calls[best_i]
        pk = set(p["parameters"])
        key_f1s.append(_key_f1(gk, pk))
        common = [k for k in g["parameters"] if k in pk]
        if common:
            value_f1s.append(
                float(np.mean([_value_f1(g["parameters"][k], p["parameters"][k]) for k in common]))
            )
        else:
            value_f1s.append(float(not gk and not pk))
    key = float(np.mean(key_f1s)) if key_f1s else 0.0
    value = float(np.mean(value_f1s)) if value_f1s else 0.0
    return np.array([fmt, name_f1, key, value], np.float32)


# --------------------------------------------------------------------------- task
_MODES = {
    # SAW / GDPO: (format, correctness)
    "toolrl": (
        Objective("format", 0.0, 1.0),
        Objective("correctness", -3.0, 3.0, success=True),
    ),
    # AWPO: R_out = format + exec (Eq. 14) and the judge's R_reason (filled by the trainer)
    "awpo": (
        Objective("r_out", 0.0, 2.0, success=True),
        Objective("r_reason", 0.0, 1.0, external=True),
    ),
    # VPO App. A.4
    "vpo": (
        Objective("format", 0.0, 1.0),
        Objective("tool_name", 0.0, 1.0, success=True),
        Objective("arg_key", 0.0, 1.0, success=True),
        Objective("arg_value", 0.0, 1.0, success=True),
    ),
}
_WEIGHTS = {"toolrl": (1.0, 1.0), "awpo": (1.0, 0.0), "vpo": (0.25, 0.25, 0.25, 0.25)}


class ToolRLTask(Task):
    """ToolRL single-step function calling.

    Args:
      mode: ``"toolrl"`` → (format, correctness) [SAW]; ``"awpo"`` → (r_out, r_reason external)
        [AWPO Eq. 14, 20]; ``"vpo"`` → the 4-D vector [VPO App. A.4].
      matching: ``"optimal"`` (default) or ``"greedy"`` for correctness / execution score.
      name_jaccard: ``"multiset"`` (default, ToolRL authors' code) or ``"set"`` (AWPO Eq. 16).
      direct_reply: AWPO execution score on golds without tool call: ``"eq19"`` (default) or
        ``"neutral"`` (constant 0.5); see :func:`execution_score`.
      swirl: decompose multi-turn dialogues into single-step instances (:func:`swirl_decompose`)
        in every file this task object loads (``task.load(path)``).
    """

    name = "toolrl"

    def __init__(
        self,
        mode: str = "toolrl",
        matching: str = "optimal",
        *,
        name_jaccard: str = "multiset",
        direct_reply: str = "eq19",
        swirl: bool = False,
    ):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {tuple(_MODES)}; got {mode!r}")
        _check_modes(matching, name_jaccard, direct_reply)
        self.mode, self.matching = mode, matching
        self.name_jaccard, self.direct_reply = name_jaccard, direct_reply
        self.swirl = bool(swirl)
        if self.swirl:  # the instance's loader shadows the static one
            self.load = lambda path: swirl_decompose(ToolRLTask.load(path))
        self.objectives = _MODES[mode]
        self.scalar_weights = _WEIGHTS[mode]

    @staticmethod
    def load(path: str) -> list[Example]:
        """Examples from the rlla_4k parquet (``prompt``, ``reward_model.ground_truth``) or the SFT
        JSON (``instruction``, ``input``, ``output``)."""
        return [record_to_example(r, i, path) for i, r in enumerate(data_lib.read_records(path))]

    def messages(self, example: Example, *, num_answers: int | None = None):
        msgs = [dict(m) for m in example.messages]
        if num_answers is not None:
            msgs[-1]["content"] += MULTI_ANSWER_INSTRUCTION.format(m=int(num_answers))
        return msgs

    def score(self, response: str, example: Example) -> np.ndarray:
        gold = example.target
        if self.mode == "toolrl":
            correct = correctness_reward(response, gold, self.matching, self.name_jaccard)
            return np.array([format_reward(response, gold), correct])
        if self.mode == "awpo":
            exe = execution_score(
                response,
                gold,
                self.matching,
                name_jaccard=self.name_jaccard,
                direct_reply=self.direct_reply,
            )
            return np.array([format_reward(response, gold) + exe, 0.0])
        return vpo_reward_vector(response, gold)
