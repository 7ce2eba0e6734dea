"""Config rules that span sections and need the task's declared objectives.

``combination_errors(config)`` builds the task object (its constructor only: no data is loaded) and
checks what no single spec can: groups of at least 2 samples, ``eval.ks`` within the eval pool, weight
vectors of length M, goal conditioning, and SFT demonstrations for a warm start. ``mojax.rl.spec``
runs it after every section validated.
"""

from __future__ import annotations

from typing import Any

from mojax.config import Checker


def combination_errors(config: Any) -> list[str]:
    """Rules that need the task's declared objectives (the task object is built, no data loaded):
    groups of at least 2 samples, ``eval.ks`` within the eval pool, weight vectors of length M, and
    SFT demonstrations for a warm start."""
    from mojax.rl.builders import build_task
    from mojax.tasks import extra_rewards

    c = Checker(config)
    errors = extra_rewards.config_errors(config.task)  # import paths of added rewards
    if errors:
        return errors
    try:
        task = build_task(config.task)
    except ValueError as e:
        added = str(e).startswith(extra_rewards.KEY)
        return [str(e) if added else f"config.task.kwargs: {e}"]
    c.require(
        config.rollout.num_samples >= 2,
        "rollout.num_samples",
        f"{config.rollout.num_samples}: every estimator normalises within a group of G samples "
        "(G >= 2 needed; G = 1 trains nothing)",
    )
    pool = config.eval.num_samples * max(1, config.task.num_answers)
    too_big = [k for k in config.eval.ks if k > pool]
    c.require(
        not too_big,
        "eval.ks",
        f"{tuple(config.eval.ks)}: k={too_big} exceed the eval pool of eval.num_samples x "
        f"answers = {pool}; raise eval.num_samples or drop those k",
    )
    m = task.num_objectives
    weights = {"advantage.weights": dict(config.advantage).get("weights")}
    if config.paretopo.enabled:
        weights["paretopo.weights"] = config.paretopo.weights
    for key, w in weights.items():
        if w is not None and len(tuple(w)) != m:
            names = list(task.objective_names)
            c.fail(key, f"{tuple(w)} has {len(tuple(w))} entries; task objectives are {names}")
    from mojax.tasks.goal import goal_config_errors

    c.errors += goal_config_errors(config, task)  # goal-conditioned GRPO (task.goal_conditioned)
    demos = config.task.name in ("calculator", "maze") or bool(config.sft.data_path)
    c.require(
        config.sft.steps == 0 or demos,
        "sft.steps",
        f"{config.sft.steps} > 0 needs demonstrations: task {config.task.name!r} generates none, "
        "set sft.data_path (or sft.steps=0)",
    )
    think = c.in_range("sft.think_rate", 0.0, 1.0)
    c.require(
        not think or config.task.name == "calculator",
        "sft.think_rate",
        f"{think} > 0: <think> plans are generated for the calculator's demonstrations only "
        f"(task {config.task.name!r})",
    )
    return c.errors
