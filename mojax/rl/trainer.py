"""The RL loop: ``run(config, workdir)`` (called by ``mojax.main``) and ``train_and_evaluate``.

In the style of Flax's ``lm1b`` ``train_and_evaluate``: validate the config into a ``RunSpec``, build
the run's fixed pieces once (``build_run``), restore the latest checkpoint or start from the initial
policy (SFT warm start), then for each step ``rl_step`` (``mojax.rl.step``), then log, validate
(ParetoPO Stage 1), evaluate and checkpoint. Each step's randomness derives from ``(seed, step)``
and every piece of host state lives in the checkpointed ``HostState``, so an interrupted and
resumed run ends identical to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np
from absl import logging

from mojax import checkpoint as ckpt_lib
from mojax import logging as log_lib
from mojax import rl
from mojax import sharding as sharding_lib
from mojax import workdir as workdir_lib
from mojax.distributed import is_leader
from mojax.preemption import Preempted, Preemption
from mojax.rl import builders
from mojax.rl import spec as spec_lib
from mojax.rl.episodes import EpisodeRunner
from mojax.rl.evaluate import write_report
from mojax.rl.host_state import HostState
from mojax.rl.paretopo import ParetoPOController
from mojax.rl.step import Run, rl_step, task_estimator_kwargs
from mojax.rl.validation import evaluate, validation_vector
from mojax.rl.warm_start import initial_params
from mojax.sampling import bucket_length

PROGRESS_KEYS = ("reward/scalar/mean", "loss", "eval/accuracy", "eval/tool_calls", "time/step_s")


def run(config, workdir: str) -> dict[str, float]:
    """Validates ``config`` and runs it in ``workdir`` (train, eval or dry run).

    Training holds the workdir's lock (``mojax.workdir.lock``) and applies the workdir contract
    first (``mojax.workdir.prepare``): a workdir another job holds or that holds a different
    config is refused and a finished one is reported, before anything is built. URL paths are
    refused in every mode (``mojax.workdir.check_paths``).
    """
    if config.mode == "show":  # every resolved key, its value and its help; nothing is built
        from mojax.config_show import show

        print(show(config), flush=True)
        return {}
    spec = spec_lib.validate(config)
    workdir_lib.check_paths(config, workdir)
    if spec.dry_run:
        from mojax.rl.dry_run import dry_run

        return dry_run(config)
    if spec.mode == "eval":
        os.makedirs(workdir, exist_ok=True)
        return evaluate_only(config, workdir)
    with workdir_lib.lock(workdir):
        finished = workdir_lib.prepare(config, workdir)
        if finished is not None:
            if is_leader():
                print(finished.message, flush=True)
            return finished.summary
        return train_and_evaluate(config, workdir)


def build_run(config, spec: spec_lib.RunSpec, workdir: str, pool) -> Run:
    """The fixed pieces of a run (task, data, tokenizer, model config, rollout runner, jitted step)."""
    mesh = sharding_lib.mesh_from_config(config.mesh)
    rules = sharding_lib.logical_axis_rules(config)
    task = builders.build_task(config.task)
    splits = builders.load_splits(task, config.task, spec.seed)
    tokenizer = builders.build_tokenizer(config, task, splits, workdir)
    model_config = builders.build_model_config(config, tokenizer)
    runner = EpisodeRunner(
        spec,
        task,
        tokenizer,
        model_config,
        tool=builders.build_tool(task, config.rollout, splits),
        pool=pool,
        judge=builders.build_judge(config, task),
        mesh=mesh,
    )
    examples = splits.train + splits.validation + splits.test
    total_len = bucket_length(max(len(runner.prompt_ids(ex)) for ex in examples))
    tx = rl.make_optimizer(spec.optimizer)
    train_step = rl.make_train_step(
        model_config, tx, spec.ppo, mesh, rules, lr_schedule=rl.make_schedule(spec.optimizer)
    )
    estimator_kwargs = task_estimator_kwargs(spec.advantage, task)
    controller = None
    if spec.advantage.paretopo.enabled:
        controller = ParetoPOController.from_spec(
            spec.advantage, len(splits.train), spec.rollout.prompts_per_step
        )
    return Run(
        spec=spec,
        task=task,
        splits=splits,
        runner=runner,
        train_step=train_step,
        controller=controller,
        total_len=total_len + spec.rollout.max_response_len,
        model_config=model_config,
        tokenizer=tokenizer,
        tx=tx,
        mesh=mesh,
        rules=rules,
        estimator_kwargs=estimator_kwargs,
    )


def train_and_evaluate(config, workdir: str) -> dict[str, float]:
    """Trains ``config`` in ``workdir`` (resuming from its latest checkpoint); returns the last
    step's metrics.

    Raises:
      Preempted: SIGTERM / SIGINT arrived; the step under way was finished and checkpointed
        (``mojax.preemption``).
    """
    from mojax.rollout.tools import ToolPool

    spec = spec_lib.validate(config)
    pool = ToolPool(max_workers=spec.rollout.tool_workers, timeout_s=spec.rollout.tool_timeout_s)
    ckpt = ckpt_lib.Checkpointer(
        os.path.join(workdir, "checkpoints"), max_to_keep=spec.keep_checkpoints
    )
    writer = None
    try:
        with Preemption() as preemption:
            run_ = build_run(config, spec, workdir, pool)
            state, host, resumed = restore_or_start(run_, config, workdir, ckpt)
            names = run_.task.objective_names
            writer = log_lib.MetricsWriter(
                workdir,
                resume_step=host.step if resumed else None,
                wandb=config.get("wandb"),
                config=config,
                objectives=names,
            )
            ref = state.params
            if resumed and spec.ppo.kl_coef:  # the KL reference is the initial policy
                ref = initial_params(run_, config, workdir)
            run_ = with_reference(run_, ref)
            last: dict[str, float] = {}
            saved = host.step if resumed else None
            if not resumed:
                host, last = start_metrics(run_, host, state.params)
                _log(writer, 0, spec.steps, last)
            while host.step < spec.steps and not (signum := preemption.requested()):
                t0 = time.time()
                key = jax.random.fold_in(jax.random.PRNGKey(spec.seed), host.step)
                host, state, last, episodes = rl_step(run_, host, state, key)
                host, held_out = after_step(run_, host, state.params)
                last.update(held_out)
                if spec.transcripts_per_step:
                    rows = transcript_rows(run_, episodes)
                    log_lib.write_transcripts(workdir, host.step, rows, objectives=names)
                last["time/step_s"] = time.time() - t0
                _log(writer, host.step, spec.steps, last)
                if host.step % spec.checkpoint_every == 0 or host.step == spec.steps:
                    ckpt.save(host.step, state, host.to_dict(), force=True)
                    saved = host.step
            if host.step < spec.steps:  # stopped by a signal: checkpoint the finished step
                if saved != host.step:
                    ckpt.save(host.step, state, host.to_dict(), force=True)
                ckpt.wait()
                raise Preempted(signum, host.step, ckpt.step_path(host.step))
        ckpt.wait()
        log_lib.plot_run(workdir, run_.task.objective_names)
        if is_leader():
            with open(os.path.join(workdir, workdir_lib.DONE_FILE), "w") as f:
                f.write(f"{spec.steps}\n")
        return last
    finally:
        ckpt.close()
        pool.close()
        if writer is not None:
            writer.close()


def restore_or_start(run_: Run, config, workdir: str, ckpt) -> tuple:
    """``(train_state, host, resumed)``: the latest checkpoint, or the initial policy at step 0."""
    target = rl.abstract_train_state(run_.model_config, run_.tx, run_.mesh, run_.rules)
    if ckpt.latest_step() is not None:
        state, host, step = ckpt.restore(target, fallback=True)
        logging.info("resumed from %s at RL step %d", ckpt.directory, step)
        return state, HostState.from_dict(host), True
    params = initial_params(run_, config, workdir)
    state = rl.create_train_state(
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
    fn = rl.make_logprob_fn(run_.model_config, run_.mesh, run_.rules)
    return dataclasses.replace(run_, ref_logprobs=lambda t, m: fn(ref_params, t, m))


def start_metrics(run_: Run, host: HostState, params) -> tuple[HostState, dict]:
    """Step 0: the initial policy's evaluation and, for ParetoPO, ``v_0`` (archive and reference)."""
    metrics = evaluate(run_, host, params, 0)
    if run_.controller is not None:
        host, v0, vm = validation_vector(run_, host, params, 0)
        stage1, pm = run_.controller.start(v0)
        host = dataclasses.replace(host, stage1=stage1)
        metrics.update({**vm, **pm})
    return host, metrics


def after_step(run_: Run, host: HostState, params) -> tuple[HostState, dict]:
    """ParetoPO Stage-1 validation (archive update) and held-out evaluation when due."""
    spec, done, metrics = run_.spec, host.step, {}
    c = run_.controller
    if (
        c is not None
        and c.stage(done - 1) == 1
        and done % spec.advantage.paretopo.validate_every == 0
    ):
        host, v, vm = validation_vector(run_, host, params, done)
        stage1, pm = c.on_validation(host.stage1, v)
        host = dataclasses.replace(host, stage1=stage1)
        metrics.update({**vm, **pm})
    if done % spec.eval_every == 0 or done == spec.steps:
        metrics.update(evaluate(run_, host, params, done))
    return host, metrics


def transcript_rows(run_: Run, episodes) -> list[dict]:
    """The first ``transcripts_per_step`` rows of a step: the rendered prompt, the response with its
    tool observations marked, the rewards per objective and the advantage."""
    r, g = episodes.rollout, episodes.num_samples
    rewards = episodes.rewards.reshape(-1, episodes.rewards.shape[-1])
    rows = []
    for i in range(min(run_.spec.transcripts_per_step, len(episodes.texts))):
        n = int(r.lengths[i])
        segments = log_lib.response_segments(
            np.asarray(r.tokens[i, :n]), np.asarray(r.loss_mask[i, :n]), run_.tokenizer.decode
        )
        rows.append(
            {
                "prompt_id": episodes.examples[i // g].id,
                "prompt": run_.tokenizer.decode(episodes.prompt_ids[i // g]),
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


def evaluate_only(config, workdir: str) -> dict[str, float]:
    """``mode=eval``: evaluates ``eval.checkpoint`` (an HF dir) or the workdir's latest checkpoint
    (opened read-only: a running job's checkpoints are neither cleaned up nor moved aside)."""
    from mojax.rollout.tools import ToolPool

    spec = spec_lib.validate(config)
    pool = ToolPool(max_workers=spec.rollout.tool_workers, timeout_s=spec.rollout.tool_timeout_s)
    try:
        run_ = build_run(config, spec, workdir, pool)
        if spec.eval.checkpoint:
            from mojax.models import load_params

            params = load_params(spec.eval.checkpoint, run_.model_config)
        else:
            ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
            try:
                target = rl.abstract_train_state(run_.model_config, run_.tx, run_.mesh, run_.rules)
                params = ckpt.restore(target, fallback=True)[0].params
            finally:
                ckpt.close()
        summary = evaluate(run_, HostState(), params, 0, split=spec.eval.split)
        path = os.path.join(workdir, "eval", f"{spec.eval.split}.json")
        header = f"task={config.task.name} split={spec.eval.split}"
        if is_leader():
            print(write_report(path, summary, header=header))
        return summary
    finally:
        pool.close()


def _log(writer, step: int, steps: int, metrics: dict) -> None:
    writer.write(step, metrics)  # a no-op except on process 0
    if is_leader():
        print(log_lib.format_progress(step, steps, metrics, PROGRESS_KEYS), flush=True)
