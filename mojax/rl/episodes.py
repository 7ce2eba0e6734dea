"""Episodes: prompts -> (multi-turn) rollouts -> reward vectors, for training and evaluation.

One call rolls out ``G`` samples of each of ``P`` examples with the current policy (the agentic
driver ``mojax.rollout.run_rollout`` on the run's sampler, ``mojax.sampling.Sampler``: KV-cached
decoding, tool calls executed on the host and their observations appended and masked), then scores
them into ``rewards [P, G, M]`` / ``valid [P, G]``
(single answers, with the per-objective validity mask ``objective_valid [P, G, M]``) or
``set_rewards [P, G, S, M]`` / ``set_valid [P, G, S]`` (multi-answer sets). The external objectives
are filled by the run's reward sources (``mojax.rewards``), whose carried state goes in and out.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from mojax import rewards as rewards_lib
from mojax.rewards import RewardSource
from mojax.tasks.framework.base import Example, RewardStats, Task

if TYPE_CHECKING:
    from mojax.spec import RunSpec


@dataclasses.dataclass(frozen=True)
class Episodes:
    """A scored rollout batch (host arrays; rows prompt-major ``p * G + g``). Frozen: a step that
    changes one (the overlong penalty, DAPO's selection, the advantages) makes a new one with
    ``dataclasses.replace``."""

    examples: list[Example]
    prompt_ids: list[list[int]]
    num_samples: int
    rollout: Any  # mojax.rollout.RolloutResult
    rewards: np.ndarray  # [P, G, M] (sets: the set's mean over valid answers, for logging)
    valid: np.ndarray  # [P, G]
    metrics: dict[str, float]
    set_rewards: np.ndarray | None = None  # [P, G, S, M]
    set_valid: np.ndarray | None = None  # [P, G, S]
    kept: np.ndarray | None = None  # bool [P]: DAPO dynamic sampling's keep decision (None = all)
    advantages: np.ndarray | None = None  # float32 [P, G], once computed (for transcripts)
    objective_valid: np.ndarray | None = None  # bool [P, G, M]: valid per objective (a source
    # that could not score one objective of a valid sample makes only that entry False)
    goal_weights: np.ndarray | None = None  # float32 [P, M]: goal-conditioned GRPO's w per prompt

    @property
    def train_mask(self) -> np.ndarray:
        """bool [P, G]: rows whose tokens reach the gradient. A single-answer row needs a valid
        reward; a multi-answer row is a valid rollout even when none of its S
        answers parses (set reward 0, docs/methods.md); groups DAPO dropped never train."""
        rows = np.ones_like(self.valid) if self.set_rewards is not None else self.valid
        kept = np.ones(len(self.examples), bool) if self.kept is None else self.kept
        return rows & kept[:, None]

    @property
    def texts(self) -> list[str]:
        return list(self.rollout.texts)

    @property
    def n_calls(self) -> np.ndarray:
        return np.asarray(self.rollout.n_calls).reshape(len(self.examples), self.num_samples)


@dataclasses.dataclass
class EpisodeRunner:
    """Rolls out and scores with fixed settings (everything but the policy and the key)."""

    spec: RunSpec
    task: Task
    tokenizer: Any
    sampler: Any  # mojax.sampling.Sampler: the generation engine (weights set per call)
    tool: Any = None
    pool: Any = None
    sources: tuple[RewardSource, ...] = ()  # the reward sources of the external objectives
    interrupt: Any = None  # polled between decode calls; raises to abandon (mojax.infra.preemption)
    _prompt_cache: dict = dataclasses.field(default_factory=dict)
    _driver: Any = None  # mojax.rollout.RolloutSpec: the driver's fixed settings, built once

    def driver_spec(self):
        """The rollout driver's ``RolloutSpec`` from the run's ``RolloutSpec`` (stop ids and the
        tool-stop spec are scanned from the tokenizer once)."""
        if self._driver is None:
            from mojax.rollout import RolloutSpec

            rc = self.spec.rollout
            has_tool = self.has_tool
            self._driver = RolloutSpec.create(
                self.tokenizer,
                self.task,
                max_new_tokens=rc.max_new_tokens,
                max_response_len=rc.max_response_len,
                max_turns=rc.max_turns if has_tool else 1,
                max_tool_calls=rc.max_tool_calls if has_tool else 0,
                top_p=rc.top_p,
                top_k=rc.top_k,
                draw=rc.draw,
                cache_dtype=self.spec.model.cache_dtype or None,
                decode_segment=rc.decode_segment,
            )
        return self._driver

    @property
    def has_tool(self) -> bool:
        return bool(self.tool is not None and getattr(self.task, "tool_stop", None))

    def prompt_ids(self, ex: Example) -> list[int]:
        """The token ids of ``ex``'s prompt. The cache is keyed by the prompt text, not by the
        example id: ids come from data files and may repeat across files or within one."""
        s = self.spec.task.num_answers or None
        return self._encode(self.task.build_prompt(ex, self.tokenizer, num_answers=s))

    def _encode(self, text: str) -> list[int]:
        ids = self._prompt_cache.get(text)
        if ids is None:
            ids = self._prompt_cache[text] = list(self.tokenizer.encode(text))
        return ids

    # --- goal-conditioned prompts (arXiv:2605.22817, App. E.5) -------------------------------
    def goal_prompt_ids(self, ex: Example, w, *, cache: bool = False) -> list[int]:
        """The prompt of ``ex`` with the goal weights ``w [M]`` appended (cached only when asked:
        during training ``w`` is redrawn per example every step)."""
        from mojax.tasks.framework.goal import goal_messages

        s = self.spec.task.num_answers or None
        msgs = goal_messages(self.task, ex, w, num_answers=s)
        text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return self._encode(text) if cache else list(self.tokenizer.encode(text))

    def _prompts(self, examples: list[Example], goal_weights) -> tuple[list, np.ndarray | None]:
        """Token ids of the prompts and the goal weights ``[P, M]`` they carry (None when the task
        is not goal-conditioned). Goal-conditioned runs without explicit weights (evaluation,
        validation) condition on the canonical ``w* = task.scalar_weights`` (cached)."""
        if not getattr(self.spec.task, "goal_conditioned", False):
            return [self.prompt_ids(ex) for ex in examples], None
        if goal_weights is None:
            w_star = np.asarray(self.task.scalar_weights, np.float32)
            ids = [self.goal_prompt_ids(ex, w_star, cache=True) for ex in examples]
            return ids, np.tile(w_star, (len(examples), 1))
        w = np.asarray(goal_weights, np.float32)
        if w.shape != (len(examples), self.task.num_objectives):
            raise ValueError(
                f"goal_weights has shape {w.shape}; expected [P, M] = "
                f"{(len(examples), self.task.num_objectives)}"
            )
        return [self.goal_prompt_ids(ex, wp) for ex, wp in zip(examples, w)], w

    # -------------------------------------------------------------------------------------------
    def run(
        self,
        params,
        examples: Sequence[Example],
        *,
        key: jax.Array,
        num_samples: int,
        temperature: float,
        states: Mapping[str, Any] | None = None,
        stats: RewardStats | None = None,
        goal_weights: np.ndarray | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[Episodes, dict[str, Any]]:
        """Rollouts of ``examples`` with ``params`` and their rewards; returns the episodes and the
        reward sources' new ``states`` (by source name; ``states`` in: the split's states).
        ``goal_weights [P, M]``: per-example goal weights in the prompts (see :meth:`_prompts`);
        ``options``: reward-source options for this rollout only (e.g. ``n_opt``; None = the
        run's, ``mojax.rewards.with_options``)."""
        from mojax.rollout import run_rollout

        examples = list(examples)
        prompt_ids, goal_w = self._prompts(examples, goal_weights)
        self.sampler.update_weights(params)
        result = run_rollout(
            self.driver_spec().replace(temperature=float(temperature)),
            self.sampler,
            self.tokenizer,
            self.task,
            prompt_ids,
            key=key,
            num_samples=int(num_samples),
            tool=self.tool if self.has_tool else None,
            pool=self.pool,
            interrupt=self.interrupt,
        )
        g = int(num_samples)
        sources = rewards_lib.with_options(self.sources, options)
        prompts_text = None
        if any(src.needs_prompts for src in sources):
            prompts_text = [self.tokenizer.decode(ids) for ids in prompt_ids]
        rb = rewards_lib.score_rollouts(
            self.task,
            examples,
            result.texts,
            np.asarray(result.n_calls),
            g,
            sources=sources,
            states=states,
            prompts_text=prompts_text,
            stats=stats,
            num_answers=self.spec.task.num_answers,
        )
        objective_valid = None if rb.set_rewards is not None else rb.objective_valid
        eps = Episodes(
            examples, prompt_ids, g, result, rb.rewards, rb.valid, rb.metrics, rb.set_rewards,
            rb.set_valid, objective_valid=objective_valid, goal_weights=goal_w,
        )  # fmt: skip
        return eps, rb.states


def rollout_metrics(eps: Episodes) -> dict[str, float]:
    """Lengths, tool calls and finish reasons of a rollout batch."""
    r = eps.rollout
    lengths = np.asarray(r.lengths)
    out = {
        "rollout/response_len_mean": float(lengths.mean()),
        "rollout/response_len_max": float(lengths.max()),
        "rollout/policy_tokens_mean": float(np.asarray(r.loss_mask).sum(-1).mean()),
        "rollout/tool_calls_mean": float(np.asarray(r.n_calls).mean()),
    }
    events = collections.Counter(getattr(r, "counters", None) or {})
    events.update(f"finish/{x}" for x in r.finish_reason)
    out.update(event_metrics(events, len(r.finish_reason), prefix="rollout/"))
    return out


def event_metrics(
    events: collections.Counter, rows: int, prefix: str = "eval/rollout/"
) -> dict[str, float]:
    """``<prefix><counter>``: a rollout's counters (``tool_errors``, ``timeouts``, ``exit/<reason>``,
    ...; summed over batches for an evaluation), and ``<prefix>finish/<reason>``: the fraction of
    its ``rows`` rollouts that ended so (``events["finish/<reason>"]`` counts them)."""
    return {
        f"{prefix}{k}": (v / rows if k.startswith("finish/") else float(v))
        for k, v in sorted(events.items())
    }


def _map_rows(rollout, n_rows: int, fn) -> Any:
    """``rollout`` with ``fn`` applied to every per-row field (arrays or lists of ``n_rows``)."""
    fields = {}
    for f in dataclasses.fields(rollout):
        v = getattr(rollout, f.name)
        per_row = isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v) >= 1
        if (per_row and np.shape(v)[0] == n_rows) or (isinstance(v, list) and len(v) == n_rows):
            fields[f.name] = fn(f.name, v)
    return dataclasses.replace(rollout, **fields)


def select(eps: Episodes, groups: np.ndarray) -> Episodes:
    """The episodes of the given groups (prompt indices), rows and arrays sliced consistently."""
    g = eps.num_samples
    rows = (groups[:, None] * g + np.arange(g)[None, :]).reshape(-1)
    pick = lambda _, v: [v[i] for i in rows] if isinstance(v, list) else np.asarray(v)[rows]
    opt = lambda x: None if x is None else x[groups]
    return Episodes(
        [eps.examples[i] for i in groups],
        [eps.prompt_ids[i] for i in groups],
        g,
        _map_rows(eps.rollout, len(eps.texts), pick),
        eps.rewards[groups],
        eps.valid[groups],
        dict(eps.metrics),
        opt(eps.set_rewards),
        opt(eps.set_valid),
        opt(eps.kept),
        opt(eps.advantages),
        opt(eps.objective_valid),
        opt(eps.goal_weights),
    )


def concat(a: Episodes, b: Episodes) -> Episodes:
    """Two episode batches as one (for dynamic-sampling refills)."""

    def join(name, x):
        y = getattr(b.rollout, name)
        return list(x) + list(y) if isinstance(x, list) else np.concatenate([x, y])

    cat = lambda u, v: None if u is None else np.concatenate([u, v])
    return Episodes(
        a.examples + b.examples,
        a.prompt_ids + b.prompt_ids,
        a.num_samples,
        _map_rows(a.rollout, len(a.texts), join),
        np.concatenate([a.rewards, b.rewards]),
        np.concatenate([a.valid, b.valid]),
        a.metrics,
        cat(a.set_rewards, b.set_rewards),
        cat(a.set_valid, b.set_valid),
        None if a.kept is None or b.kept is None else np.concatenate([a.kept, b.kept]),
        None,
        cat(a.objective_valid, b.objective_valid),
        cat(a.goal_weights, b.goal_weights),
    )
