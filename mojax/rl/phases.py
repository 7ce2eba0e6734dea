"""The loop's phases around an RL step: the start (step 0), after each step, and the transcripts.

* ``start_metrics``: the initial policy's held-out evaluation, then the method's ``start`` hook;
* ``after_step``: the method's ``after_step`` hook, then the held-out evaluation when due;
* ``transcript_rows``: the first ``transcripts_per_step`` rows of a step, for ``transcripts.jsonl``.

A hook that asks for a validation vector (``validate()``) gets the mean reward vector of greedy
rollouts on the validation split (``mojax.rl.validation.validation_vector``; keywords
``num_samples``, ``temperature`` and reward-source options change how it is rolled out and scored); its ``val/...``
metrics are logged with the step's. Host state is passed in and returned.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from mojax import logbook as log_lib
from mojax.rl.host_state import HostState
from mojax.rl.validation import evaluate, validation_vector


def _with_validation(run, host: HostState, params, step: int, hook: Callable) -> tuple:
    """``hook(validate)`` -> ``(state, metrics)``; returns the host state with the method state
    (and the reward sources' validation state, when it validated) and the metrics."""
    box: dict[str, Any] = {"host": host, "metrics": {}}

    def validate(**settings) -> np.ndarray:
        box["host"], v, vm = validation_vector(run, box["host"], params, step, **settings)
        box["metrics"].update(vm)
        return v

    state, metrics = hook(validate)
    return dataclasses.replace(box["host"], method=state), {**box["metrics"], **metrics}


def samples_path(run, step: int) -> str:
    """``<workdir>/eval/<step>.jsonl``: every held-out sample of the evaluation after ``step``
    updates ("" when the run has no workdir)."""
    return os.path.join(run.workdir, "eval", f"{step}.jsonl") if run.workdir else ""


def start_metrics(run, host: HostState, params) -> tuple[HostState, dict]:
    """Step 0: the initial policy's evaluation, then the method's start hook."""
    metrics = evaluate(run, host, params, 0, samples_path=samples_path(run, 0))
    host, hm = _with_validation(
        run, host, params, 0, lambda validate: run.hooks.start(host.method, validate)
    )
    metrics.update(hm)
    return host, metrics


def after_step(run, host: HostState, params) -> tuple[HostState, dict]:
    """The method's after-step hook, then the held-out evaluation when due."""
    spec, done = run.spec, host.step
    host, metrics = _with_validation(
        run, host, params, done, lambda validate: run.hooks.after_step(done, host.method, validate)
    )
    if done % spec.eval_every == 0 or done == spec.steps:
        metrics.update(evaluate(run, host, params, done, samples_path=samples_path(run, done)))
    return host, metrics


def transcript_rows(run, episodes) -> list[dict]:
    """The first ``transcripts_per_step`` rows of a step: the rendered prompt, the response with its
    tool observations marked, the rewards per objective and the advantage."""
    r, g = episodes.rollout, episodes.num_samples
    rewards = episodes.rewards.reshape(-1, episodes.rewards.shape[-1])
    rows = []
    for i in range(min(run.spec.transcripts_per_step, len(episodes.texts))):
        n = int(r.lengths[i])
        segments = log_lib.response_segments(
            np.asarray(r.tokens[i, :n]), np.asarray(r.loss_mask[i, :n]), run.tokenizer.decode
        )
        rows.append(
            {
                "prompt_id": episodes.examples[i // g].id,
                "prompt": run.tokenizer.decode(episodes.prompt_ids[i // g]),
                "sample": i % g,
                "response": episodes.texts[i],
                "segments": segments,
                "rewards": rewards[i].tolist(),
                "advantage": float(episodes.advantages.reshape(-1)[i]),
                "valid": bool(episodes.valid.reshape(-1)[i]),
                "n_calls": int(r.n_calls[i]),
                "finish_reason": str(r.finish_reason[i]),
            }
        )
    return rows
