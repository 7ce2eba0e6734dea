"""The task interface: examples, prompts, declared objectives and safe reward scoring.

A task turns a model response into a reward vector ``float32 [M]`` whose objectives it declares up
front (name, theoretical min/max, which ones define "success"). Every objective is oriented
**higher is better** (``docs/architecture.md``). Reward code never crashes a run: :meth:`Task.score_safe` catches
exceptions, NaN/inf, wrong shapes and values outside the declared bounds, marks the sample invalid
and counts the reason in a :class:`RewardStats` (exception type name, ``"nan"``, ``"inf"``, ...).

Objectives marked ``external`` (ParetoPO's ``r_tool``, AWPO's judge score ``r_reason``) are not
computed by the task: :meth:`Task.score` leaves their column at 0 and the trainer fills it (e.g.
from ``mojax.pareto.tool_efficiency`` with ``N_call`` from the rollout and success from
:meth:`Task.is_success`), or passes the column to :meth:`Task.score_batch` via ``external=``.

Shapes: ``N`` responses in a batch, ``S`` answers in a VPO set, ``M`` objectives.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mojax.tasks.framework import multi_answer
from mojax.tasks.framework import splits as splits_lib
from mojax.tasks.framework.splits import Splits
from mojax.tasks.framework.types import (
    Example,
    Objective,
    RewardStats,
    ScoreBatch,
    SetScoreBatch,
    clean_response,
)

# Tags every self-built vocabulary keeps as single pieces (the built-in tasks' tool and answer tags).
TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")

__all__ = [
    "Objective",
    "Example",
    "RewardStats",
    "ScoreBatch",
    "SetScoreBatch",
    "Splits",
    "TAGS",
    "Task",
    "clean_response",
    "demo_row",
]


class Task(abc.ABC):
    """Base class of every task.

    Subclasses set ``name``, ``objectives`` and ``scalar_weights`` (the paper's scalar ``w*``),
    implement :meth:`score` and, if their multi-answer blocks can be unparseable, :meth:`parseable`.
    Tool-using tasks also set ``tool_stop`` and implement ``parse_tool_call`` /
    ``format_observation`` (see :class:`mojax.tasks.calculator.CalculatorTask`).
    """

    name: str = "task"
    objectives: tuple[Objective, ...] = ()
    scalar_weights: tuple[float, ...] = ()
    answer_tag: str = "response"  # VPO multi-answer block tag: <response_i> (maze: <route_i>)
    tool_stop: str | None = None

    # ---------------------------------------------------------------- objectives
    @property
    def num_objectives(self) -> int:
        return len(self.objectives)

    @property
    def objective_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.objectives)

    @property
    def external_objectives(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.objectives if o.external)

    def objective_index(self, name: str) -> int:
        names = self.objective_names
        if name not in names:
            raise KeyError(f"task {self.name!r} has no objective {name!r}; objectives: {names}")
        return names.index(name)

    def is_success(self, rewards: np.ndarray) -> np.ndarray:
        """``bool [...]``: every ``success`` objective at its max (``rewards [..., M]``)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        ok = np.ones(rewards.shape[:-1], dtype=bool)
        for k, obj in enumerate(self.objectives):
            if obj.success:
                ok &= rewards[..., k] >= obj.max - 1e-6
        return ok

    def scalar(self, rewards: np.ndarray) -> np.ndarray:
        """The paper's scalar ``w*·r`` over the last axis (GRPO training scalar, best@k)."""
        return np.asarray(rewards, dtype=np.float32) @ np.asarray(self.scalar_weights, np.float32)

    # ---------------------------------------------------------------- prompts
    def messages(self, example: Example, *, num_answers: int | None = None) -> list[dict[str, str]]:
        """Chat messages of the prompt; ``num_answers=S`` gives the multi-answer (VPO) rewrite."""
        if num_answers is not None:
            raise NotImplementedError(f"task {self.name!r} has no multi-answer prompt")
        return [dict(m) for m in example.messages]

    def build_prompt(self, example: Example, tokenizer, *, num_answers: int | None = None) -> str:
        """Prompt text through the tokenizer's own chat template, ready for generation."""
        return tokenizer.apply_chat_template(
            self.messages(example, num_answers=num_answers),
            add_generation_prompt=True,
            tokenize=False,
        )

    # ---------------------------------------------------------------- run plumbing
    # Called once per run by ``mojax.rl.builders`` with the run's spec sections
    # (``mojax.spec.sections``); a custom task overrides what it needs (docs/custom_task.md).

    builds_vocabulary: bool = False  # the tiny recipe trains its own sentencepiece on this task
    tiny_sft_steps: int = 0  # SFT warm-start steps of the tiny recipe (0 = none)
    think_reward: str = ""  # import path of the format reward of the think= recipe argument

    @classmethod
    def configure(cls) -> dict[str, Any]:
        """Recipe defaults the method configs set when this task is chosen: ``{dotted config key:
        value}`` (e.g. ``{"eval.num_samples": 4}``), applied by ``configs/*.py`` via
        ``mojax.defaults.apply_common_args`` before the method's own settings (default: none)."""
        return {}

    def load_splits(self, spec: Any, *, seed: int) -> Splits:
        """Train / validation / test examples for ``spec`` (``config.task``): files when
        ``task.train_path`` is set, else ``load(split, num, seed=...)`` (``mojax.tasks.framework.splits``)."""
        return splits_lib.default_splits(self, spec, seed)

    def make_tool(self, rollout: Any, splits: Any) -> Any:
        """The tool this task's rollouts call, or None (no tool).

        Called once per run with ``config.rollout`` (``tool_timeout_s``, ``sandbox``, ...) and the
        run's :class:`Splits`. Return a callable ``text -> mojax.rollout.tools.ToolResult`` or an
        object with ``.run`` of that type; ``text`` is what :meth:`parse_tool_call` returned for the
        turn that ended on ``tool_stop``. The tool is called from worker threads
        (``rollout.tool_workers``) and must never raise on bad model input: report it in
        ``ToolResult.error``.
        """
        del rollout, splits
        return None

    def has_demonstrations(self, sft: Any) -> bool:
        """Whether an SFT warm start has demonstrations (default: ``sft.data_path`` names a file)."""
        return bool(sft.data_path)

    def sft_rows(self, sft: Any, tokenizer, train: list[Example], *, seed: int, num_answers: int):
        """SFT demonstrations as ``[(token ids, loss mask)]`` (default: the prompt then the gold
        response of each example of ``sft.data_path``, the loss on the response only)."""
        del train, seed, num_answers
        if not sft.data_path:
            raise ValueError(f"config.sft.data_path: SFT on task {self.name!r} needs a file")
        eos = int(tokenizer.eos_token_id)
        rows = []
        for ex in list(self.load(sft.data_path))[: sft.num_examples]:
            target = ex.target if isinstance(ex.target, str) else str(ex.target)
            rows.append(demo_row(tokenizer, self.build_prompt(ex, tokenizer), target, eos))
        return rows

    def vocab_corpus(self, splits: Splits, render, *, sft: Any, seed: int, num_answers: int):
        """Texts a self-built vocabulary is trained on (default: every prompt, rendered by
        ``render``, a chat template without a vocabulary)."""
        del sft, seed
        s = num_answers or None
        return [self.build_prompt(ex, render, num_answers=s) for ex in splits.all]

    def vocab_symbols(self, sft: Any) -> tuple[str, ...]:
        """Strings a self-built vocabulary keeps as single pieces: the tags every task shares and
        this task's ``tool_stop`` (an exact, single-token stop)."""
        del sft
        extra = (self.tool_stop,) if self.tool_stop and self.tool_stop not in TAGS else ()
        return TAGS + extra

    def judge_reference(self, example: Example) -> str:
        """The reference a reasoning judge compares a response with (default: the gold target)."""
        return str(example.target)

    def eval_metrics(self, examples, rewards, valid, n_calls) -> dict[str, float]:
        """Task-specific held-out metrics (``eval/<name>``) of ``P`` examples with ``N`` samples
        each: ``rewards [P, N, M]``, ``valid`` / ``n_calls [P, N]`` (default: none)."""
        del examples, rewards, valid, n_calls
        return {}

    def config_errors(self, spec: Any) -> list[str]:
        """Rules of this task on the whole run spec (default: no ``<think>`` plans)."""
        think = spec.sft.think_rate
        if think > 0:
            return [
                f"config.sft.think_rate: {think} > 0: task {self.name!r} generates no <think> "
                "plans (the calculator's demonstrations do)"
            ]
        return []

    # ---------------------------------------------------------------- scoring
    @abc.abstractmethod
    def score(self, response: str, example: Example) -> np.ndarray:
        """Reward vector ``[M]`` of one response (external columns 0). May raise; see score_safe."""

    def parseable(self, answer: str, example: Example) -> bool:
        """Whether one multi-answer block can be scored at all (unparseable → invalid row)."""
        return True

    def score_answer(self, answer: str, example: Example) -> np.ndarray:
        """Reward vector of one block of a multi-answer set (default: as a whole response)."""
        return self.score(answer, example)

    def score_safe(
        self,
        response: Any,
        example: Example,
        stats: RewardStats | None = None,
        *,
        answer_block: bool = False,
    ) -> tuple[np.ndarray, bool, str | None]:
        """``(rewards [M], valid, reason)``: never raises, never returns NaN/inf.

        An exception, a non-finite value, a wrong shape or a value outside an objective's declared
        ``[min, max]`` gives zeros, ``valid=False`` and a reason (the exception type's name,
        ``"nan"``, ``"inf"``, ``"shape"``, ``"out_of_range:<objective>"``), counted in ``stats``.
        ``answer_block=True`` scores one multi-answer block through :meth:`score_answer`.
        """
        m = self.num_objectives
        reason = None
        try:
            fn = self.score_answer if answer_block else self.score
            raw = fn(response, example)
            r = np.asarray(raw, dtype=np.float64).reshape(-1)
            if r.shape != (m,):
                reason = "shape"
            elif np.any(np.isnan(r)):
                reason = "nan"
            elif np.any(np.isinf(r)):
                reason = "inf"
            else:
                for k, obj in enumerate(self.objectives):
                    if not (obj.min - 1e-6 <= r[k] <= obj.max + 1e-6):
                        reason = f"out_of_range:{obj.name}"
                        break
        except Exception as e:  # noqa: BLE001 -- reward code must never crash a run
            reason = type(e).__name__
        if stats is not None:
            stats.record(reason is None, reason)
        if reason is not None:
            return np.zeros((m,), np.float32), False, reason
        lo = np.array([o.min for o in self.objectives])
        hi = np.array([o.max for o in self.objectives])
        return np.clip(r, lo, hi).astype(np.float32), True, None

    def score_batch(
        self,
        responses: Sequence[Any],
        examples: Sequence[Example],
        *,
        external: Mapping[str, Any] | None = None,
        stats: RewardStats | None = None,
    ) -> ScoreBatch:
        """Score ``N`` responses: ``rewards [N, M]``, ``valid [N]``.

        Args:
          responses: ``N`` assistant texts.
          examples: ``N`` examples (repeat each prompt's example G times for a group).
          external: optional columns ``{objective name: [N] values}`` for external objectives
            (e.g. ``{"r_tool": r_tool}``); non-finite values there mark the sample invalid.
          stats: a running :class:`RewardStats` to add to (a fresh one otherwise).
        """
        if len(responses) != len(examples):
            raise ValueError(
                f"responses and examples must have the same length; got {len(responses)} "
                f"and {len(examples)}"
            )
        stats = RewardStats() if stats is None else stats
        n, m = len(responses), self.num_objectives
        rewards = np.zeros((n, m), np.float32)
        valid = np.zeros((n,), bool)
        for i, (resp, ex) in enumerate(zip(responses, examples)):
            rewards[i], valid[i], _ = self.score_safe(resp, ex, stats)
        pending = list(self.external_objectives)
        for name, values in (external or {}).items():
            k = self.objective_index(name)
            col = np.asarray(values, dtype=np.float64).reshape(-1)
            if col.shape != (n,):
                raise ValueError(f"external[{name!r}] must have shape [{n}]; got {col.shape}")
            bad = ~np.isfinite(col)
            for _ in range(int(np.sum(bad & valid))):
                stats.reasons[f"external_nonfinite:{name}"] += 1
                stats.invalid += 1
            valid &= ~bad
            obj = self.objectives[k]
            rewards[:, k] = np.where(valid, np.clip(np.nan_to_num(col), obj.min, obj.max), 0.0)
            if name in pending:
                pending.remove(name)
        rewards[~valid] = 0.0
        return ScoreBatch(rewards, valid, stats, tuple(pending))

    def score_set(
        self,
        response: Any,
        example: Example,
        num_answers: int,
        *,
        dedup: bool = False,
        stats: RewardStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """VPO / Multi-RLVR: ``(set_rewards [S, M], set_valid [S])`` of one multi-answer completion.

        Blocks ``<{answer_tag}_i>…</{answer_tag}_i>`` for ``i = 1..S`` are scored one by one; a
        missing, unclosed, unparseable (:meth:`parseable`) or (with ``dedup``) duplicate block is a
        zero row with ``set_valid = False`` (methods.md, VPO).
        """
        s, m = int(num_answers), self.num_objectives
        set_rewards = np.zeros((s, m), np.float32)
        set_valid = np.zeros((s,), bool)
        try:
            blocks = multi_answer.parse_blocks(response, s, tag=self.answer_tag, dedup=dedup)
        except Exception as e:  # noqa: BLE001
            if stats is not None:
                for _ in range(s):
                    stats.record(False, type(e).__name__)
            return set_rewards, set_valid
        for i, block in enumerate(blocks):
            if block.text is None:
                if stats is not None:
                    stats.record(False, block.reason)
                continue
            try:
                ok = self.parseable(block.text, example)
            except Exception as e:  # noqa: BLE001
                ok, reason = False, type(e).__name__
            else:
                reason = "unparseable"
            if not ok:
                if stats is not None:
                    stats.record(False, reason)
                continue
            set_rewards[i], set_valid[i], _ = self.score_safe(
                block.text, example, stats, answer_block=True
            )
        return set_rewards, set_valid

    def score_set_batch(
        self,
        responses: Sequence[Any],
        examples: Sequence[Example],
        num_answers: int,
        *,
        dedup: bool = False,
        stats: RewardStats | None = None,
    ) -> SetScoreBatch:
        """``score_set`` over ``N`` completions: ``set_rewards [N, S, M]``, ``set_valid [N, S]``."""
        if len(responses) != len(examples):
            raise ValueError(
                f"responses and examples must have the same length; got {len(responses)} "
                f"and {len(examples)}"
            )
        stats = RewardStats() if stats is None else stats
        out_r = np.zeros((len(responses), num_answers, self.num_objectives), np.float32)
        out_v = np.zeros((len(responses), num_answers), bool)
        for i, (resp, ex) in enumerate(zip(responses, examples)):
            out_r[i], out_v[i] = self.score_set(resp, ex, num_answers, dedup=dedup, stats=stats)
        return SetScoreBatch(out_r, out_v, stats)


def demo_row(tokenizer, prompt_text: str, response_text: str, eos: int):
    """``(ids, loss_mask)``: the prompt (mask 0), then the response and ``eos`` (mask 1)."""
    prompt = list(tokenizer.encode(prompt_text))
    resp = list(tokenizer.encode(response_text)) + [eos]
    return prompt + resp, [0] * len(prompt) + [1] * len(resp)
