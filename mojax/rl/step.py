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

**The PPO batch**: assembling the PPO rollout batch (``docs/architecture.md``, "Data contracts") from prompts and sampled responses.

Row ``b = p * G + g`` holds prompt ``p`` followed by its ``g``-th response, right-padded to a fixed
``T`` (so the jitted step sees one shape every step):

* ``tokens`` int32 [B, T]: prompt + response (tool observations included), 0-padded;
* ``attention_mask`` int32 [B, T]: 1 on every real token;
* ``loss_mask`` float32 [B, T]: 1 only on policy-generated response tokens (0 on the prompt, the
  padding and tool observations — the sampler's response mask says which are which);
* ``old_logprobs`` float32 [B, T]: at position t, log π_old(tokens[t] | tokens[<t]) for response
  tokens (from the sampler, fp32), 0 elsewhere;
* ``advantages`` float32 [B]: the method's advantage of each sequence;

a ``mojax.learner.PPOBatch`` (a frozen pytree) built by ``assemble_batch`` and completed by
``assemble`` with ``dataclasses.replace`` (``clip_eps``, ``ref_logprobs``, the packed rows).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from mojax import distributed, learner
from mojax import rewards as rewards_lib
from mojax.advantages import AdvantageInputs
from mojax.learner import packing
from mojax.learner.batch import PPOBatch
from mojax.rl.episodes import EpisodeRunner, Episodes, concat, rollout_metrics, select
from mojax.rl.state import HostState, PromptIterator
from mojax.spec import RunSpec
from mojax.tasks.framework.base import Task

if TYPE_CHECKING:
    import optax

    from mojax.models import QwenConfig
    from mojax.tasks.framework.splits import Splits


@dataclasses.dataclass(frozen=True)
class Learner:
    """The update's pieces, built once (``mojax.rl.builders.build_learner``).

    Attributes:
      model_config: the policy's architecture (``QwenConfig``, layouts resolved); tx: the optimizer;
      mesh / rules: the device mesh and the logical axis rules; train_step: the jitted sharded PPO
      step ``(state, batch) -> (state, metrics)``; total_len: T of the training batch;
      recompute: ``(params, batch) -> (batch, metrics)`` putting the learner's log-probs in
      ``old_logprobs`` with the mismatch metrics and the correction
      (``mojax.learner.make_recompute_fn``) when ``ppo.old_logprobs="recompute"``, else None;
      ref_logprobs: ``(tokens, mask) -> [B, T]`` of the frozen reference policy when the KL term
      is on, else None (set by the trainer once the reference params exist).
    """

    model_config: QwenConfig
    tx: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    rules: tuple
    train_step: Callable[..., Any]
    total_len: int
    recompute: Callable[..., Any] | None = None
    ref_logprobs: Callable[..., Any] | None = None


@dataclasses.dataclass(frozen=True)
class Run:
    """The fixed pieces of a run, built once from its spec (``mojax.rl.builders.build_run``).

    Attributes:
      spec: the validated run spec; task / splits: the task and its examples; tokenizer: the
      policy's tokenizer; runner: rolls out and scores episodes; learner: the update's pieces
      (:class:`Learner`); hooks: the advantage method's hooks (``Method.make_hooks``); interrupt:
      polled between rollout decode calls and SFT steps, raises
      ``mojax.infra.preemption.Interrupted`` on a signal (None: never); workdir: the run directory.
    """

    spec: RunSpec
    task: Task
    splits: Splits
    tokenizer: Any  # mojax.models.HFTokenizer | mojax.models.SentencePieceTokenizer
    runner: EpisodeRunner
    learner: Learner
    hooks: Any  # the method's hooks (Method.make_hooks: start / advantages / after_step)
    interrupt: Callable[[], None] | None = None
    workdir: str = ""  # the run directory (evaluation samples are written there)


def rl_step(run: Run, host: HostState, state, key) -> tuple[HostState, Any, dict, Episodes]:
    """One RL step (see the module docstring); returns the new host and train state, the step's
    metrics and its episodes (for transcripts)."""
    t0 = time.time()
    roll_key, adv_key = jax.random.split(key)
    host, episodes = collect(run, host, learner.policy_params(state), roll_key)
    t_roll = time.time() - t0
    host, out, metrics = advantages(run, host, episodes, adv_key)
    episodes = with_advantages(episodes, out)
    batch = assemble(run, episodes, out)
    offpolicy = {}
    if run.learner.recompute is not None:  # π_old by the learner's forward: measured and corrected
        batch, offpolicy = run.learner.recompute(learner.policy_params(state), batch)
    t1 = time.time()
    state, train_metrics = run.learner.train_step(state, batch)
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
    at equal rollout budgets; ``rollout/generated_tokens`` their policy-generated tokens (refills
    included; tool observations not). Every process holds the all-gathered rollouts, so both are
    the same number on every process."""
    rs, dapo = run.spec.rollout, run.spec.dapo
    # its own counts: a signal in a (refill) round leaves the caller's host state as it was
    host = host.with_own_stats()
    host, episodes = _episodes_round(run, host, params, key)
    if not dapo.dynamic_sampling:
        rollouts = float(rs.prompts_per_step * rs.num_samples)
        metrics = {"rollout/rollouts": rollouts, "rollout/generated_tokens": _tokens(episodes)}
        return host, _with_metrics(episodes, metrics)
    keep = rewards_lib.groups_with_signal(episodes.rewards, episodes.valid)
    rounds = 0
    while keep.sum() < rs.prompts_per_step and rounds < dapo.max_refill_rounds:
        rounds += 1
        host, more = _episodes_round(
            run, host, params, jax.random.fold_in(key, rounds), round_=rounds
        )
        episodes = concat(episodes, more)
        keep = rewards_lib.groups_with_signal(episodes.rewards, episodes.valid)
    generated = _tokens(episodes)  # every round's rollouts, before the batch is selected
    order = np.concatenate([np.flatnonzero(keep), np.flatnonzero(~keep)])[: rs.prompts_per_step]
    episodes = select(episodes, order)
    kept = keep[order]
    episodes = dataclasses.replace(episodes, kept=kept, valid=episodes.valid & kept[:, None])
    metrics = {"dapo/kept_groups": float(keep.sum()), "dapo/refill_rounds": float(rounds)}
    metrics["rollout/rollouts"] = float((1 + rounds) * rs.prompts_per_step * rs.num_samples)
    metrics["rollout/generated_tokens"] = generated
    return host, _with_metrics(episodes, metrics)


def _tokens(episodes: Episodes) -> float:
    """Policy-generated tokens of every rollout in ``episodes`` (the loss mask's ones)."""
    return float(np.asarray(episodes.rollout.loss_mask).sum())


def _with_metrics(episodes: Episodes, metrics: dict) -> Episodes:
    return dataclasses.replace(episodes, metrics={**episodes.metrics, **metrics})


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
        from mojax.tasks.framework.goal import draw_goal_weights

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
    episodes = shape_overlong(run, episodes)
    reward_state = rewards_lib.with_split_states(host.reward_state, "train", states)
    return dataclasses.replace(host, data=data.state_dict(), reward_state=reward_state), episodes


def shape_overlong(run: Run, episodes: Episodes) -> Episodes:
    """``episodes`` with DAPO's soft overlong penalty (DAPO Eq. 13) added to the success
    objective(s) of their rewards (counted in response tokens, tool observations included;
    ``mojax.rewards.shape_overlong``)."""
    r = run.spec.dapo
    if r.overlong_buffer <= 0:
        return episodes
    rewards = np.array(episodes.rewards, copy=True)
    rewards_lib.shape_overlong(
        run.task,
        rewards,
        episodes.valid,
        episodes.rollout.lengths,
        max_len=r.max_response_len,
        buffer=r.overlong_buffer,
        penalty=r.overlong_penalty,
    )
    return dataclasses.replace(episodes, rewards=rewards)


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
    return host, out, metrics


def with_advantages(episodes: Episodes, out) -> Episodes:
    """``episodes`` with the step's advantages ``float32 [P, G]`` (for transcripts)."""
    return dataclasses.replace(episodes, advantages=np.asarray(out.advantages, np.float32))


def assemble(run: Run, episodes: Episodes, out) -> PPOBatch:
    """The PPO batch (``mojax.learner.PPOBatch``, built here and only here): ``tokens``,
    ``attention_mask``, ``loss_mask``, ``old_logprobs`` [B, T], ``advantages`` [B] (+ ``clip_eps``,
    ``ref_logprobs``); packed (``pack``) with ``packing.enabled``. Rows outside
    ``episodes.train_mask`` (invalid rewards, dropped groups) get no gradient."""
    r = episodes.rollout
    batch = assemble_batch(
        episodes.prompt_ids,
        episodes.num_samples,
        np.asarray(r.tokens),
        np.asarray(r.logprobs),
        np.asarray(r.loss_mask),
        np.asarray(r.lengths),
        run.learner.total_len,
        advantages=out.advantages,
    )
    batch = dataclasses.replace(
        batch,
        loss_mask=batch.loss_mask * episodes.train_mask.reshape(-1, 1),
        clip_eps=None if out.clip_eps is None else np.asarray(out.clip_eps, np.float32),
    )
    if run.learner.ref_logprobs is not None:
        ref = run.learner.ref_logprobs(batch.tokens, batch.attention_mask)
        batch = dataclasses.replace(batch, ref_logprobs=ref)
    if run.spec.packing.enabled:  # several sequences per row (mojax.learner.packing)
        batch = pack(run, batch, episodes.metrics)
    return batch


def pack(run: Run, batch: PPOBatch, metrics: dict[str, float]) -> PPOBatch:
    """``batch`` packed to ``packing.width`` tokens per row (the batch's T by default), rows a
    multiple of what the update splits them into; logs the padding fraction before and after."""
    from mojax import sharding as sharding_lib

    multiple = run.learner.train_step.row_divisor * sharding_lib.batch_divisor(
        run.learner.mesh, run.learner.rules
    )
    packed = packing.pack_batch(batch, run.spec.packing.width or None, multiple)
    metrics["batch/padding_frac_unpacked"] = packing.padding_fraction(batch.attention_mask)
    metrics["batch/padding_frac"] = packing.padding_fraction(packed.attention_mask)
    metrics["batch/rows"] = float(packed.tokens.shape[0])
    return packed


# The PPO batch.


def assemble_batch(
    prompt_ids: Sequence[Sequence[int]],
    num_samples: int,
    response_tokens: np.ndarray,
    response_logprobs: np.ndarray,
    response_mask: np.ndarray,
    response_lengths: np.ndarray,
    total_len: int,
    *,
    advantages,
) -> PPOBatch:
    """The PPO batch for ``P`` prompts and ``B = P * G`` responses: ``tokens``,
    ``attention_mask``, ``loss_mask``, ``old_logprobs`` [B, T] and ``advantages`` [B] (the
    ``PPOBatch`` that ``assemble`` completes with ``dataclasses.replace``).

    Args:
      prompt_ids: P token lists (unpadded).
      num_samples: G.
      response_tokens, response_logprobs, response_mask: [B, R] from the rollout (prompt-major).
      response_lengths: [B] tokens used in each response row (policy and observation tokens).
      total_len: T >= max prompt length + R.
      advantages: the sequences' advantages, [B] or [P, G] (prompt-major).

    Raises:
      ValueError naming the argument whose shape does not fit.
    """
    toks = np.asarray(response_tokens)
    b, r = toks.shape
    p = len(prompt_ids)
    if b != p * num_samples:
        raise ValueError(f"response_tokens has {b} rows; expected P*G = {p}*{num_samples}")
    for name, arr in (("response_logprobs", response_logprobs), ("response_mask", response_mask)):
        if np.shape(arr) != (b, r):
            raise ValueError(f"{name} must be [B, R] = {(b, r)}, got {np.shape(arr)}")
    lengths = np.asarray(response_lengths, np.int64)
    if lengths.shape != (b,) or lengths.min(initial=0) < 0 or lengths.max(initial=0) > r:
        raise ValueError(f"response_lengths must be [B]={b} ints in [0, {r}]")
    plen = np.repeat(np.array([len(x) for x in prompt_ids], np.int64), num_samples)
    if plen.max(initial=0) + r > total_len:
        raise ValueError(f"total_len={total_len} < longest prompt {plen.max()} + R={r}")

    tokens = np.zeros((b, total_len), np.int32)
    for i, ids in enumerate(prompt_ids):
        tokens[i * num_samples : (i + 1) * num_samples, : len(ids)] = np.asarray(ids, np.int32)
    # scatter each response right after its prompt: column j of the response goes to plen + j
    cols = plen[:, None] + np.arange(r)[None, :]  # [B, R]
    live = np.arange(r)[None, :] < lengths[:, None]
    rows = np.broadcast_to(np.arange(b)[:, None], (b, r))
    tokens[rows[live], cols[live]] = toks[live]
    loss_mask = np.zeros((b, total_len), np.float32)
    old_logprobs = np.zeros((b, total_len), np.float32)
    loss_mask[rows[live], cols[live]] = np.asarray(response_mask, np.float32)[live]
    old_logprobs[rows[live], cols[live]] = np.asarray(response_logprobs, np.float32)[live]
    old_logprobs *= loss_mask > 0
    attention_mask = (np.arange(total_len)[None, :] < (plen + lengths)[:, None]).astype(np.int32)
    adv = np.asarray(advantages, np.float32).reshape(-1)
    if adv.shape != (b,):
        raise ValueError(f"advantages must hold B = {b} values, got shape {np.shape(advantages)}")
    return PPOBatch(
        tokens=tokens,
        loss_mask=loss_mask,
        old_logprobs=old_logprobs,
        advantages=adv,
        attention_mask=attention_mask,
    )
