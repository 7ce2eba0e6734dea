"""The calculator's rule problem set (``task.kwargs.problems="rule"``).

Under the default problem set (``"facts"``) the problems that need no tool are the single-digit
sums, and a tiny model answers them from memory: 100 sums, 9 of them in every test split, so a
held-out "easy" problem measures recall of a fact never trained on, not a skill. Here the class
that needs no tool is solved by a rule visible in the problem, on operands never seen in training:

* ``rule``: ``x+0``, ``0+x``, ``x-0``, ``x*1``, ``1*x`` (copy ``x``) and ``x*0``, ``0*x``, ``x-x``
  (answer 0), with ``10 <= x <= 99999``. The split is a hash of ``x`` (not of the expression), so a
  held-out operand never appears in a training problem of any form;
* ``medium``: ``a+b`` / ``a-b`` with ``10 <= a, b <= 999`` (no rule applies; redrawn if one does);
* ``hard``: ``a*b`` with ``12 <= a <= 999``, ``12 <= b <= 99``;
* ``recall`` (optional, ``task.kwargs.recall`` > 0): single-digit facts of ``easy_ops``, shared by
  every split (knowledge, like a times table; reported as its own class, never as held-out skill).
* ``digit`` and ``carry`` (weights ``task.kwargs.digit`` / ``carry``, 0 by default): ``x+d`` /
  ``d+x`` with ``10 <= x <= 99999`` and ``1 <= d <= 9``. Without a carry (``x % 10 + d <= 9``,
  class ``digit``) a rule visible in the problem solves it: copy ``x`` with its last digit replaced
  by a single-digit sum; with one (``carry``) the carry runs into ``x``'s other digits, and the
  tool is needed. The two share the
  operand ``x`` (split by its hash), so telling them apart is a learned rule too: a class where a
  direct answer is right only when the model reads the problem correctly, so accuracy can be bought
  with calls (the accuracy-efficiency conflict ParetoPO's ranking needs, ``docs/methods.md``).

``rule``, ``medium`` and ``hard`` problems are split 10% / 10% / 80% (test / validation / train) by
hash and drawn **without replacement** within a split, so held-out problems are distinct and
disjoint from training by expression; each held-out split holds thousands of distinct problems per
class (about ten thousand operands in 8 forms for ``rule``). The fixed ``N_opt`` is 0 where no tool is
needed (a rule applies, or a shared ``recall`` fact) and 1 otherwise (:func:`needs_tool`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping

__all__ = [
    "PROBLEM_SETS",
    "RULE_CLASSES",
    "DEFAULT_RULE_MIX",
    "RULE_MENTAL_ERROR",
    "RULE_FORMS",
    "rule_solvable",
    "digit_without_carry",
    "needs_tool",
    "rule_mix",
    "generate_rule_problems",
]

PROBLEM_SETS = ("facts", "rule")
RULE_CLASSES = ("rule", "medium", "hard", "recall", "digit", "carry")
DEFAULT_RULE_MIX = {"rule": 0.5, "medium": 0.1, "hard": 0.4}
# probability that a direct (mental) answer of a demonstration is wrong, per class: the rule class is
# solvable without the tool, the multi-digit classes are not
RULE_MENTAL_ERROR = {
    "rule": 0.0, "recall": 0.02, "medium": 0.5, "hard": 0.7, "digit": 0.0, "carry": 0.5
}  # fmt: skip
RULE_FORMS = ("x+0", "0+x", "x-0", "x*1", "1*x", "x*0", "0*x", "x-x")
RULE_OPERANDS = (10, 99999)
_SPLITS = ("train", "validation", "test")
_MAX_TRIES = 200_000  # draws of one class before a split is declared exhausted


def rule_solvable(a: int, op: str, b: int) -> bool:
    """Whether ``a op b`` is solved by a rule visible in it: ``x+0``, ``0+x``, ``x-0``, ``x-x``,
    ``x*0``, ``0*x``, ``x*1``, ``1*x``."""
    if op == "+":
        return a == 0 or b == 0
    if op == "-":
        return b == 0 or a == b
    if op == "*":
        return a in (0, 1) or b in (0, 1)
    return False


def digit_without_carry(a: int, op: str, b: int) -> bool:
    """Whether ``a op b`` is ``x+d`` / ``d+x`` (``x >= 10``, ``1 <= d <= 9``) whose last digit takes
    no carry (``x % 10 + d <= 9``): the ``digit`` class's rule."""
    x, d = max(a, b), min(a, b)
    return op == "+" and x >= 10 and 1 <= d <= 9 and x % 10 + d <= 9


def needs_tool(problem, *, shared: bool) -> bool:
    """False when a rule solves ``problem`` or it is a fact shared by every split (``shared``: its
    class is knowledge, ``recall`` or the facts set's shared ``easy``), else True."""
    a, op, b = problem.a, problem.op, problem.b
    if rule_solvable(a, op, b) or digit_without_carry(a, op, b):
        return False
    return not shared


def rule_mix(
    mix: Mapping[str, float] | None, recall: float = 0.0, **extra: float
) -> dict[str, float]:
    """The class weights of the rule set: ``mix`` with ``easy`` read as ``rule`` (the class that
    needs no tool, so the default ``config.task.mix`` works), plus ``recall`` and each of ``extra``
    (``digit=``, ``carry=``: ``task.kwargs``, since ``config.task.mix`` takes no new keys from the
    command line) when > 0, in that order."""
    out: dict[str, float] = {}
    for k, v in dict(DEFAULT_RULE_MIX if mix is None else mix).items():
        name = "rule" if k == "easy" else k
        if name not in RULE_CLASSES or name in out:
            raise ValueError(
                f"mix of the rule problems must map a subset of {RULE_CLASSES} ('easy' = 'rule') "
                f"to weights >= 0; got {dict(mix or {})}"
            )
        out[name] = float(v)
    for name, v in {"recall": recall, **extra}.items():
        if name not in RULE_CLASSES or (v and name in out):
            raise ValueError(f"class {name!r} is unknown or also in the mix {dict(mix or {})}")
        if v:
            out[name] = float(v)
    if not out or min(out.values()) < 0 or sum(out.values()) <= 0:
        raise ValueError(f"mix of the rule problems needs weights >= 0, some > 0; got {out}")
    return out


def _hash_split(key: str) -> str:
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def _draw(rng: random.Random, cls: str, ops: str, make):
    """One problem of ``cls`` and the key that decides its split (None: shared by every split)."""
    if cls == "rule":
        x = rng.randint(*RULE_OPERANDS)
        a, op, b = rng.choice(RULE_FORMS)
        return make(x if a == "x" else int(a), op, x if b == "x" else int(b), cls), f"rule:{x}"
    if cls == "medium":
        while True:
            a, op, b = rng.randint(10, 999), rng.choice("+-"), rng.randint(10, 999)
            if not rule_solvable(a, op, b):
                return make(a, op, b, cls), f"{a}{op}{b}"
    if cls == "hard":
        a, b = rng.randint(12, 999), rng.randint(12, 99)
        return make(a, "*", b, cls), f"{a}*{b}"
    if cls in ("digit", "carry"):
        x = rng.randint(*RULE_OPERANDS)
        last = x % 10
        while (cls == "digit" and last == 9) or (cls == "carry" and last == 0):
            x = rng.randint(*RULE_OPERANDS)  # no such d for this x: draw another
            last = x % 10
        d = rng.randint(1, 9 - last) if cls == "digit" else rng.randint(10 - last, 9)
        a, b = (x, d) if rng.random() < 0.5 else (d, x)
        return make(a, "+", b, cls), f"digit:{x}"
    return make(rng.randint(0, 9), rng.choice(ops), rng.randint(0, 9), cls), None


def generate_rule_problems(
    split: str,
    num: int,
    *,
    seed: int,
    mix: Mapping[str, float],
    make,
    recall_ops: str = "+",
) -> list:
    """``num`` problems of ``split``, deterministic in ``seed``; classes drawn from ``mix`` (see
    :func:`rule_mix`). ``make(a, op, b, cls)`` builds a problem (``calculator.Problem``).

    ``rule`` / ``medium`` / ``hard`` problems belong to one split by hash and never repeat within
    it (drawn without replacement); ``recall`` facts are shared by every split and may repeat.
    A split that runs out of distinct problems of a class is a ValueError naming it.
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {_SPLITS}; got {split!r}")
    rng = random.Random(f"calculator-rule/{int(seed)}/{split}")
    names = list(mix)
    weights = [mix[k] for k in names]
    seen: set[str] = set()
    out = []
    while len(out) < num:
        cls = rng.choices(names, weights)[0]
        for _ in range(_MAX_TRIES):
            problem, key = _draw(rng, cls, recall_ops, make)
            if key is None or (_hash_split(key) == split and problem.expr not in seen):
                break
        else:
            raise ValueError(f"split {split!r} ran out of distinct {cls!r} problems at {len(out)}")
        if key is not None:
            seen.add(problem.expr)
        out.append(problem)
    return out
