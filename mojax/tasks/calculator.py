"""Calculator tool use: mojax's own small task for the embedded default run.

Generated arithmetic of graded difficulty — ``easy`` single-digit ``+ - *`` (mental arithmetic
suffices), ``medium`` two-digit ``+ -``, ``hard`` multi-digit products (where the model should call
the tool). The prompt is one short user turn, ``"Compute 37*48."``. The model may answer directly,
``<answer>1776</answer>``, or call the calculator first: it writes ``<calc>37*48</calc>`` (the
rollout stops at ``</calc>``, runs the tool on :meth:`CalculatorTask.parse_tool_call`'s expression
and appends :meth:`CalculatorTask.format_observation`'s ``<output>1776</output>``), then answers.

Objectives ``(r_task, r_tool)``: ``r_task`` = 1 if the last ``<answer>`` equals the result;
``r_tool`` (ParetoPO, arXiv:2606.16111, Eq. 4) is external, filled by the trainer from ``n_calls`` and ``N_opt``.

:func:`sft_demonstrations` writes full transcripts mixing four behaviours — always call, never call,
call only when hard, with occasional mental-arithmetic errors on direct answers — with the
observation segments marked so SFT can mask them. Never calling is then cheap but inaccurate on hard
problems and always calling is accurate but wasteful: RL has a real accuracy/efficiency trade-off.

Splits are disjoint by construction: a problem belongs to ``test`` / ``validation`` / ``train`` by
a hash of its expression (10% / 10% / 80%), and each split draws from its own seeded stream.

``task.kwargs.problems="rule"`` (default ``"facts"``, the set above) replaces the easy class with
problems a rule visible in them solves (``x+0``, ``x*1`` -> ``x``; ``x*0``, ``x-x`` -> 0) on
multi-digit operands never seen in training, drawn without replacement; see
:mod:`mojax.tasks.calculator_rule`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Mapping, Sequence

import numpy as np

from mojax.tasks import calculator_rule as rule_set
from mojax.tasks.framework.base import Example, Objective, Splits, Task, clean_response
from mojax.tasks.framework.splits import validation_size
from mojax.tasks.qa import extract_tag

__all__ = [
    "DIFFICULTIES",
    "SPLITS",
    "Problem",
    "generate_problems",
    "Demo",
    "sft_demonstrations",
    "tokenize_demo",
    "CalculatorTask",
    "DEFAULT_BEHAVIOURS",
    "DEFAULT_MENTAL_ERROR",
    "THINK_TAGS",
    "think_plan",
    "think_format",
]

DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "validation", "test")
DEFAULT_MIX = {"easy": 0.3, "medium": 0.3, "hard": 0.4}
DEFAULT_BEHAVIOURS = {"always": 0.3, "never": 0.3, "when_hard": 0.4}
BEHAVIOURS = ("always", "never", "when_hard", "redundant")
MODES = ("tool", "awpo")  # (r_task, r_tool), or AWPO's (r_out, r_reason) with a judged plan
# probability that a direct (mental) answer is wrong, per difficulty
DEFAULT_MENTAL_ERROR = {"easy": 0.02, "medium": 0.1, "hard": 0.7}
_MAX_EXPR_CHARS = 200
THINK_TAGS = ("<think>", "</think>")
_INT = re.compile(r"^[+-]?\d[\d,]*$")


@dataclasses.dataclass(frozen=True)
class Problem:
    a: int
    op: str
    b: int
    difficulty: str

    @property
    def expr(self) -> str:
        return f"{self.a}{self.op}{self.b}"

    @property
    def answer(self) -> int:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b}[self.op]

    @property
    def is_hard(self) -> bool:
        return self.difficulty == "hard"


def _sample(rng: random.Random, difficulty: str, easy_ops: str = "+-*") -> Problem:
    if difficulty == "easy":
        return Problem(rng.randint(0, 9), rng.choice(easy_ops), rng.randint(0, 9), difficulty)
    if difficulty == "medium":
        return Problem(rng.randint(10, 99), rng.choice("+-"), rng.randint(10, 99), difficulty)
    if rng.random() < 0.5:
        return Problem(rng.randint(12, 99), "*", rng.randint(12, 99), difficulty)
    return Problem(rng.randint(100, 999), "*", rng.randint(3, 9), difficulty)


def _split_of(expr: str) -> str:
    bucket = int(hashlib.sha256(expr.encode()).hexdigest(), 16) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def generate_problems(
    split: str,
    num: int,
    *,
    seed: int = 0,
    mix: Mapping[str, float] | None = None,
    shared_easy_facts: bool = False,
    easy_ops: str = "+-*",
) -> list[Problem]:
    """``num`` problems of ``split``, deterministic in ``seed``; difficulties drawn from ``mix``.

    Problems may repeat within a split (there are only 300 easy ones), never across splits —
    except with ``shared_easy_facts``: the 300 single-digit facts then appear in every split (they
    are knowledge a model is expected to have, like a times table, not problems to generalise to),
    while medium and hard problems stay disjoint across splits.
       ``easy_ops`` restricts the single-digit operators of easy problems (e.g. ``"+"``).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
    mix = dict(DEFAULT_MIX if mix is None else mix)
    if set(mix) - set(DIFFICULTIES) or not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"mix must map a subset of {DIFFICULTIES} to weights >= 0; got {mix}")
    rng = random.Random(int(seed) * len(SPLITS) + SPLITS.index(split))
    names, weights = list(mix), [mix[k] for k in mix]
    out: list[Problem] = []
    while len(out) < num:  # draw the difficulty first, so every split follows ``mix``
        difficulty = rng.choices(names, weights)[0]
        while True:
            p = _sample(rng, difficulty, easy_ops)
            if _split_of(p.expr) == split or (shared_easy_facts and difficulty == "easy"):
                out.append(p)
                break
    return out


@dataclasses.dataclass(frozen=True)
class Demo:
    """One SFT transcript: ``segments`` of ``(text, trainable)``; observations are not trainable."""

    example: Example
    segments: tuple[tuple[str, bool], ...]
    behaviour: str
    n_calls: int
    correct: bool

    @property
    def response(self) -> str:
        return "".join(text for text, _ in self.segments)


def _wrong(rng: random.Random, answer: int) -> int:
    delta = rng.choice([1, 2, 3, 5, 9, 10, 20, 100]) * rng.choice([-1, 1])
    return answer + delta


class CalculatorTask(Task):
    """Arithmetic with an optional calculator: ``(r_task, r_tool)``, ``w = (0.6, 0.4)``."""

    name = "calculator"
    objectives = (
        Objective("r_task", 0.0, 1.0, success=True),
        Objective("r_tool", 0.0, 1.0, external=True),
    )
    scalar_weights = (0.6, 0.4)
    tool_stop = "</calc>"

    def __init__(
        self,
        shared_easy_facts: bool = False,
        easy_ops: str = "+-*",
        mode: str = "tool",
        problems: str = "facts",
        recall: float = 0.0,
        digit: float = 0.0,
        carry: float = 0.0,
    ):
        if not easy_ops or set(easy_ops) - set("+-*"):
            raise ValueError(f"easy_ops must be a non-empty subset of '+-*'; got {easy_ops!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
        if problems not in rule_set.PROBLEM_SETS:
            raise ValueError(f"problems must be one of {rule_set.PROBLEM_SETS}; got {problems!r}")
        extra = {"recall": recall, "digit": digit, "carry": carry}  # classes beside task.mix
        for k, v in extra.items():
            if v < 0 or (v and problems != "rule"):
                raise ValueError(f"{k} must be >= 0, and > 0 only with problems='rule'; got {v}")
        self.problems, self.recall = problems, float(recall)
        self.extra_classes = {k: float(v) for k, v in extra.items() if k != "recall" and v}
        self.shared_easy_facts, self.easy_ops, self.mode = bool(shared_easy_facts), easy_ops, mode
        if mode == "awpo":  # AWPO (arXiv:2512.19126): an outcome and a judged reasoning reward
            self.objectives = (
                Objective("r_out", 0.0, 2.0, success=True),  # <think> plan format + correct
                Objective("r_reason", 0.0, 1.0, external=True),  # the judge's score of the plan
            )
            self.scalar_weights = (1.0, 0.0)

    @staticmethod
    def example(problem: Problem, ex_id: str) -> Example:
        msgs = ({"role": "user", "content": f"Compute {problem.expr}."},)
        meta = {"expr": problem.expr, "difficulty": problem.difficulty, "problem": problem}
        return Example(ex_id, msgs, problem.answer, meta)

    def load(
        self, split: str, num: int, *, seed: int = 0, mix: Mapping[str, float] | None = None
    ) -> list[Example]:
        """``num`` generated examples of ``split`` (see :func:`generate_problems`; with
        ``problems="rule"``, :func:`mojax.tasks.calculator_rule.generate_rule_problems`)."""
        if self.problems == "rule":
            probs = rule_set.generate_rule_problems(
                split,
                num,
                seed=seed,
                mix=rule_set.rule_mix(mix, self.recall, **self.extra_classes),
                make=Problem,
                recall_ops=self.easy_ops,
            )
            return [self.example(p, f"calc/{seed}/{split}/{i}") for i, p in enumerate(probs)]
        probs = generate_problems(
            split,
            num,
            seed=seed,
            mix=mix,
            shared_easy_facts=self.shared_easy_facts,
            easy_ops=self.easy_ops,
        )
        return [self.example(p, f"calc/{seed}/{split}/{i}") for i, p in enumerate(probs)]

    # ------------------------------------------------------------------ run plumbing
    builds_vocabulary = True  # the tiny recipe trains a sentencepiece on the task's own text
    tiny_sft_steps = 500  # the tiny recipe's warm start on mixed-behaviour demonstrations
    think_reward = "mojax.tasks.calculator:think_format"

    @classmethod
    def configure(cls) -> dict:
        """Recipe defaults: the ``rule`` problem set (:mod:`mojax.tasks.calculator_rule`), whose
        no-call class is solved by a rule visible in the problem on operands never seen in training
        (the ``facts`` set's single-digit sums are recall, and a tiny model cannot add the held-out
        ones); 1024 distinct held-out test problems and a 128-problem validation split
        (a method's validation vector), all disjoint from training, evaluated 128 problems at a
        time; held-out accuracy and tool calls are avg@4 of the sampling policy (the RL objective's policy; greedy decoding of a
        tiny model hides its uncertainty behind the argmax)."""
        kwargs = {"shared_easy_facts": False, "easy_ops": "+", "problems": "rule", "recall": 0.0}
        kwargs |= {"digit": 0.0, "carry": 0.0}  # the x+d classes' weights beside task.mix
        return {
            "task.kwargs": kwargs,
            "task.num_eval": 1024,
            "task.num_validation": 128,
            "eval.temperature": 1.0,
            "eval.num_samples": 4,
            "eval.ks": (1, 2, 4),
            "eval.batch_prompts": 128,  # 512 rows per batch: 4096 at once need ~14 GiB
        }

    def load_splits(self, spec, *, seed: int) -> Splits:
        """Each split generated from its own stream with the difficulty ``spec.mix``."""
        mix, n_eval = dict(spec.mix), int(spec.num_eval)
        return Splits(
            self.load("train", int(spec.num_train), seed=seed, mix=mix),
            self.load("validation", validation_size(spec), seed=seed, mix=mix),
            self.load("test", n_eval, seed=seed, mix=mix),
            self,
        )

    def make_tool(self, rollout, splits):
        from mojax.rollout.tools import Calculator

        del rollout, splits
        return Calculator()

    def has_demonstrations(self, sft) -> bool:
        return True

    def sft_rows(self, sft, tokenizer, train, *, seed: int, num_answers: int):
        """Mixed-behaviour transcripts (``sft.behaviours``), observations out of the loss."""
        del num_answers
        demos = sft_demonstrations(
            train[: sft.num_examples],
            seed=int(seed),
            behaviours=dict(sft.behaviours),
            think_rate=float(sft.think_rate),
            problems=self.problems,
        )
        eos = int(tokenizer.eos_token_id)
        return [tokenize_demo(d, tokenizer, end_token_id=eos) for d in demos]

    def vocab_corpus(self, splits, render, *, sft, seed: int, num_answers: int):
        """Every prompt, the SFT transcripts (answers, tags and observations) and every digit
        and sign in every position the model may need."""
        texts = super().vocab_corpus(splits, render, sft=sft, seed=seed, num_answers=num_answers)
        demos = sft_demonstrations(
            splits.train, seed=seed, think_rate=float(sft.think_rate), problems=self.problems
        )
        return texts + [d.response for d in demos] + ["0123456789 -+*=.,"]

    def vocab_symbols(self, sft) -> tuple[str, ...]:
        """The shared tags, and ``<think>`` / ``</think>`` when the demos show a plan (or the
        rewards ask for one)."""
        think = float(sft.think_rate) > 0 or self.mode == "awpo"
        return super().vocab_symbols(sft) + (THINK_TAGS if think else ())

    def config_errors(self, spec) -> list[str]:
        return []

    # ------------------------------------------------------------------ tool protocol
    def parse_tool_call(self, text: str) -> str | None:
        """Expression of the last ``<calc>…</calc>`` in ``text`` (None if absent, empty or
        longer than 200 characters)."""
        expr = extract_tag(text, "calc")
        if expr is None:
            return None
        expr = expr.strip()
        return expr if 0 < len(expr) <= _MAX_EXPR_CHARS else None

    def format_observation(self, result_text: str) -> str:
        """``<output>RESULT</output>``, appended after ``</calc>`` (loss-masked)."""
        return f"<output>{str(result_text).strip()}</output>"

    def count_tool_calls(self, response: str) -> int:
        return str(response).count("</calc>")

    # ------------------------------------------------------------------ reward
    @staticmethod
    def parse_answer(response: str) -> int | None:
        ans = extract_tag(clean_response(response), "answer")
        if ans is None:
            return None
        ans = ans.strip()
        if not _INT.match(ans) or len(ans) > 40:
            return None
        return int(ans.replace(",", ""))

    def score(self, response: str, example: Example) -> np.ndarray:
        pred = self.parse_answer(response)
        correct = float(pred is not None and pred == int(example.target))
        if self.mode == "awpo":
            return np.array([think_format(response) + correct, 0.0])
        return np.array([correct, 0.0])

    # ------------------------------------------------------------------ tool efficiency
    def optimal_calls(self, example: Example) -> int:
        """The fixed ``N_opt`` of a problem: 0 for an easy one (a known single-digit fact), 1 for
        the others (one call gives the exact result). With ``problems="rule"``: 0 where no tool is
        needed (:meth:`needs_tool`), 1 otherwise."""
        if self.problems == "rule":
            return int(self.needs_tool(example))
        return 0 if example.meta["difficulty"] == "easy" else 1

    def needs_tool(self, example: Example) -> bool:
        """Whether the problem needs the tool: not when a rule visible in it solves it (``x+0``,
        ``x*1``, ``x*0``, ``x-x`` ...) or it is a fact shared by every split (``recall``, or the
        facts set's ``easy`` with ``shared_easy_facts``); a held-out single-digit sum never seen
        in training needs it."""
        cls = example.meta["difficulty"]
        shared = cls == "recall" or (cls == "easy" and self.shared_easy_facts)
        return rule_set.needs_tool(example.meta["problem"], shared=shared)

    def judge_reference(self, example: Example) -> str:
        """The plan a reasoning judge compares with: the decision the fixed ``N_opt`` makes."""
        return think_plan(self.optimal_calls(example) > 0)

    def eval_metrics(self, examples, rewards, valid, n_calls) -> dict[str, float]:
        """``tool_efficiency``: the mean over samples of ``exp(-0.7 |N_call - N_opt|)`` against
        the fixed ``N_opt`` (:meth:`optimal_calls`; ParetoPO, arXiv:2606.16111, Eq. 4's form with
        its ``alpha``), whether or not the sample succeeded; ``redundant_calls``: the mean number
        of calls beyond ``N_opt``; ``unneeded_calls``: the mean number of calls the problem does
        not need (every call where :meth:`needs_tool` is False, else the calls beyond the first);
        per class (``example.meta["difficulty"]``): ``tool_eff/<class>``,
        ``unneeded_calls/<class>``."""
        del rewards, valid
        n_opt = np.asarray([self.optimal_calls(ex) for ex in examples], np.float64)[:, None]
        calls = np.asarray(n_calls, np.float64)
        eff = np.exp(-0.7 * np.abs(calls - n_opt))
        needed = np.asarray([self.needs_tool(ex) for ex in examples], bool)[:, None]
        unneeded = np.where(needed, np.maximum(calls - 1.0, 0.0), calls)
        out = {
            "tool_efficiency": float(eff.mean()),
            "redundant_calls": float(np.maximum(calls - n_opt, 0.0).mean()),
            "unneeded_calls": float(unneeded.mean()),
        }
        classes = np.asarray([ex.meta["difficulty"] for ex in examples])
        for cls in sorted(set(classes)):
            out[f"tool_eff/{cls}"] = float(eff[classes == cls].mean())
            out[f"unneeded_calls/{cls}"] = float(unneeded[classes == cls].mean())
        return out


def sft_demonstrations(
    examples: Sequence[Example],
    *,
    seed: int = 0,
    behaviours: Mapping[str, float] | None = None,
    mental_error: Mapping[str, float] | None = None,
    think_rate: float = 0.0,
    problems: str = "facts",
) -> list[Demo]:
    """One transcript per example, behaviour drawn per demo from ``behaviours``.

    Args:
      examples: calculator examples (from :meth:`CalculatorTask.load`).
      seed: the demos are a deterministic function of (examples, seed, settings).
      behaviours: weights of ``"always"`` (call every time), ``"never"`` (answer directly),
        ``"when_hard"`` (call only on hard problems) and ``"redundant"`` (call, then call again
        with the same expression before answering: a warm start that over-calls).
      mental_error: per difficulty, the probability that a direct answer is off (by ±1 … ±100).
      think_rate: the probability that a demo opens with a plan, ``<think>tool</think>`` or
        ``<think>mental</think>`` (:func:`think_plan`), the format :func:`think_format` rewards.
        At 0 (the default) no draw is made: the random stream (and so every demo) is the same as
        without the argument.
      problems: ``"facts"`` (the default problem set) or ``"rule"``
        (:mod:`mojax.tasks.calculator_rule`): ``when_hard`` then calls exactly when the problem
        needs the tool, and ``mental_error`` defaults to ``RULE_MENTAL_ERROR`` (0 on the rule
        and digit classes, 0.5 / 0.7 / 0.5 on medium, hard and carry).
    """
    behaviours = dict(DEFAULT_BEHAVIOURS if behaviours is None else behaviours)
    rule = problems == "rule"
    classes = rule_set.RULE_CLASSES if rule else DIFFICULTIES
    default_error = rule_set.RULE_MENTAL_ERROR if rule else DEFAULT_MENTAL_ERROR
    mental_error = dict(default_error if mental_error is None else mental_error)
    if set(behaviours) - set(BEHAVIOURS) or sum(behaviours.values()) <= 0:
        raise ValueError(f"behaviours must weight some of {BEHAVIOURS}; got {behaviours}")
    if set(mental_error) != set(classes) or not all(0.0 <= v <= 1.0 for v in mental_error.values()):
        raise ValueError(f"mental_error must give a probability per {classes}")
    if not 0.0 <= think_rate <= 1.0:
        raise ValueError(f"think_rate must lie in [0, 1]; got {think_rate}")
    task = CalculatorTask(problems="rule" if rule else "facts")
    rng = random.Random(seed)
    names, weights = list(behaviours), [behaviours[k] for k in behaviours]
    demos = []
    for ex in examples:
        prob: Problem = ex.meta["problem"]
        behaviour = rng.choices(names, weights)[0]
        needed = task.needs_tool(ex) if rule else prob.is_hard
        call = behaviour in ("always", "redundant") or (behaviour == "when_hard" and needed)
        if call:
            one = (
                (f"<calc>{prob.expr}</calc>", True),
                (task.format_observation(str(prob.answer)), False),
            )
            calls = 2 if behaviour == "redundant" else 1
            segments = (*(one * calls), (f"<answer>{prob.answer}</answer>", True))
            answer = prob.answer
        else:
            answer = prob.answer
            if rng.random() < mental_error[prob.difficulty]:
                answer = _wrong(rng, prob.answer)
            segments = ((f"<answer>{answer}</answer>", True),)
        if think_rate > 0 and rng.random() < think_rate:
            segments = ((think_plan(call), True), *segments)
        n_calls = (2 if behaviour == "redundant" else 1) if call else 0
        demos.append(Demo(ex, segments, behaviour, n_calls, answer == prob.answer))
    return demos


def think_plan(call: bool) -> str:
    """The plan a demo may open with: ``<think>tool</think>`` before a call, else
    ``<think>mental</think>``."""
    return f"{THINK_TAGS[0]}{'tool' if call else 'mental'}{THINK_TAGS[1]}"


def think_format(response: str, example: Example | None = None) -> float:
    """A format objective for the calculator (``config.task.extra_rewards``; ``think=`` of the
    method configs): 1 if the response opens with a non-empty ``<think>…</think>`` plan that holds
    no other tag and is followed by an ``<answer>``, else 0. Like ToolRL's format reward
    (arXiv:2504.13958; SAW, arXiv:2606.07705, Sec. 5.1), it checks structure, not correctness.
    """
    del example
    text = clean_response(response).lstrip()
    open_, close = THINK_TAGS
    if not text.startswith(open_) or close not in text:
        return 0.0
    plan, _, rest = text[len(open_) :].partition(close)
    ok = plan.strip() and "<" not in plan and extract_tag(rest, "answer") is not None
    return float(bool(ok))


def tokenize_demo(demo: Demo, tokenizer, *, end_token_id: int | None = None):
    """``(token_ids, loss_mask)`` of a demo for SFT: the chat-template prompt (mask 0), then each
    segment tokenised on its own (mask 1 for the policy's text, 0 for tool observations), then the
    end-of-turn token (mask 1; default ``tokenizer.eos_token_id``).

    Segments are tokenised separately because that is how the rollout builds the sequence: the
    policy's tokens up to ``</calc>``, then the observation's own tokens appended.
    """
    prompt = CalculatorTask().build_prompt(demo.example, tokenizer)
    ids = list(tokenizer.encode(prompt, add_special_tokens=False))
    mask = [0] * len(ids)
    for text, trainable in demo.segments:
        seg = list(tokenizer.encode(text, add_special_tokens=False))
        ids += seg
        mask += [int(trainable)] * len(seg)
    end = tokenizer.eos_token_id if end_token_id is None else end_token_id
    if end is not None:
        ids.append(int(end))
        mask.append(1)
    return ids, mask
