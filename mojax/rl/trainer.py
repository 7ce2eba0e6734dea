"""The RL loop: ``run(config, workdir)`` (called by ``mojax.main``) and ``train_and_evaluate``.

In the style of Flax's ``lm1b`` ``train_and_evaluate``: validate the config into a ``RunSpec`` (once;
everything after reads the spec), build the run's fixed pieces once (``mojax.rl.builders.build_run``),
restore the latest checkpoint or start from the initial policy (SFT warm start), then for each step
``rl_step`` (``mojax.rl.step``), then log, run the method's after-step hook, evaluate and checkpoint.
Each step's randomness derives from ``(seed, step)`` and every piece of host state lives in the
checkpointed ``HostState``, so an interrupted and resumed run ends identical to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import jax
from absl import logging

from mojax import checkpoint as ckpt_lib
from mojax import learner, plots
from mojax import logbook as log_lib
from mojax import workdir as workdir_lib
from mojax.distributed import is_leader
from mojax.jsonl import write_durable
from mojax.preemption import Interrupted, Preempted, Preemption
from mojax.rl import adapters, inputs, interrupts
from mojax.rl import spec as spec_lib
from mojax.rl.async_loop import InterruptedAfterUpdate, make_step_fn
from mojax.rl.builders import build_run
from mojax.rl.evaluate import write_report
from mojax.rl.host_state import HostState
from mojax.rl.phases import after_step, start_metrics, transcript_rows
from mojax.rl.spec import RunSpec
from mojax.rl.step import Run
from mojax.rl.validation import evaluate
from mojax.rl.warm_start import initial_params

PROGRESS_KEYS = ("reward/scalar/mean", "loss", "eval/accuracy", "eval/tool_calls", "time/step_s")


def run(config, workdir: str) -> dict[str, float]:
    """Validates ``config`` and runs it in ``workdir`` (train, eval, dry run or show).

    Training holds the workdir's lock (``mojax.workdir.lock``) and applies the workdir contract
    first (``mojax.workdir.prepare``): a workdir another job holds or that holds a different
    config is refused and a finished one is reported, before anything is built. URL paths are
    refused in every mode (``mojax.workdir.check_paths``).
    """
    if config.mode == "show":  # every resolved key, its value and its help; nothing is built
        from mojax.rl.show import show

        print(show(config), flush=True)
        return {}
    workdir_lib.check_paths(config, workdir)
    spec = spec_lib.validate(config)
    if spec.dry_run:
        from mojax.rl.dry_run import dry_run

        return dry_run(spec)
    inputs.check_files(spec)
    if spec.mode == "eval":
        os.makedirs(workdir, exist_ok=True)
        return evaluate_only(spec, workdir)
    with workdir_lib.lock(workdir):
        prepared = inputs.prepare_workdir(spec, workdir)
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
    restored (``mojax.workdir.Deferred``).

    Raises:
      Preempted: SIGTERM / SIGINT / SIGHUP arrived; the work under way was abandoned and the last
        completed state saved (``mojax.rl.interrupts``).
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
                resume_step=interrupts.resume_step(host, resumed),
                wandb=spec.wandb.as_dict(),
                config=spec.resolved,
                objectives=run_.task.objective_names,
            )
            ref = learner.policy_params(state)
            if spec.ppo.kl_coef:  # the KL reference is the initial policy
                ref = adapters.reference_params(run_, workdir, state, resumed)
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
      Preempted: after saving the last completed state (``mojax.rl.interrupts``).
    """
    spec = run_.spec
    last: dict[str, float] = {}
    saved = host.step if resumed else None

    step_fn = make_step_fn(run_)  # rl_step, or the asynchronous pipeline (rollout.staleness)

    def halt(signum: int, at, what: str):  # reads ``state`` and ``saved`` when called
        record = functools.partial(adapters.saved_host, run_)
        return interrupts.stop(
            preemption, ckpt, signum, state, at, saved=saved, what=what, record=record
        )

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
            raise halt(e.signum, interrupts.with_pending(e.host, e.metrics, rows), what) from None
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
            raise halt(e.signum, interrupts.with_pending(host, last, rows), what) from None
        if host.step % spec.checkpoint_every == 0 or host.step == spec.steps:
            ckpt.save(host.step, state, adapters.saved_host(run_, host), force=True)
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
    target = learner.abstract_train_state(run_.model_config, run_.tx, run_.mesh, run_.rules)
    if ckpt.latest_step() is not None:
        state, host, step = ckpt.restore(target, fallback=True)
        logging.info("resumed from %s at RL step %d", ckpt.directory, step)
        return adapters.with_base(run_, workdir, state), HostState.from_dict(host), True
    params = initial_params(run_, workdir)
    state = learner.create_train_state(
        run_.model_config,
        run_.tx,
        seed=run_.spec.seed,
        mesh=run_.mesh,
        rules=run_.rules,
        params=params,
    )
    return state, HostState(), False


def with_reference(run_: Run, params) -> Run:
    """``run_`` with the frozen reference policy's log-probs when the KL term is on."""
    if not run_.spec.ppo.kl_coef:
        return run_
    ref_params = jax.tree.map(lambda x: x.copy(), params)
    fn = learner.make_logprob_fn(run_.model_config, run_.mesh, run_.rules)
    return dataclasses.replace(run_, ref_logprobs=lambda t, m: fn(ref_params, t, m))


def evaluate_only(spec: RunSpec, workdir: str) -> dict[str, float]:
    """``mode=eval``: evaluates ``eval.checkpoint`` (an HF dir) or the workdir's latest checkpoint
    (opened read-only: a running job's checkpoints are neither cleaned up nor moved aside)."""
    from mojax.rollout.tools import ToolPool

    pool = ToolPool(max_workers=spec.rollout.tool_workers, timeout_s=spec.rollout.tool_timeout_s)
    try:
        run_ = build_run(spec, workdir, pool)
        if spec.eval.checkpoint:
            from mojax.models import load_params

            params = load_params(spec.eval.checkpoint, run_.model_config)
        else:
            ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
            try:
                target = learner.abstract_train_state(
                    run_.model_config, run_.tx, run_.mesh, run_.rules
                )
                state = adapters.with_base(run_, workdir, ckpt.restore(target, fallback=True)[0])
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
