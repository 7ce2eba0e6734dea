"""Building a run's pieces from its spec: task and splits, tokenizer, model config, tool, reward
sources.

Everything here is host-side and deterministic in the spec (the self-built tokenizer included), so a
resumed run rebuilds exactly the same pieces. The task supplies its own plumbing (splits, tool,
demonstrations, vocabulary corpus; ``mojax.tasks.framework.base.Task``), built-in or custom alike.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from mojax import learner, models
from mojax import sharding as sharding_lib
from mojax.advantages import MethodContext
from mojax.config import ConfigError
from mojax.models import layouts
from mojax.rl.episodes import EpisodeRunner
from mojax.rl.step import Learner, Run
from mojax.sampling import protocol
from mojax.spec import RunSpec
from mojax.spec.model_config import qwen_config
from mojax.tasks.framework.base import Task
from mojax.tasks.framework.splits import Splits

if TYPE_CHECKING:
    from mojax.spec import RunSpec


def load_splits(task: Task, spec: RunSpec) -> Splits:
    """The run's train / validation / test examples (``task.load_splits``)."""
    splits = task.load_splits(spec.task, seed=spec.seed)
    splits.task = task
    return splits


def build_tokenizer(spec: RunSpec, task: Task | None, splits: Splits | None, workdir: str):
    """``tokenizer.path``: ``"build"`` trains the task's own sentencepiece vocabulary into
    ``<workdir>/tokenizer.model`` (deterministic; written by process 0, read by every process);
    ``""`` uses the model checkpoint's tokenizer; anything else is loaded with
    ``mojax.models.load_tokenizer`` (a missing path in the shared folder names
    ``$MOJAX_SHARED_DIR``)."""
    path = spec.tokenizer.path
    if path == "build":
        from mojax import distributed
        from mojax.tasks.framework.vocab import build_sentencepiece

        out = os.path.join(workdir, "tokenizer.model")
        if distributed.is_leader():  # process 0 writes it; the others read the same file
            texts, symbols = corpus_texts(spec, task, splits), task.vocab_symbols(spec.sft)
            build_sentencepiece(
                texts, out, vocab_size=spec.tokenizer.vocab_size, user_symbols=symbols
            )
        distributed.barrier("mojax_tokenizer_built")
        return models.load_tokenizer(out)
    if path == "":
        if not spec.model.checkpoint:
            raise ValueError(
                "config.tokenizer.path='' needs config.model.checkpoint (its tokenizer)"
            )
        what = "config.tokenizer.path='' (the tokenizer of config.model.checkpoint="
        return _load_tokenizer(spec.model.checkpoint, f"{what}{spec.model.checkpoint!r})")
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        from mojax.tasks.framework.data import missing_file_message

        raise FileNotFoundError(missing_file_message(path, "config.tokenizer.path: tokenizer"))
    return _load_tokenizer(path, f"config.tokenizer.path={spec.tokenizer.path!r}")


def _load_tokenizer(path: str, key: str):
    """``models.load_tokenizer(path)``; a directory without tokenizer files or files transformers
    / sentencepiece cannot read is a ``ConfigError`` naming ``key`` and the path."""
    try:
        return models.load_tokenizer(os.path.expanduser(path))
    except Exception as e:  # noqa: BLE001 - tokenizers' Rust parser raises a bare Exception
        raise ConfigError(f"{key}: {path}: {type(e).__name__}: {e}") from e


def corpus_texts(spec: RunSpec, task: Task, splits: Splits) -> list[str]:
    """Texts the self-built vocabulary is trained on (``task.vocab_corpus``, prompts rendered in
    the ChatML layout)."""
    return task.vocab_corpus(
        splits, _ChatML(), sft=spec.sft, seed=spec.seed, num_answers=spec.task.num_answers
    )


class _ChatML:
    """Renders prompts as text in the ChatML layout of ``SentencePieceTokenizer`` (no vocabulary yet)."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        del tokenize
        return models.tokenizer.chatml(messages, add_generation_prompt)


def build_model_config(spec: RunSpec, tokenizer) -> models.QwenConfig:
    """The policy's ``QwenConfig`` (``mojax.spec.model_config.qwen_config``)."""
    return qwen_config(spec, tokenizer)


def build_tool(task: Task, spec: RunSpec, splits: Splits | None) -> Any:
    """The tool a task's rollouts call (``task.make_tool(config.rollout, splits)``; None for tasks
    without tool execution)."""
    return task.make_tool(spec.rollout, splits)


def build_judge(spec: RunSpec, task: Task):
    """AWPO's judge when the task has an external ``r_reason`` objective, else None."""
    if "r_reason" not in task.external_objectives:
        return None
    from mojax.tasks.framework.judge import make_judge

    j = spec.judge
    return make_judge(
        j.kind, url=j.url, model=j.model, timeout_s=j.timeout_s, dtype=spec.model.dtype
    )


def build_sources(spec: RunSpec, task: Task) -> tuple:
    """The reward sources of the task's external objectives (``mojax.rewards.build_sources``),
    checked against the sources the advantage method declares."""
    from mojax.rewards import build_sources as build

    judge = build_judge(spec, task)
    method = spec.method
    return build(
        task,
        reward_spec=spec.tool_reward,
        judge=judge,
        judge_budget=spec.judge.budget() if judge is not None else None,
        method=method.name,
        method_sources=method.reward_sources,
    )


def sft_arrays(spec: RunSpec, task: Task, tokenizer, train_examples):
    """The task's SFT demonstrations as ``tokens int32 [N, T]`` and ``loss_mask float32 [N, T]``
    (T = longest demonstration, right-padded)."""
    rows = task.sft_rows(
        spec.sft,
        tokenizer,
        list(train_examples),
        seed=spec.seed,
        num_answers=spec.task.num_answers,
    )
    if not rows:
        raise ValueError("config.sft: no demonstrations were built")
    width = max(len(ids) for ids, _ in rows)
    tokens = np.full((len(rows), width), int(tokenizer.pad_token_id), np.int32)
    mask = np.zeros((len(rows), width), np.float32)
    for i, (ids, m) in enumerate(rows):
        tokens[i, : len(ids)] = ids
        mask[i, : len(m)] = m
    return tokens, mask


def method_kwargs(spec: RunSpec, task: Task) -> dict[str, Any]:
    """``config.advantage`` completed with the task's facts the method takes (``Method.task_facts``,
    e.g. per-objective theoretical minima); keys the config sets win."""
    kwargs = dict(spec.advantage)
    facts = spec.method.task_facts
    return kwargs if facts is None else {**facts(task), **kwargs}


def build_sampler(spec: RunSpec, model_config, mesh, rules):
    """The rollout's sampler: the engine ``sampler.engine`` names in ``protocol.SAMPLERS``, built
    by its own module from ``config.rollout`` (its settings and mesh checks are its own)."""
    return protocol.build(
        spec.sampler.engine, model_config, spec.rollout, spec.engine_options, mesh, rules
    )


def build_run(spec: RunSpec, workdir: str, pool, *, interrupt=None) -> Run:
    """The fixed pieces of a run (``mojax.rl.step.Run``): task, data, tokenizer, model config, the
    rollout runner, the jitted PPO step and the advantage method's hooks. ``interrupt``: polled by
    every rollout and the SFT warm start (``mojax.infra.preemption.Preemption.check``)."""
    mesh, rules = sharding_lib.mesh_from_config(spec.mesh.as_dict()), spec.rules
    task = spec.build_task()
    splits = load_splits(task, spec)
    tokenizer = build_tokenizer(spec, task, splits, workdir)
    # the execution layouts of sampler and learner, chosen once for this backend
    model_config = layouts.resolve(build_model_config(spec, tokenizer))
    runner = EpisodeRunner(
        spec,
        task,
        tokenizer,
        build_sampler(spec, model_config, mesh, rules),
        tool=build_tool(task, spec, splits),
        pool=pool,
        sources=build_sources(spec, task),
        interrupt=interrupt,
    )
    total_len = protocol.bucket_length(max(len(runner.prompt_ids(ex)) for ex in splits.all))
    method = spec.method
    ctx = MethodContext(
        method,
        method_kwargs(spec, task),
        spec.sections,
        len(splits.train),
        spec.rollout.prompts_per_step,
    )
    return Run(
        spec=spec,
        task=task,
        splits=splits,
        tokenizer=tokenizer,
        runner=runner,
        learner=build_learner(spec, model_config, mesh, rules, total_len),
        hooks=method.make_hooks(ctx),
        interrupt=interrupt,
        workdir=workdir,
    )


def build_learner(spec: RunSpec, model_config, mesh, rules, prompt_len: int) -> Learner:
    """The update's pieces (``mojax.rl.step.Learner``): the optimizer, the jitted sharded PPO step
    and, with ``ppo.old_logprobs="recompute"``, the learner's log-prob recomputation; the training
    batch holds ``prompt_len + rollout.max_response_len`` tokens."""
    tx = learner.make_optimizer(spec.optimizer)
    train_step = learner.make_train_step(
        model_config, tx, spec.ppo, mesh, rules, lr_schedule=learner.make_schedule(spec.optimizer)
    )
    recompute = None
    if spec.ppo.old_logprobs == "recompute":  # π_old by the learner, mismatch, correction
        recompute = learner.make_recompute_fn(
            model_config, mesh, rules, spec.rollout_correction, chunk_size=spec.ppo.logprob_chunk
        )
    total_len = prompt_len + spec.rollout.max_response_len
    return Learner(model_config, tx, mesh, rules, train_step, total_len, recompute=recompute)
