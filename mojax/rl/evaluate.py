"""Evaluation summaries: accuracy (EM), tool calls, per-objective means, best@k, pass@k, diversity,
collinearity — written as ``eval/...`` metrics, a JSON file and a text table.

The numbers come from ``N`` samples per problem (``rewards [P, N, M]``); best@k and pass@k need
``k <= N`` (larger k are skipped). For answer sets, pass the flattened answers (``flatten_sets``) so k
counts answers, not chains.

**Held-out rollouts** of a run: evaluation (``eval/...`` metrics) and the validation vector a method's
hooks may ask for.

Both roll out a split with the current policy and a key drawn from ``(seed + 1, step)`` (evaluation)
or ``(seed + 2, step)`` (validation), so they never consume the training stream and a resumed run
repeats them exactly. Invalid rewards are counted per split in ``HostState.reward_stats``.

Goal-conditioned prompts (``task.goal_conditioned``; arXiv:2605.22817, App. E.5): both condition
every prompt on the task's canonical scalarization ``w* = task.scalar_weights`` (the runner's
default when no per-example weights are given), the paper's Table 6 "G.C. w = w*" setting.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from collections.abc import Sequence

import jax
import numpy as np

from mojax import distributed
from mojax import metrics as metrics_lib
from mojax import rewards as rewards_lib
from mojax.rl.episodes import event_metrics
from mojax.rl.state import HostState
from mojax.tasks.framework.base import Task


def summarize(
    task: Task,
    rewards,
    valid,
    n_calls,
    *,
    ks: Sequence[int] = (1, 3, 5, 10, 30),
    prefix: str = "eval/",
    examples: Sequence | None = None,
) -> dict[str, float]:
    """Evaluation metrics of ``P`` problems with ``N`` samples each.

    Args:
      task: the task (objective names, success rule, scalar weights ``w*``).
      rewards: float [P, N, M]; valid: bool [P, N]; n_calls: int [P, N].
      ks: budgets for best@k / pass@k.
      examples: the P examples, for the task's own metrics (``Task.eval_metrics``).

    Returns:
      ``{prefix}accuracy`` (mean success over the N samples of every problem — EM for answer
      tasks, avg@N when sampling), ``{prefix}tool_calls`` (mean calls per problem and sample),
      ``{prefix}<objective>`` means, ``{prefix}best@k`` (the first k samples) and
      ``{prefix}best@k_unbiased`` (the mean over every k-subset of the N samples),
      ``{prefix}pass@k``, ``{prefix}E_w[best@k]``
      (the mean over 1000 seeded ``w ~ Dir(1)`` of the best ``w·r`` among the first k; M > 1),
      ``{prefix}diversity`` (reward space, valid answers), ``{prefix}collinearity``,
      ``{prefix}valid_fraction``; with ``examples`` that carry a difficulty class, ``{prefix}acc/<class>``,
      ``{prefix}calls/<class>`` and ``{prefix}problems/<class>`` (:func:`per_class`).
    """
    r = np.asarray(rewards, np.float64)
    v = np.asarray(valid, bool)
    calls = np.asarray(n_calls, np.float64)
    if r.ndim != 3 or v.shape != r.shape[:2] or calls.shape != r.shape[:2]:
        raise ValueError(
            f"rewards must be [P, N, M] with valid / n_calls [P, N]; got {r.shape}, {v.shape}, "
            f"{calls.shape}"
        )
    n = r.shape[1]
    success = task.is_success(r) & v
    out = {
        "accuracy": float(success.mean()),
        "tool_calls": float(calls.mean()),
        "valid_fraction": float(v.mean()),
    }
    masked = np.where(v[..., None], r, 0.0)
    for k, name in enumerate(task.objective_names):
        out[name] = float(masked[..., k].mean())
    weights = task.scalar_weights or None
    for k in ks:
        if 1 <= k <= n:
            out[f"best@{k}"] = float(metrics_lib.best_at_k(r, k, weights=weights, valid=v).mean())
            unbiased = metrics_lib.best_at_k_unbiased(r, k, weights=weights, valid=v)
            out[f"best@{k}_unbiased"] = float(unbiased.mean())
            out[f"pass@{k}"] = float(metrics_lib.pass_at_k(n, success.sum(1), k).mean())
            if r.shape[-1] > 1:  # best@k averaged over w ~ Dir(1) (arXiv:2605.22817 Tables 5-6)
                ew = metrics_lib.expected_best_at_k(r, k, valid=v, num_weights=1000)
                out[f"E_w[best@{k}]"] = float(ew.mean())
    if examples is not None:
        out.update(per_class(examples, success, calls))
        out.update(task.eval_metrics(list(examples), r, v, calls))
    out["diversity"] = float(metrics_lib.reward_diversity(r, v).mean())
    out["collinearity"] = float(metrics_lib.collinearity(r, v))
    return {prefix + k: v for k, v in out.items()}


def problem_class(example) -> str | None:
    """The difficulty class an example carries (``example.meta["difficulty"]``), else None."""
    meta = getattr(example, "meta", None) or {}
    cls = meta.get("difficulty") if isinstance(meta, dict) else None
    return None if cls is None else str(cls)


def per_class(examples: Sequence, success, calls) -> dict[str, float]:
    """``acc/<class>`` (mean success), ``calls/<class>`` (mean tool calls) and
    ``problems/<class>`` (how many problems) per difficulty class, for examples that carry one
    (``success`` / ``calls [P, N]``); {} when none does. Several processes: every process computes
    it from the gathered arrays (no collective); process 0 logs it."""
    classes = [problem_class(ex) for ex in examples]
    out: dict[str, float] = {}
    for cls in sorted({c for c in classes if c is not None}):
        rows = np.asarray([c == cls for c in classes])
        out[f"acc/{cls}"] = float(np.asarray(success)[rows].mean())
        out[f"calls/{cls}"] = float(np.asarray(calls)[rows].mean())
        out[f"problems/{cls}"] = float(rows.sum())
    return out


def write_samples(
    path: str, task: Task, ids, rewards, valid, n_calls, classes: Sequence | None = None
) -> None:
    """Writes every sample of an evaluation to the JSON-lines file ``path`` (process 0 only): one
    line per problem and sample, ``{"problem", "sample", "rewards": {objective: value}, "valid",
    "success", "n_calls"}`` (``rewards [P, N, M]``, ``valid`` / ``n_calls [P, N]``; for answer sets
    the flattened answers), and ``"class"`` when ``classes`` (one per problem) names one. Per-problem paired tests and bootstraps read it
    (``mojax.compare``). The file is rewritten whole, so a step evaluated again after a resume
    leaves one copy."""
    if not distributed.is_leader():
        return
    r = np.asarray(rewards, np.float64)
    v = np.asarray(valid, bool)
    success = task.is_success(r) & v
    names = task.objective_names
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for p, pid in enumerate(ids):
            for n in range(r.shape[1]):
                row = {
                    "problem": str(pid),
                    "sample": n,
                    "rewards": {name: float(r[p, n, k]) for k, name in enumerate(names)},
                    "valid": bool(v[p, n]),
                    "success": bool(success[p, n]),
                    "n_calls": int(np.asarray(n_calls)[p, n]),
                }
                if classes is not None and classes[p] is not None:
                    row["class"] = str(classes[p])
                f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def write_report(path: str, summary: dict[str, float], *, header: str = "") -> str:
    """Writes ``summary`` as JSON (``path``) and as an aligned text table (``path`` with ``.txt``);
    returns the table."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    width = max((len(k) for k in summary), default=0)
    lines = [header] if header else []
    lines += [f"{k:<{width}}  {v:.4f}" for k, v in sorted(summary.items())]
    table = "\n".join(lines) + "\n"
    with open(os.path.splitext(path)[0] + ".txt", "w", encoding="utf-8") as f:
        f.write(table)
    return table


# Held-out rollouts: evaluation and the validation vector.


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
    examples = getattr(run.splits, split)
    rewards, valid, calls, events = held_out_rollouts(run, host, params, examples, key)
    out = summarize(run.task, rewards, valid, calls, ks=tuple(es.ks), examples=examples)
    out.update(event_metrics(events, rows=int(valid.shape[0]) * int(es.num_samples)))
    out.update(host.reward_stats["eval"].as_metrics("reward_invalid/eval"))
    if samples_path:
        ids = [ex.id for ex in examples]
        classes = [problem_class(ex) for ex in examples]
        write_samples(samples_path, run.task, ids, rewards, valid, calls, classes)
    return out


def held_out_rollouts(run, host: HostState, params, examples, key) -> tuple:
    """``rewards [P, N', M]``, ``valid [P, N']`` and ``n_calls [P, N']`` of ``eval.num_samples``
    samples of every example (multi-answer sets flattened, ``N' = N * S``), and the rollouts' events
    (a ``Counter``: the rollout counters summed over the batches, and ``finish/<reason>`` per rollout
    row), rolled out in batches of ``eval.batch_prompts`` prompts (0: all at once) so that a large
    held-out split never holds more rows than one batch. Batch ``i`` draws with ``fold_in(key, i)``;
    a single batch uses ``key`` itself, as an unbatched evaluation does. Every process runs every
    batch (the runner splits a batch's rows over the processes and gathers its rewards, finish
    reasons and counters), so each holds the whole arrays and the same events."""
    es = run.spec.eval
    size = int(es.batch_prompts) or len(examples)
    chunks = [examples[i : i + size] for i in range(0, len(examples), size)]
    parts, events = [], collections.Counter()
    for i, chunk in enumerate(chunks):
        episodes, _ = run.runner.run(
            params,
            chunk,
            key=key if len(chunks) == 1 else jax.random.fold_in(key, i),
            num_samples=es.num_samples,
            temperature=es.temperature,
            states={},  # the reward sources start fresh on every evaluation
            stats=host.reward_stats["eval"],
        )
        events.update(episodes.rollout.counters)
        events.update(f"finish/{x}" for x in episodes.rollout.finish_reason)
        rewards, valid, calls = episodes.rewards, episodes.valid, episodes.n_calls
        if episodes.set_rewards is not None:
            p, _, s, m = episodes.set_rewards.shape
            rewards = episodes.set_rewards.reshape(p, -1, m)
            valid = episodes.set_valid.reshape(p, -1)
            calls = np.repeat(calls, s, axis=1)
        parts.append((rewards, valid, calls))
    return (*(np.concatenate(x, axis=0) for x in zip(*parts)), events)


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
