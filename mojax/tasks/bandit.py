"""A contextual bandit over route strategies: a fast sanity check of VPO's claim where the answer is
known (VPO, arXiv:2605.22817: a scalar objective collapses onto one answer, a set objective keeps
covering the trade-offs).

A prompt names a context ``c`` (visible) and ``K`` routes ``A, B, ...``; route ``k`` in context ``c``
earns the fixed reward vector ``R[c, k] in [0, 1]^M`` (``M = 3``: speed, safety, scenery), drawn once
from ``table_seed`` so that every context has several Pareto-optimal routes with different
trade-offs. The policy cannot see ``R``; it learns it from rewards. The best answer of every
context, for every weighting ``w``, is known (``best_at_k`` over the table), so best@k and
diversity of a trained policy can be read against the optimum.

The task is a bandit: every split draws from the same contexts (the held-out splits are fresh
samples of the same contexts, not unseen ones); its purpose is the optimisation claim, not
generalisation. Single answers are ``<answer>X</answer>``; a set of ``S`` answers is
``<route_1>X</route_1> ... <route_S>Y</route_S>`` (``task.num_answers = S``).
"""

from __future__ import annotations

import random

import numpy as np

from mojax.tasks.framework.base import Example, Objective, Splits, Task, demo_row
from mojax.tasks.framework.splits import validation_size
from mojax.tasks.qa import extract_tag

__all__ = ["RouteBanditTask", "route_table"]

OBJECTIVES = ("speed", "safety", "scenery")


def route_table(num_contexts: int, num_routes: int, seed: int = 0) -> np.ndarray:
    """``R [C, K, M]``: per context, ``K`` reward vectors in ``[0, 1]^M``, redrawn until at least
    three routes of the context are Pareto-optimal (so a set has trade-offs to cover)."""
    from mojax.pareto import nondominated_rank

    rng = np.random.default_rng(seed)
    table = np.zeros((num_contexts, num_routes, len(OBJECTIVES)))
    for c in range(num_contexts):
        while True:
            r = np.round(rng.uniform(0.0, 1.0, (num_routes, len(OBJECTIVES))), 2)
            if (np.asarray(nondominated_rank(r[None]))[0] == 0).sum() >= min(3, num_routes):
                table[c] = r
                break
    return table


class RouteBanditTask(Task):
    """The route bandit (see the module docstring)."""

    name = "route_bandit"
    answer_tag = "route"
    objectives = tuple(Objective(n, 0.0, 1.0) for n in OBJECTIVES)
    scalar_weights = (1 / 3, 1 / 3, 1 / 3)

    def __init__(self, num_contexts: int = 8, num_routes: int = 6, table_seed: int = 0):
        if not 1 <= num_routes <= 26 or num_contexts < 1:
            raise ValueError(f"need 1 <= num_routes <= 26 and num_contexts >= 1; got {num_routes}")
        self.num_contexts, self.num_routes = int(num_contexts), int(num_routes)
        self.routes = tuple(chr(ord("A") + k) for k in range(self.num_routes))
        self.table = route_table(self.num_contexts, self.num_routes, table_seed)

    # ------------------------------------------------------------------ prompts
    def load(self, split: str, num: int, seed: int = 0) -> list[Example]:
        """``num`` prompts of ``split``, the contexts in a seeded order that cycles through all."""
        rng = random.Random(f"{seed}/{split}")
        out = []
        for i in range(num):
            if i % self.num_contexts == 0:
                order = list(range(self.num_contexts))
                rng.shuffle(order)
            c = order[i % self.num_contexts]
            text = (
                f"Context {c}. Routes: {', '.join(self.routes)}. Pick the best route for this "
                "context. Answer as <answer>X</answer>."
            )
            out.append(Example(f"bandit/{split}/{i}", ({"role": "user", "content": text},), c))
        return out

    def messages(self, example: Example, *, num_answers: int | None = None):
        if num_answers is None:
            return [dict(m) for m in example.messages]
        tags = " ".join(f"<route_{i}>X</route_{i}>" for i in range(1, int(num_answers) + 1))
        text = (
            f"Context {example.target}. Routes: {', '.join(self.routes)}. Give {num_answers} "
            f"different good routes for this context as {tags}."
        )
        return [{"role": "user", "content": text}]

    # ------------------------------------------------------------------ rewards
    def _route(self, text: str) -> int | None:
        t = (text or "").strip()
        return self.routes.index(t) if t in self.routes else None

    def parseable(self, answer: str, example: Example) -> bool:
        return self._route(answer) is not None

    def score_answer(self, answer: str, example: Example) -> np.ndarray:
        k = self._route(answer)
        return np.zeros(len(OBJECTIVES)) if k is None else self.table[int(example.target), k]

    def score(self, response: str, example: Example) -> np.ndarray:
        """The reward vector of the route in the last ``<answer>``; a missing or unknown route
        earns the zero vector (a legitimate zero, not an invalid sample)."""
        return self.score_answer(extract_tag(str(response or ""), "answer") or "", example)

    # ------------------------------------------------------------------ run plumbing
    def load_splits(self, spec, *, seed: int) -> Splits:
        n_eval = int(spec.num_eval)
        return Splits(
            self.load("train", int(spec.num_train), seed=seed),
            self.load("validation", validation_size(spec), seed=seed),
            self.load("test", n_eval, seed=seed),
            self,
        )

    def has_demonstrations(self, sft) -> bool:
        return True

    def demo_pairs(self, examples, render, num_answers: int, seed: int):
        """``(prompt, response)``: per example a uniformly drawn route after the single prompt and
        ``S`` distinct uniformly drawn routes after the S-route prompt (``S`` = ``num_answers``,
        or 3 for single-answer configs, so every method with S <= 3 shares one warm start): a
        maximum-entropy warm start that knows both formats and no reward."""
        s = int(num_answers) or 3
        rng = random.Random(seed)
        out = []
        for ex in examples:
            one = f"<answer>{rng.choice(self.routes)}</answer>"
            picks = rng.sample(self.routes, min(s, len(self.routes)))
            many = "".join(f"<route_{i}>{x}</route_{i}>" for i, x in enumerate(picks, 1))
            out.append((self.build_prompt(ex, render), one))
            out.append((self.build_prompt(ex, render, num_answers=s), many))
        return out

    def sft_rows(self, sft, tokenizer, train, *, seed: int, num_answers: int):
        eos = int(tokenizer.eos_token_id)
        pairs = self.demo_pairs(train[: sft.num_examples], tokenizer, num_answers, seed)
        return [demo_row(tokenizer, prompt, text, eos) for prompt, text in pairs]

    def vocab_corpus(self, splits, render, *, sft, seed: int, num_answers: int):
        pairs = self.demo_pairs(splits.all, render, num_answers, seed)
        return [p + r for p, r in pairs]
