"""Held-out rollouts of a run: evaluation (``eval/...`` metrics) and ParetoPO's validation vector.

Both roll out a split with the current policy and a key drawn from ``(seed + 1, step)`` (evaluation)
or ``(seed + 2, step)`` (validation), so they never consume the training stream and a resumed run
repeats them exactly. Invalid rewards are counted per split in ``HostState.reward_stats``.

Goal-conditioned GRPO (``task.goal_conditioned``; VPO, arXiv:2605.22817, App. E.5): both condition
every prompt on the task's canonical scalarization ``w* = task.scalar_weights`` (the runner's
default when no per-example weights are given), the paper's Table 6 "G.C. w = w*" setting.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from mojax.pareto import NOptimalTracker
from mojax.rl.evaluate import problem_class, summarize, write_samples
from mojax.rl.host_state import HostState


def evaluate(
    run, host: HostState, params, step: int, split: str = "test", samples_path: str = ""
) -> dict[str, float]:
    """``eval/...`` metrics on a held-out split, ``N = eval.num_samples`` samples per problem;
    with ``samples_path`` every sample's rewards are written there too (``write_samples``).

    VPO sets are flattened so that k of best@k / pass@k counts answers: ``[P, N, S, M] -> [P, N*S,
    M]``.
    """
    es = run.spec.eval
    key = jax.random.fold_in(jax.random.PRNGKey(run.spec.seed + 1), step)
    episodes, _ = run.runner.run(
        params,
        getattr(run.splits, split),
        key=key,
        num_samples=es.num_samples,
        temperature=es.temperature,
        tracker=NOptimalTracker(),
        stats=host.reward_stats["eval"],
    )
    rewards, valid, calls = episodes.rewards, episodes.valid, episodes.n_calls
    if episodes.set_rewards is not None:
        p, _, s, m = episodes.set_rewards.shape
        rewards = episodes.set_rewards.reshape(p, -1, m)
        valid = episodes.set_valid.reshape(p, -1)
        calls = np.repeat(calls, s, axis=1)
    examples = getattr(run.splits, split)
    out = summarize(run.task, rewards, valid, calls, ks=tuple(es.ks), examples=examples)
    out.update(host.reward_stats["eval"].as_metrics("reward_invalid/eval"))
    if samples_path:
        ids = [ex.id for ex in examples]
        classes = [problem_class(ex) for ex in examples]
        write_samples(samples_path, run.task, ids, rewards, valid, calls, classes)
    return out


def validation_vector(
    run,
    host: HostState,
    params,
    step: int,
    *,
    num_samples: int = 1,
    temperature: float = 0.0,
    n_opt: str | None = None,
) -> tuple[HostState, np.ndarray, dict]:
    """ParetoPO's ``v_t [M]``: the mean reward vector of rollouts on the validation split
    (ParetoPO, arXiv:2606.16111, Algorithm 1): by default one greedy sample per problem; with
    ``num_samples`` / ``temperature`` the mean over that many sampled ones (``paretopo.validation_*``).
    The validation ``N_optimal`` table is tracked across validations like the training one (also
    with ``n_opt="fixed"``, which scores ``r_tool`` against the task's rule instead; None =
    ``config.tool_reward.n_opt``); returns the host state with it updated."""
    key = jax.random.fold_in(jax.random.PRNGKey(run.spec.seed + 2), step)
    extra = {"n_opt": n_opt} if n_opt is not None else {}
    episodes, val_tracker = run.runner.run(
        params,
        run.splits.validation,
        key=key,
        num_samples=int(num_samples),
        temperature=float(temperature),
        tracker=host.val_tracker,
        stats=host.reward_stats["validation"],
        **extra,
    )
    r = np.where(episodes.valid[..., None], episodes.rewards, 0.0).reshape(
        -1, episodes.rewards.shape[-1]
    )
    v = r.mean(0)
    metrics = {f"val/{n}": float(v[k]) for k, n in enumerate(run.task.objective_names)}
    metrics.update(host.reward_stats["validation"].as_metrics("reward_invalid/validation"))
    return dataclasses.replace(host, val_tracker=val_tracker), v, metrics
