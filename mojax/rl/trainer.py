"""The RL trainer: ``run(config, workdir)`` (called by ``mojax.main``).

One RL step (design.md "The loop")::

    examples (PromptIterator) -> rollouts + tool turns (EpisodeRunner) -> rewards [P, G, M]
      -> advantages (ESTIMATORS[config.estimator] or ParetoPO's two stages) -> PPO update(s)
      -> metrics.jsonl / TensorBoard, validation (Stage-1 archive), evaluation, checkpoint

An SFT warm start (``config.sft.steps``) runs first. A run resumes from its latest checkpoint
automatically: the train state and every piece of host state (data position, N_optimal tables,
ParetoPO's archive, reward statistics) are restored, and each step's randomness derives from
``(seed, step)``, so an interrupted and resumed run ends identical to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from typing import Any

import jax
import numpy as np
from absl import logging

from mojax import advantages as adv_lib
from mojax import checkpoint as ckpt_lib
from mojax import config as config_lib
from mojax import logging as log_lib
from mojax import rl
from mojax import sharding as sharding_lib
from mojax.pareto import NOptimalTracker
from mojax.rl import builders, sft_data
from mojax.rl.batch import assemble_batch
from mojax.rl.data import PromptIterator
from mojax.rl.episodes import EpisodeRunner, Episodes, rollout_metrics
from mojax.rl.evaluate import summarize, write_report
from mojax.rl.paretopo import ParetoPOController
from mojax.rl.rewards import groups_with_signal, overlong_penalty
from mojax.sampling import bucket_length
from mojax.tasks.base import RewardStats

PROGRESS_KEYS = ("reward/scalar/mean", "loss", "eval/accuracy", "eval/tool_calls", "time/step_s")


def run(config, workdir: str) -> dict[str, float]:
    """Validates ``config`` and runs it in ``workdir`` (train, eval or dry run)."""
    config_lib.validate(config)
    os.makedirs(workdir, exist_ok=True)
    if config.dry_run:
        from mojax.rl.dry_run import dry_run

        return dry_run(config)
    trainer = Trainer(config, workdir)
    try:
        return trainer.evaluate_only() if config.mode == "eval" else trainer.train()
    finally:
        trainer.close()


class Trainer:
    """Holds a run's pieces; :meth:`train` is the loop."""

    def __init__(self, config, workdir: str):
        self.config, self.workdir = config, workdir
        c = config
        self.mesh = sharding_lib.mesh_from_config(c.mesh)
        self.rules = sharding_lib.logical_axis_rules(c)
        self.task = builders.build_task(c.task)
        self.splits = builders.load_splits(self.task, c.task, c.seed)
        self.tokenizer = builders.build_tokenizer(c, self.task, self.splits, workdir)
        self.model_config = builders.build_model_config(c, self.tokenizer)
        from mojax.rollout.tools import ToolPool

        self.pool = ToolPool(
            max_workers=int(c.rollout.tool_workers), timeout_s=c.rollout.tool_timeout_s
        )
        self.runner = EpisodeRunner(
            c,
            self.task,
            self.tokenizer,
            self.model_config,
            tool=builders.build_tool(c.task.name, c.rollout, self.splits),
            pool=self.pool,
            judge=builders.build_judge(c, self.task),
            mesh=self.mesh,
        )
        longest = max(
            len(self.runner.prompt_ids(ex))
            for ex in self.splits.train + self.splits.validation + self.splits.test
        )
        self.total_len = bucket_length(longest) + int(c.rollout.max_response_len)
        self.opt = rl.OptimizerConfig.from_config(c.optimizer)
        self.tx = rl.make_optimizer(self.opt)
        self.ppo = rl.PPOConfig.from_config(c.ppo)
        self.train_step = rl.make_train_step(
            self.model_config,
            self.tx,
            self.ppo,
            self.mesh,
            self.rules,
            lr_schedule=rl.make_schedule(self.opt),
        )
        self.data = PromptIterator(self.splits.train, int(c.rollout.prompts_per_step), seed=c.seed)
        self.tracker, self.val_tracker = NOptimalTracker(), NOptimalTracker()
        self.stats = RewardStats()
        self.controller = None
        if c.paretopo.enabled:
            self.controller = ParetoPOController(
                stage1_steps=int(c.paretopo.stage1_steps),
                weights=tuple(c.paretopo.weights),
                mode=c.paretopo.mode,
                gamma=float(c.paretopo.gamma),
                reference=c.paretopo.reference,
                stage1_estimator=c.paretopo.stage1_estimator,
                stage2_kwargs=dict(c.advantage),
            )
        self.estimator = adv_lib.ESTIMATORS[c.estimator]
        self.estimator_takes_key = "key" in inspect.signature(self.estimator).parameters
        self.ckpt = ckpt_lib.Checkpointer(
            os.path.join(workdir, "checkpoints"), max_to_keep=int(c.keep_checkpoints)
        )
        self.ref_params = None
        self.logprob_fn = None
        self.writer = None

    def close(self) -> None:
        self.ckpt.close()
        if hasattr(self.pool, "close"):
            self.pool.close()
        if self.writer is not None:
            self.writer.close()

    # ------------------------------------------------------------------ host state
    def host_state(self, rl_step: int) -> dict[str, Any]:
        return {
            "rl_step": int(rl_step),
            "data": self.data.state_dict(),
            "tracker": self.tracker.to_state(),
            "val_tracker": self.val_tracker.to_state(),
            "paretopo": None if self.controller is None else self.controller.state_dict(),
            "reward_stats": self.stats.state_dict(),
        }

    def load_host_state(self, host: dict[str, Any]) -> None:
        self.data.load_state_dict(host["data"])
        self.tracker = NOptimalTracker.from_state(host["tracker"])
        self.val_tracker = NOptimalTracker.from_state(host["val_tracker"])
        if self.controller is not None and host.get("paretopo") is not None:
            self.controller.load_state_dict(host["paretopo"])
        self.stats = RewardStats.from_state_dict(host["reward_stats"])

    # ------------------------------------------------------------------ phases
    def initial_params(self):
        """Random init (variant), the HF checkpoint, or the SFT warm start (cached on disk)."""
        c = self.config
        if c.model.checkpoint:
            from mojax.models import load_params

            params = load_params(c.model.checkpoint, self.model_config)
        else:
            params = None
        if int(c.sft.steps) <= 0:
            if params is None:
                return rl.create_train_state(
                    self.model_config, self.tx, seed=c.seed, mesh=self.mesh, rules=self.rules
                ).params
            return params
        return self.sft(params)

    def sft(self, params):
        """SFT warm start on the task's demonstrations; the result is checkpointed once."""
        c = self.config
        steps = int(c.sft.steps)
        sft_opt = rl.OptimizerConfig(
            learning_rate=float(c.sft.learning_rate),
            schedule="cosine",
            warmup_steps=int(c.sft.warmup_steps),
            total_steps=max(steps, int(c.sft.warmup_steps) + 1),
            weight_decay=0.0,
        )
        tx = rl.make_optimizer(sft_opt)
        ckpt = ckpt_lib.Checkpointer(os.path.join(self.workdir, "checkpoints_sft"), max_to_keep=1)
        try:
            if ckpt.latest_step() == steps:
                target = rl.abstract_train_state(self.model_config, tx, self.mesh, self.rules)
                state, _, _ = ckpt.restore(target)
                logging.info("SFT warm start restored from %s", ckpt.directory)
                return state.params
            state = rl.create_train_state(
                self.model_config, tx, seed=c.seed, mesh=self.mesh, rules=self.rules, params=params
            )
            tokens, mask = sft_data.sft_arrays(c, self.task, self.tokenizer, self.splits.train)
            step_fn = rl.make_sft_step(self.model_config, tx, self.mesh, self.rules)
            t0 = time.time()
            with log_lib.MetricsWriter(
                self.workdir, tensorboard=False, filename="sft_metrics.jsonl"
            ) as writer:
                for i in range(steps):
                    batch = sft_data.sft_batches(tokens, mask, int(c.sft.batch_size), i, c.seed)
                    state, m = step_fn(state, batch)
                    if (i + 1) % 100 == 0 or i + 1 == steps:
                        m = jax.device_get(m)
                        writer.write(i + 1, {f"sft/{k}": v for k, v in m.items()})
                        print(
                            f"SFT {i + 1}/{steps} loss {float(m['loss']):.4f} "
                            f"({time.time() - t0:.0f}s)",
                            flush=True,
                        )
            ckpt.save(steps, state, {"phase": "sft"}, force=True)
            ckpt.wait()
            return state.params
        finally:
            ckpt.close()

    # ------------------------------------------------------------------ evaluation
    def episodes(self, params, examples, *, key, num_samples, temperature, tracker):
        return self.runner.run(
            params,
            examples,
            key=key,
            num_samples=num_samples,
            temperature=temperature,
            tracker=tracker,
            stats=self.stats,
        )

    def evaluate(self, params, step: int, split: str = "test") -> dict[str, float]:
        """``eval/...`` metrics on a held-out split (N = ``eval.num_samples`` per problem)."""
        c = self.config
        examples = getattr(self.splits, split)
        key = jax.random.fold_in(jax.random.PRNGKey(c.seed + 1), step)
        eps, _ = self.episodes(
            params,
            examples,
            key=key,
            num_samples=int(c.eval.num_samples),
            temperature=float(c.eval.temperature),
            tracker=NOptimalTracker(),
        )
        rewards, valid, calls = eps.rewards, eps.valid, eps.n_calls
        if eps.set_rewards is not None:  # k counts answers: [P, N, S, M] -> [P, N*S, M]
            p, _, s, m = eps.set_rewards.shape
            rewards = eps.set_rewards.reshape(p, -1, m)
            valid = eps.set_valid.reshape(p, -1)
            calls = np.repeat(calls, s, axis=1)
        return summarize(self.task, rewards, valid, calls, ks=tuple(c.eval.ks))

    def validation_vector(self, params, step: int) -> tuple[np.ndarray, dict]:
        """ParetoPO's v_t: mean reward vector of greedy rollouts on the validation split (the
        validation N_optimal table is tracked across validations like the training one)."""
        key = jax.random.fold_in(jax.random.PRNGKey(self.config.seed + 2), step)
        eps, self.val_tracker = self.episodes(
            params,
            self.splits.validation,
            key=key,
            num_samples=1,
            temperature=0.0,
            tracker=self.val_tracker,
        )
        r = np.where(eps.valid[..., None], eps.rewards, 0.0).reshape(-1, eps.rewards.shape[-1])
        v = r.mean(0)
        metrics = {f"val/{n}": float(v[k]) for k, n in enumerate(self.task.objective_names)}
        return v, metrics

    def evaluate_only(self) -> dict[str, float]:
        """``mode=eval``: evaluate ``eval.checkpoint`` (HF dir) or the latest checkpoint."""
        c = self.config
        if c.eval.checkpoint:
            from mojax.models import load_params

            params = load_params(c.eval.checkpoint, self.model_config)
        else:
            target = rl.abstract_train_state(self.model_config, self.tx, self.mesh, self.rules)
            state, _, step = self.ckpt.restore(target, fallback=True)
            params = state.params
        summary = self.evaluate(params, 0, split=c.eval.split)
        table = write_report(
            os.path.join(self.workdir, "eval", f"{c.eval.split}.json"),
            summary,
            header=f"task={c.task.name} split={c.eval.split}",
        )
        print(table)
        return summary

    # ------------------------------------------------------------------ the loop
    def restore_or_start(self):
        target = rl.abstract_train_state(self.model_config, self.tx, self.mesh, self.rules)
        if self.ckpt.latest_step() is not None:
            state, host, step = self.ckpt.restore(target, fallback=True)
            self.load_host_state(host)
            logging.info("resumed from %s at RL step %d", self.ckpt.directory, step)
            return state, int(step), True
        params = self.initial_params()
        state = rl.create_train_state(
            self.model_config,
            self.tx,
            seed=self.config.seed,
            mesh=self.mesh,
            rules=self.rules,
            params=params,
        )
        return state, 0, False

    def train(self) -> dict[str, float]:
        c = self.config
        state, start, resumed = self.restore_or_start()
        self.writer = log_lib.MetricsWriter(self.workdir, resume_step=start if resumed else None)
        if c.ppo.kl_coef:
            self.ref_params = jax.tree.map(lambda x: x.copy(), state.params)
            self.logprob_fn = rl.make_logprob_fn(self.model_config, self.mesh, self.rules)
        last: dict[str, float] = {}
        if not resumed:
            last = self.evaluate(state.params, 0)
            if self.controller is not None:
                v0, vm = self.validation_vector(state.params, 0)
                last.update(vm)
                last.update(self.controller.start(v0))
            self.writer.write(0, last)
            print(log_lib.format_progress(0, c.steps, last, PROGRESS_KEYS), flush=True)
        for t in range(start, int(c.steps)):
            state, last = self.rl_step(state, t)
            done = t + 1
            self.writer.write(done, last)
            print(log_lib.format_progress(done, c.steps, last, PROGRESS_KEYS), flush=True)
            if done % int(c.checkpoint_every) == 0 or done == int(c.steps):
                self.ckpt.save(done, state, self.host_state(done), force=True)
        self.ckpt.wait()
        log_lib.plot_run(self.workdir, self.task.objective_names)
        with open(os.path.join(self.workdir, "done"), "w") as f:
            f.write(f"{int(c.steps)}\n")
        return last

    def advantages(self, t: int, eps: Episodes, key) -> tuple[Any, dict]:
        c = self.config
        if self.controller is not None:
            return self.controller.advantages(t, eps.rewards, eps.valid)
        kwargs = dict(c.advantage)
        if self.estimator_takes_key:
            kwargs["key"] = key
        if c.estimator in ("vpo", "multi_rlvr"):
            return self.estimator(eps.set_rewards, eps.set_valid, **kwargs), {}
        return self.estimator(eps.rewards, eps.valid, **kwargs), {}

    def rl_step(self, state, t: int):
        c = self.config
        t0 = time.time()
        key = jax.random.fold_in(jax.random.PRNGKey(c.seed), t)
        roll_key, adv_key = jax.random.split(key)
        eps = self.collect(state.params, t, roll_key)
        t_roll = time.time() - t0
        out, stage_metrics = self.advantages(t, eps, adv_key)
        advantages = np.asarray(out.advantages, np.float32)
        r = eps.rollout
        batch = assemble_batch(
            eps.prompt_ids,
            eps.num_samples,
            np.asarray(r.tokens),
            np.asarray(r.logprobs),
            np.asarray(r.loss_mask),
            np.asarray(r.lengths),
            self.total_len,
        )
        batch["loss_mask"] *= eps.valid.reshape(-1, 1)  # invalid / padding groups: no gradient
        batch["advantages"] = advantages.reshape(-1)
        if out.clip_eps is not None:
            batch["clip_eps"] = np.asarray(out.clip_eps, np.float32)
        if self.logprob_fn is not None:
            batch["ref_logprobs"] = self.logprob_fn(
                self.ref_params, batch["tokens"], batch["attention_mask"]
            )
        t1 = time.time()
        state, train_metrics = self.train_step(state, batch)
        train_metrics = {k: float(v) for k, v in jax.device_get(train_metrics).items()}
        t_train = time.time() - t1
        metrics = dict(eps.metrics)
        metrics.update(rollout_metrics(eps))
        metrics.update(stage_metrics)
        metrics.update({f"advantage/{k}": float(np.asarray(v)) for k, v in out.metrics.items()})
        metrics["advantage/abs_mean"] = float(np.abs(advantages).mean())
        if out.clip_eps is not None:
            metrics["awpo/clip_eps"] = float(out.clip_eps)
        metrics.update(train_metrics)
        metrics.update(self.stats.as_metrics("reward_invalid"))
        done = t + 1
        if self.controller is not None and self.controller.stage(t) == 1:
            if done % int(c.paretopo.validate_every) == 0:
                v, vm = self.validation_vector(state.params, done)
                metrics.update(vm)
                metrics.update(self.controller.on_validation(v))
        if done % int(c.eval_every) == 0 or done == int(c.steps):
            metrics.update(self.evaluate(state.params, done))
        if c.transcripts_per_step:
            rows = [
                {
                    "prompt": eps.examples[i // eps.num_samples].id,
                    "response": eps.texts[i],
                    "rewards": eps.rewards.reshape(-1, eps.rewards.shape[-1])[i].tolist(),
                    "advantage": float(advantages.reshape(-1)[i]),
                }
                for i in range(min(int(c.transcripts_per_step), len(eps.texts)))
            ]
            log_lib.write_transcripts(self.workdir, done, rows)
        metrics.update(
            {"time/rollout_s": t_roll, "time/train_s": t_train, "time/step_s": time.time() - t0}
        )
        return state, metrics

    def collect(self, params, t: int, key) -> Episodes:
        """One step's rollouts; with DAPO dynamic sampling, groups without signal (no objective
        varies) are dropped and refilled from further prompts, up to ``max_refill_rounds``."""
        c = self.config
        p, g = int(c.rollout.prompts_per_step), int(c.rollout.num_samples)
        eps, self.tracker = self.episodes(
            params,
            self.data.next(),
            key=key,
            num_samples=g,
            temperature=float(c.rollout.temperature),
            tracker=self.tracker,
        )
        self.apply_overlong(eps)
        if not c.dapo.dynamic_sampling:
            return eps
        keep = groups_with_signal(eps.rewards, eps.valid)
        rounds = 0
        while keep.sum() < p and rounds < int(c.dapo.max_refill_rounds):
            rounds += 1
            more, self.tracker = self.episodes(
                params,
                self.data.next(),
                key=jax.random.fold_in(key, rounds),
                num_samples=g,
                temperature=float(c.rollout.temperature),
                tracker=self.tracker,
            )
            self.apply_overlong(more)
            eps = _concat(eps, more)
            keep = groups_with_signal(eps.rewards, eps.valid)
        order = np.concatenate([np.flatnonzero(keep), np.flatnonzero(~keep)])[:p]
        out = _select(eps, order)
        out.valid = out.valid & keep[order][:, None]
        out.metrics["dapo/kept_groups"] = float(keep.sum())
        out.metrics["dapo/refill_rounds"] = float(rounds)
        return out

    def apply_overlong(self, eps: Episodes) -> None:
        c = self.config
        if int(c.dapo.overlong_buffer) <= 0:
            return
        pen = overlong_penalty(
            np.asarray(eps.rollout.lengths),
            int(c.rollout.max_response_len),
            int(c.dapo.overlong_buffer),
            float(c.dapo.overlong_penalty),
        ).reshape(eps.valid.shape)
        for k, obj in enumerate(self.task.objectives):
            if obj.success:
                eps.rewards[..., k] = np.where(eps.valid, eps.rewards[..., k] + pen, 0.0)


def _map_rows(rollout, n_rows: int, fn) -> Any:
    """``rollout`` with ``fn`` applied to every per-row field (arrays or lists of ``n_rows``)."""
    fields = {}
    for f in dataclasses.fields(rollout):
        v = getattr(rollout, f.name)
        per_row = isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v) >= 1
        if (per_row and np.shape(v)[0] == n_rows) or (isinstance(v, list) and len(v) == n_rows):
            fields[f.name] = fn(f.name, v)
    return dataclasses.replace(rollout, **fields)


def _select(eps: Episodes, groups: np.ndarray) -> Episodes:
    """The episodes of the given groups (prompt indices), rows and arrays sliced consistently."""
    g = eps.num_samples
    rows = (groups[:, None] * g + np.arange(g)[None, :]).reshape(-1)
    pick = lambda _, v: [v[i] for i in rows] if isinstance(v, list) else np.asarray(v)[rows]
    opt = lambda x: None if x is None else x[groups]
    return Episodes(
        [eps.examples[i] for i in groups],
        [eps.prompt_ids[i] for i in groups],
        g,
        _map_rows(eps.rollout, len(eps.texts), pick),
        eps.rewards[groups],
        eps.valid[groups],
        dict(eps.metrics),
        opt(eps.set_rewards),
        opt(eps.set_valid),
    )


def _concat(a: Episodes, b: Episodes) -> Episodes:
    """Two episode batches as one (for dynamic-sampling refills)."""

    def join(name, x):
        y = getattr(b.rollout, name)
        return list(x) + list(y) if isinstance(x, list) else np.concatenate([x, y])

    cat = lambda u, v: None if u is None else np.concatenate([u, v])
    return Episodes(
        a.examples + b.examples,
        a.prompt_ids + b.prompt_ids,
        a.num_samples,
        _map_rows(a.rollout, len(a.texts), join),
        np.concatenate([a.rewards, b.rewards]),
        np.concatenate([a.valid, b.valid]),
        a.metrics,
        cat(a.set_rewards, b.set_rewards),
        cat(a.set_valid, b.set_valid),
    )
