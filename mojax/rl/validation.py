"""Held-out rollouts of a run: evaluation (``eval/...`` metrics) and the validation vector a method's
hooks may ask for.

Both roll out a split with the current policy and a key drawn from ``(seed + 1, step)`` (evaluation)
or ``(seed + 2, step)`` (validation), so they never consume the training stream and a resumed run
repeats them exactly. Invalid rewards are counted per split in ``HostState.reward_stats``.

Goal-conditioned prompts (``task.goal_conditioned``; arXiv:2605.22817, App. E.5): both condition
every prompt on the task's canonical scalarization ``w* = task.scalar_weights`` (the runner's
default when no per-example weights are given), the paper's Table 6 "G.C. w = w*" setting.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from mojax import rewards as rewards_lib
from mojax.rl.evaluate import problem_class, summarize, write_samples
from mojax.rl.host_state import HostState


def evaluate(
    run, host: HostState, params, step: int, split: str = "test", samples_path: str = ""
) -> dict[str, float]:
    """``eval/...`` metrics on a held-out split, ``N = eval.num_samples`` samples per problem;
    with ``samples_path`` every sample's rewards are written there too (``write_samples``).

    Multi-answer sets are flattened so that k of best@k / pass@k counts answers: ``[P, N, S, M] -> [P, N*S,
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
        states={},  # the reward sources start fresh on every evaluation
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
    **options,
) -> tuple[HostState, np.ndarray, dict]:
    """``v_t [M]``: the mean reward vector of rollouts on the validation split (arXiv:2606.16111,
    Algorithm 1): by default one greedy sample per problem; with ``num_samples`` /
    ``temperature`` the mean over that many sampled ones. ``options``: reward-source options for
    these rollouts (e.g. ``n_opt``; None values = the run's). The reward sources' validation state
    is carried across validations like the training one; returns the host state with it
    updated."""
    key = jax.random.fold_in(jax.random.PRNGKey(run.spec.seed + 2), step)
    extra = {"options": options} if any(v is not None for v in options.values()) else {}
    episodes, states = run.runner.run(
        params,
        run.splits.validation,
        key=key,
        num_samples=int(num_samples),
        temperature=float(temperature),
        states=rewards_lib.split_states(host.reward_state, "validation"),
        stats=host.reward_stats["validation"],
        **extra,
    )
    r = np.where(episodes.valid[..., None], episodes.rewards, 0.0).reshape(
        -1, episodes.rewards.shape[-1]
    )
    v = r.mean(0)
    metrics = {f"val/{n}": float(v[k]) for k, n in enumerate(run.task.objective_names)}
    metrics.update(host.reward_stats["validation"].as_metrics("reward_invalid/validation"))
    reward_state = rewards_lib.with_split_states(host.reward_state, "validation", states)
    return dataclasses.replace(host, reward_state=reward_state), v, metrics
