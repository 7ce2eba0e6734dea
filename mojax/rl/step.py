"""One RL step, top to bottom: ``rl_step(run, host, train_state, key)``.

The algorithm every method shares (``docs/architecture.md``), in the order it runs::

    collect     P prompt groups x G rollouts with tool turns; each round is rolled out, scored into
                rewards [P, G, M] (or sets [P, G, S, M]) and shaped (DAPO overlong penalty); with DAPO
                dynamic sampling, groups where no objective varies are dropped and refilled
    advantages  the method's transform [P, G, M] -> [P, G] through its hooks
                (``mojax.advantages.Method``), with the state it carries across steps
    assemble    tokens / masks / old log-probs [B, T] and advantages [B] (B = P * G)
    update      the sharded PPO-clip train step

Host-side state is threaded explicitly: ``HostState`` in, ``HostState`` out. With several processes
every process runs this same code on the same all-gathered values (``mojax.distributed``), so the
host state stays identical everywhere (checked after every step with ``MOJAX_DEBUG_HOST_STATE=1``).
Nothing here writes files; the loop (``mojax.rl.trainer.train_and_evaluate``) logs, validates, evaluates and checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from mojax import distributed, learner
from mojax import rewards as rewards_lib
from mojax.advantages import AdvantageInputs
from mojax.learner import packing
from mojax.rl.batch import assemble_batch
from mojax.rl.data import PromptIterator
from mojax.rl.episodes import EpisodeRunner, Episodes, concat, rollout_metrics, select
from mojax.rl.host_state import HostState
from mojax.rl.spec import RunSpec
from mojax.tasks.base import Task


@dataclasses.dataclass(frozen=True)
class Run:
    """The fixed pieces of a run, built once from its spec (``mojax.rl.trainer.build_run``).

    Attributes:
      spec: the validated run spec; task / splits: the task and its examples; runner: rolls out and
      scores episodes; train_step: the jitted sharded PPO step ``(state, batch) -> (state,
      metrics)``; hooks: the advantage method's hooks (``Method.make_hooks``); total_len: T of the
      training batch; ref_logprobs: ``(tokens, mask) -> [B, T]`` of the frozen reference policy when
      the KL term is on, else None; model_config / tokenizer / tx / mesh / rules: the policy's
      architecture, tokenizer, optimizer, device mesh and logical axis rules; interrupt: polled
      between rollout decode calls and SFT steps, raises ``mojax.preemption.Interrupted`` on a
      signal (None: never); recompute:
      ``(params, batch) -> (batch, metrics)`` putting the learner's log-probs in ``old_logprobs``
      with the mismatch metrics and the correction (``mojax.learner.make_recompute_fn``) when
      ``ppo.old_logprobs="recompute"``, else None; workdir: the run directory.
    """

    spec: RunSpec
    task: Task
    splits: Any
    runner: EpisodeRunner
    train_step: Callable[..., Any]
    hooks: Any
    total_len: int
    model_config: Any
    tokenizer: Any
    tx: Any
    mesh: Any
    rules: Any
    ref_logprobs: Callable[..., Any] | None = None
    interrupt: Callable[[], None] | None = None
    recompute: Callable[..., Any] | None = None
    workdir: str = ""  # the run directory (evaluation samples are written there)


def rl_step(run: Run, host: HostState, state, key) -> tuple[HostState, Any, dict, Episodes]:
    """One RL step (see the module docstring); returns the new host and train state, the step's
    metrics and its episodes (for transcripts)."""
    t0 = time.time()
    roll_key, adv_key = jax.random.split(key)
    host, episodes = collect(run, host, learner.policy_params(state), roll_key)
    t_roll = time.time() - t0
    host, out, metrics = advantages(run, host, episodes, adv_key)
    batch = assemble(run, episodes, out)
    offpolicy = {}
    if run.recompute is not None:  # π_old by the learner's forward: measured and corrected
        batch, offpolicy = run.recompute(learner.policy_params(state), batch)
    t1 = time.time()
    state, train_metrics = run.train_step(state, batch)
    train_metrics = jax.device_get({**offpolicy, **train_metrics})
    train_metrics = {k: float(v) for k, v in train_metrics.items()}
    metrics = {**episodes.metrics, **rollout_metrics(episodes), **metrics, **train_metrics}
    metrics.update(host.reward_stats["train"].as_metrics("reward_invalid/train"))
    metrics.update({"time/rollout_s": t_roll, "time/train_s": time.time() - t1})
    host = dataclasses.replace(host, step=host.step + 1)
    if os.environ.get("MOJAX_DEBUG_HOST_STATE") == "1":  # multi-process: a divergence is a bug
        distributed.assert_same(f"host state after step {host.step}", host.to_dict())
    return host, state, metrics, episodes


def collect(run: Run, host: HostState, params, key) -> tuple[HostState, Episodes]:
    """``P`` scored and shaped groups of ``G`` rollouts. With DAPO dynamic sampling, groups without
    signal (no objective varies) are dropped and refilled from further prompts, up to
    ``max_refill_rounds`` rounds; groups still without signal fill the batch, out of the gradient.
    ``rollout/rollouts`` counts the rollouts generated (refills included), so arms can be compared
    at equal rollout budgets."""
    rs, dapo = run.spec.rollout, run.spec.dapo
    host, episodes = _episodes_round(run, host, params, key)
    episodes.metrics["rollout/rollouts"] = float(rs.prompts_per_step * rs.num_samples)
    if not dapo.dynamic_sampling:
        return host, episodes
    keep = rewards_lib.groups_with_signal(episodes.rewards, episodes.valid)
    rounds = 0
    while keep.sum() < rs.prompts_per_step and rounds < dapo.max_refill_rounds:
        rounds += 1
        host, more = _episodes_round(
            run, host, params, jax.random.fold_in(key, rounds), round_=rounds
        )
        episodes = concat(episodes, more)
        keep = rewards_lib.groups_with_signal(episodes.rewards, episodes.valid)
    order = np.concatenate([np.flatnonzero(keep), np.flatnonzero(~keep)])[: rs.prompts_per_step]
    episodes = select(episodes, order)
    episodes.kept = keep[order]
    episodes.valid = episodes.valid & episodes.kept[:, None]
    episodes.metrics["dapo/kept_groups"] = float(keep.sum())
    episodes.metrics["dapo/refill_rounds"] = float(rounds)
    episodes.metrics["rollout/rollouts"] = float(
        (1 + rounds) * rs.prompts_per_step * rs.num_samples
    )
    return host, episodes


def _episodes_round(
    run: Run, host: HostState, params, key, round_: int = 0
) -> tuple[HostState, Episodes]:
    """The next ``P`` training prompts, rolled out, scored and overlong-shaped. A goal-conditioned
    task (``task.goal_conditioned``; arXiv:2605.22817, App. E.5) draws each prompt's ``w ~ Dir(1)``
    from ``(seed, step, round_)`` and writes it into the prompt."""
    rs = run.spec.rollout
    data = PromptIterator(run.splits.train, rs.prompts_per_step, seed=run.spec.seed)
    if host.data:
        data.load_state_dict(host.data)
    examples = data.next()
    goal_w = None
    if run.spec.task.goal_conditioned:  # per-prompt weights in the prompt
        from mojax.tasks.goal import draw_goal_weights

        m = run.task.num_objectives
        goal_w = draw_goal_weights(run.spec.seed, host.step, round_, len(examples), m)
    episodes, states = run.runner.run(
        params,
        examples,
        key=key,
        num_samples=rs.num_samples,
        temperature=rs.temperature,
        states=rewards_lib.split_states(host.reward_state, "train"),
        stats=host.reward_stats["train"],
        goal_weights=goal_w,
    )
    shape_overlong(run, episodes)
    reward_state = rewards_lib.with_split_states(host.reward_state, "train", states)
    return dataclasses.replace(host, data=data.state_dict(), reward_state=reward_state), episodes


def shape_overlong(run: Run, episodes: Episodes) -> None:
    """DAPO's soft overlong penalty (DAPO Eq. 13) added to the success objective(s) of ``episodes``
    (in place; counted in response tokens, tool observations included;
    ``mojax.rewards.shape_overlong``)."""
    r = run.spec.dapo
    rewards_lib.shape_overlong(
        run.task,
        episodes.rewards,
        episodes.valid,
        episodes.rollout.lengths,
        max_len=r.max_response_len,
        buffer=r.overlong_buffer,
        penalty=r.overlong_penalty,
    )


def advantages(run: Run, host: HostState, episodes: Episodes, key) -> tuple[HostState, Any, dict]:
    """The method's advantage transform on the step's rewards (through its hooks); returns the new
    host state (with the method's carried state), the ``AdvantageOutput`` and its metrics."""
    inputs = AdvantageInputs(
        rewards=episodes.rewards,
        valid=episodes.valid,
        set_rewards=episodes.set_rewards,
        set_valid=episodes.set_valid,
        objective_valid=episodes.objective_valid,
        goal_weights=episodes.goal_weights,
    )
    out, state, metrics = run.hooks.advantages(host.step, host.method, inputs, key)
    host = dataclasses.replace(host, method=state)
    adv = np.asarray(out.advantages, np.float32)
    metrics = dict(metrics)
    metrics.update({f"advantage/{k}": float(np.asarray(v)) for k, v in out.metrics.items()})
    metrics["advantage/abs_mean"] = float(np.abs(adv).mean())
    if out.clip_eps is not None:
        metrics[f"{run.spec.estimator}/clip_eps"] = float(out.clip_eps)
    episodes.advantages = adv
    return host, out, metrics


def assemble(run: Run, episodes: Episodes, out) -> dict[str, Any]:
    """The PPO batch: ``tokens``, ``attention_mask``, ``loss_mask``, ``old_logprobs`` [B, T],
    ``advantages`` [B] (+ ``clip_eps``, ``ref_logprobs``). Rows outside ``episodes.train_mask`` (invalid
    rewards, dropped groups) get no gradient."""
    r = episodes.rollout
    batch = assemble_batch(
        episodes.prompt_ids,
        episodes.num_samples,
        np.asarray(r.tokens),
        np.asarray(r.logprobs),
        np.asarray(r.loss_mask),
        np.asarray(r.lengths),
        run.total_len,
    )
    batch["loss_mask"] *= episodes.train_mask.reshape(-1, 1)
    batch["advantages"] = np.asarray(out.advantages, np.float32).reshape(-1)
    if out.clip_eps is not None:
        batch["clip_eps"] = np.asarray(out.clip_eps, np.float32)
    if run.ref_logprobs is not None:
        batch["ref_logprobs"] = run.ref_logprobs(batch["tokens"], batch["attention_mask"])
    if run.spec.packing.enabled:  # several sequences per row (mojax.learner.packing)
        batch = pack(run, batch, episodes.metrics)
    return batch


def pack(run: Run, batch: dict[str, Any], metrics: dict[str, float]) -> dict[str, Any]:
    """``batch`` packed to ``packing.width`` tokens per row (the batch's T by default), rows a
    multiple of what the update splits them into; logs the padding fraction before and after."""
    from mojax import sharding as sharding_lib

    multiple = run.train_step.row_divisor * sharding_lib.batch_divisor(run.mesh, run.rules)
    packed = packing.pack_batch(batch, run.spec.packing.width or None, multiple)
    metrics["batch/padding_frac_unpacked"] = packing.padding_fraction(batch["attention_mask"])
    metrics["batch/padding_frac"] = packing.padding_fraction(packed["attention_mask"])
    metrics["batch/rows"] = float(packed["tokens"].shape[0])
    return packed
