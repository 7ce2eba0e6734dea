"""The RL loop: ``run(config, workdir)`` (called by ``mojax.main``) and ``train_and_evaluate``.

In the style of Flax's ``lm1b`` ``train_and_evaluate``: validate the config into a ``RunSpec`` (once;
everything after reads the spec), build the run's fixed pieces once (``mojax.rl.builders.build_run``),
restore the latest checkpoint or start from the initial policy (SFT warm start), then for each step
``rl_step`` (``mojax.rl.step``), then log, run the method's after-step hook, evaluate and checkpoint.
Each step's randomness derives from ``(seed, step)`` and every piece of host state lives in the
checkpointed ``HostState``, so an interrupted and resumed run ends identical to an uninterrupted one.

**The loop's phases** around an RL step: the start (step 0), after each step, and the transcripts.

* ``start_metrics``: the initial policy's held-out evaluation, then the method's ``start`` hook;
* ``after_step``: the method's ``after_step`` hook, then the held-out evaluation when due;
* ``transcript_rows``: the first ``transcripts_per_step`` rows of a step, for ``transcripts.jsonl``.

A hook that asks for a validation vector (``validate()``) gets the mean reward vector of greedy
rollouts on the validation split (``mojax.rl.evaluate.validation_vector``; keywords
``num_samples``, ``temperature`` and reward-source options change how it is rolled out and scored); its ``val/...``
metrics are logged with the step's. Host state is passed in and returned.

**Interrupts**: what the RL loop saves when a signal stops it (``mojax.infra.preemption``), and how it resumes.

A signal is acted on at the next poll (``Preemption.check``: between two decode calls of a rollout,
after an SFT step, at a step boundary). Where the loop is then decides what "the last completed
state" is:

* **a step's rollouts** (collect, with DAPO refills): the rollout is abandoned; the state and host
  state of the previous step are saved (unless a checkpoint of that step exists). The resumed run
  redoes the step from its ``(seed, step)`` key, so it collects the same rollouts.
* **after a step's update** (the method's after-step hook, the evaluation): the update is kept; the
  step is saved with ``HostState.pending`` = its metrics and transcript rows so far. The resumed
  run first redoes the after-step phases of that step from the same params and host state, logs
  it, then goes on. ``metrics.jsonl`` is truncated before that step (:func:`resume_step`).
* **the initial evaluation** (step 0): nothing new to save; the resumed run starts it again.
* **a step boundary** (a signal during an update with no rollout after it): the finished step is
  saved, as when the loop polls at its top.

Multi-host: the poll is agreed by every process, so all stop at the same point and save the
same step together; they leave :func:`stop` together, after the save is committed.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import logging

from mojax import distributed, learner
from mojax import spec as spec_lib
from mojax.distributed import is_leader
from mojax.infra import checkpoint as ckpt_lib
from mojax.infra import logbook as log_lib
from mojax.infra import plots
from mojax.infra import workdir as workdir_lib
from mojax.infra.jsonl import write_durable
from mojax.infra.preemption import Interrupted, Preempted, Preemption
from mojax.rl import warm_start
from mojax.rl.async_loop import InterruptedAfterUpdate, make_step_fn
from mojax.rl.builders import build_run
from mojax.rl.evaluate import evaluate, validation_vector, write_report
from mojax.rl.state import HostState
from mojax.rl.step import Run
from mojax.rl.warm_start import initial_params
from mojax.spec import RunSpec, input_files

PROGRESS_KEYS = ("reward/scalar/mean", "loss", "eval/accuracy", "eval/tool_calls", "time/step_s")


def run(config, workdir: str) -> dict[str, float]:
    """Validates ``config`` and runs it in ``workdir`` (train, eval, dry run or show).

    Training holds the workdir's lock (``mojax.infra.workdir.lock``) and applies the workdir contract
    first (``mojax.infra.workdir.prepare``): a workdir another job holds or that holds a different
    config is refused and a finished one is reported, before anything is built. URL paths are
    refused in every mode (``mojax.infra.workdir.check_paths``).
    """
    if config.mode == "show":  # every resolved key, its value and its help; nothing is built
        from mojax.spec.show import show

        print(show(config), flush=True)
        return {}
    workdir_lib.check_paths(config, workdir)
    spec = spec_lib.validate(config)
    if spec.dry_run:
        from mojax.rl.dry_run import dry_run

        return dry_run(spec)
    input_files.check_files(spec)
    if spec.mode == "eval":
        os.makedirs(workdir, exist_ok=True)
        return evaluate_only(spec, workdir)
    with workdir_lib.lock(workdir):
        prepared = input_files.prepare_workdir(spec, workdir)
        if isinstance(prepared, workdir_lib.Finished):
            if is_leader():
                print(prepared.message, flush=True)
            return prepared.summary
        return train_and_evaluate(spec, workdir, records=prepared)


def train_and_evaluate(
    spec: RunSpec, workdir: str, records: workdir_lib.Deferred | None = None
) -> dict[str, float]:
    """Trains ``spec`` in ``workdir`` (resuming from its latest checkpoint); returns the last
    step's metrics. ``records``: the workdir records ``resume=force`` writes once the checkpoint
    restored (``mojax.infra.workdir.Deferred``).

    Raises:
      Preempted: SIGTERM / SIGINT / SIGHUP arrived; the work under way was abandoned and the last
        completed state saved (``mojax.rl.trainer``).
    """
    from mojax.rollout.tools import ToolPool

    pool = ToolPool(max_workers=spec.rollout.tool_workers, timeout_s=spec.rollout.tool_timeout_s)
    ckpt = ckpt_lib.Checkpointer(
        os.path.join(workdir, "checkpoints"), max_to_keep=spec.keep_checkpoints
    )
    writer = None
    try:
        with Preemption(grace_s=spec.preemption_grace_s) as preemption:
            run_ = build_run(spec, workdir, pool, interrupt=preemption.check)
            state, host, resumed = restore_or_start(run_, workdir, ckpt)
            if records is not None:  # resume=force: config.json and done only now
                records.write()
            writer = log_lib.MetricsWriter(
                workdir,
                resume_step=resume_step(host, resumed),
                wandb=spec.wandb.as_dict(),
                config=spec.resolved,
                objectives=run_.task.objective_names,
            )
            ref = learner.policy_params(state)
            if spec.ppo.kl_coef:  # the KL reference is the initial policy
                ref = warm_start.reference_params(run_, workdir, state, resumed)
            run_ = with_reference(run_, ref)
            last = _loop(run_, workdir, state, host, resumed, writer, ckpt, preemption)
        ckpt.wait()
        plots.plot_run(workdir, run_.task.objective_names)
        if is_leader():
            write_durable(os.path.join(workdir, workdir_lib.DONE_FILE), f"{spec.steps}\n")
        return last
    finally:
        ckpt.close()
        pool.close()
        if writer is not None:
            writer.close()


def _loop(run_: Run, workdir, state, host, resumed, writer, ckpt, preemption) -> dict:
    """Steps until ``spec.steps`` or a signal; returns the last step's metrics.

    Raises:
      Preempted: after saving the last completed state (``mojax.rl.trainer``).
    """
    spec = run_.spec
    last: dict[str, float] = {}
    saved = host.step if resumed else None

    step_fn = make_step_fn(run_)  # rl_step, or the asynchronous pipeline (rollout.staleness)

    def halt(signum: int, at, what: str):  # reads ``state`` and ``saved`` when called
        record = functools.partial(warm_start.saved_host, run_)
        return stop(preemption, ckpt, signum, state, at, saved=saved, what=what, record=record)

    if not resumed:
        try:
            host, last = start_metrics(run_, host, learner.policy_params(state))
        except Interrupted as e:
            what = "before RL step 1 (the initial evaluation was abandoned)"
            raise Preempted(e.signum, 0, None, what) from None
        _log(writer, 0, spec.steps, last)
    elif host.pending:  # stopped after this step's update: its after-step phases first
        p, done, t0 = host.pending, dataclasses.replace(host, pending=None), time.time()
        try:
            host, last = _finish_step(
                run_, workdir, writer, done, state, p["metrics"], p["transcripts"], preemption, t0
            )
        except Interrupted as e:
            what = f"again before the evaluation of RL step {host.step}"
            raise halt(e.signum, host, what) from None
    while host.step < spec.steps and not (signum := preemption.requested()):
        t0 = time.time()
        key = jax.random.fold_in(jax.random.PRNGKey(spec.seed), host.step)
        try:
            new_host, state, last, episodes = step_fn(run_, host, state, key)
        except InterruptedAfterUpdate as e:  # generating ahead: the update is kept
            state = e.state
            rows = transcript_rows(run_, e.episodes) if spec.transcripts_per_step else None
            what = (
                f"after the update of RL step {e.host.step} (the rollout generated ahead was "
                "dropped; its evaluation is redone on resume)"
            )
            raise halt(e.signum, with_pending(e.host, e.metrics, rows), what) from None
        except Interrupted as e:  # in the rollouts: the previous step is the last completed one
            what = f"after RL step {host.step} (the rollout of step {host.step + 1} was abandoned)"
            raise halt(e.signum, host, what) from None
        host = new_host
        rows = transcript_rows(run_, episodes) if spec.transcripts_per_step else None
        try:
            host, last = _finish_step(
                run_, workdir, writer, host, state, last, rows, preemption, t0
            )
        except Interrupted as e:  # after the update: saved with its after-step phases pending
            what = f"after the update of RL step {host.step} (its evaluation is redone on resume)"
            raise halt(e.signum, with_pending(host, last, rows), what) from None
        if host.step % spec.checkpoint_every == 0 or host.step == spec.steps:
            ckpt.save(host.step, state, warm_start.saved_host(run_, host), force=True)
            saved = host.step
    if host.step < spec.steps:  # stopped by a signal at a step boundary
        raise halt(signum, host, f"after RL step {host.step}")
    return last


def _finish_step(run_, workdir, writer, host, state, last, rows, preemption, t0):
    """A step's after-step phases (the method's hook, evaluation when due), its transcripts and
    its log line; returns the host state and the step's metrics."""
    spec = run_.spec
    host, held_out = after_step(run_, host, learner.policy_params(state))
    last = {**last, **held_out}
    if rows is not None:
        log_lib.write_transcripts(workdir, host.step, rows, objectives=run_.task.objective_names)
    last["time/step_s"] = time.time() - t0
    last["time/signal_gap_s"] = preemption.reset_gap()
    _log(writer, host.step, spec.steps, last)
    return host, last


def restore_or_start(run_: Run, workdir: str, ckpt) -> tuple:
    """``(train_state, host, resumed)``: the latest checkpoint, or the initial policy at step 0."""
    target = learner.abstract_train_state(
        run_.learner.model_config, run_.learner.tx, run_.learner.mesh, run_.learner.rules
    )
    if ckpt.latest_step() is not None:
        state, host, step = ckpt.restore(target, fallback=True)
        logging.info("resumed from %s at RL step %d", ckpt.directory, step)
        return warm_start.with_base(run_, workdir, state), HostState.from_dict(host), True
    params = initial_params(run_, workdir)
    state = learner.create_train_state(
        run_.learner.model_config,
        run_.learner.tx,
        seed=run_.spec.seed,
        mesh=run_.learner.mesh,
        rules=run_.learner.rules,
        params=params,
    )
    return state, HostState(), False


def with_reference(run_: Run, params) -> Run:
    """``run_`` with the frozen reference policy's log-probs when the KL term is on."""
    if not run_.spec.ppo.kl_coef:
        return run_
    ref_params = jax.tree.map(lambda x: x.copy(), params)
    fn = learner.make_logprob_fn(run_.learner.model_config, run_.learner.mesh, run_.learner.rules)
    ref = lambda t, m: fn(ref_params, t, m)  # noqa: E731
    return dataclasses.replace(run_, learner=dataclasses.replace(run_.learner, ref_logprobs=ref))


def evaluate_only(spec: RunSpec, workdir: str) -> dict[str, float]:
    """``mode=eval``: evaluates ``eval.checkpoint`` (an HF dir) or the workdir's latest checkpoint
    (opened read-only: a running job's checkpoints are neither cleaned up nor moved aside)."""
    from mojax.rollout.tools import ToolPool

    pool = ToolPool(max_workers=spec.rollout.tool_workers, timeout_s=spec.rollout.tool_timeout_s)
    try:
        run_ = build_run(spec, workdir, pool)
        if spec.eval.checkpoint:
            from mojax.models import load_params

            params = load_params(spec.eval.checkpoint, run_.learner.model_config)
        else:
            ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
            try:
                target = learner.abstract_train_state(
                    run_.learner.model_config,
                    run_.learner.tx,
                    run_.learner.mesh,
                    run_.learner.rules,
                )
                state = warm_start.with_base(run_, workdir, ckpt.restore(target, fallback=True)[0])
                params = learner.policy_params(state)
            finally:
                ckpt.close()
        path = os.path.join(workdir, "eval", f"{spec.eval.split}.json")
        samples = os.path.splitext(path)[0] + ".jsonl"
        summary = evaluate(
            run_, HostState(), params, 0, split=spec.eval.split, samples_path=samples
        )
        header = f"task={spec.task.name} split={spec.eval.split}"
        if is_leader():
            print(write_report(path, summary, header=header))
        return summary
    finally:
        pool.close()


def _log(writer, step: int, steps: int, metrics: dict) -> None:
    writer.write(step, metrics)  # a no-op except on process 0
    if is_leader():
        print(log_lib.format_progress(step, steps, metrics, PROGRESS_KEYS), flush=True)


# The loop's phases around a step.


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
    """Step 0: the initial policy's evaluation, then the method's start hook. Scores into its
    own copy of the reward stats (``HostState.with_own_stats``)."""
    host = host.with_own_stats()
    metrics = evaluate(run, host, params, 0, samples_path=samples_path(run, 0))
    host, hm = _with_validation(
        run, host, params, 0, lambda validate: run.hooks.start(host.method, validate)
    )
    metrics.update(hm)
    return host, metrics


def after_step(run, host: HostState, params) -> tuple[HostState, dict]:
    """The method's after-step hook, then the held-out evaluation when due. Scores into its own
    copy of the reward stats (``HostState.with_own_stats``): a signal during the evaluation leaves
    ``host`` as it was, so the pending checkpoint does not count the validation twice on resume."""
    spec, done, host = run.spec, host.step, host.with_own_stats()
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


# Interrupts: what a signal saves.


def resume_step(host: HostState, resumed: bool) -> int | None:
    """The last step whose ``metrics.jsonl`` line a resumed run keeps (None: a fresh start). A
    pending step's line is written again when its after-step phases are redone."""
    if not resumed:
        return None
    return host.step - 1 if host.pending else host.step


def with_pending(host: HostState, metrics: dict[str, Any], rows: list | None) -> HostState:
    """``host`` (after a step's update) marked as waiting for that step's after-step phases."""
    return dataclasses.replace(host, pending={"metrics": dict(metrics), "transcripts": rows})


def stop(
    preemption,
    ckpt,
    signum: int,
    state,
    host: HostState,
    *,
    saved: int | None,
    what: str,
    record=HostState.to_dict,
) -> Preempted:
    """Saves ``(state, record(host))`` as step ``host.step`` unless that step is saved already
    (``saved``), waits for the save, and returns the :class:`Preempted` to raise. ``record``
    makes the saved host dict (a LoRA run's names its frozen base: ``mojax.rl.warm_start``)."""
    if saved != host.step:
        ckpt.save(host.step, state, record(host), force=True)
    ckpt.wait()
    # every process past the commit before any exits: a launcher that stops the others when one
    # exits (srun --kill-on-bad-exit) must not cut a slower process's part of the save short
    distributed.barrier("mojax_preempted_saved")
    return Preempted(
        signum,
        host.step,
        ckpt.step_path(host.step),
        what,
        saved_after_s=preemption.seconds_since_signal(),
        grace_s=preemption.grace_s,
    )
