"""Building a run's pieces from its config: task and splits, tokenizer, model config, tool, judge.

Everything here is host-side and deterministic in the config (the self-built tokenizer included),
so a resumed run rebuilds exactly the same pieces.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from mojax import models
from mojax.tasks.base import Example, Task

_TASK_CLASSES = {  # config.task.name -> class in mojax.tasks
    "calculator": "CalculatorTask",
    "toolrl": "ToolRLTask",
    "math": "MathTask",
    "qa": "QATask",
    "musique": "MuSiQueTask",
    "maze": "MazeTask",
}
TASKS = tuple(_TASK_CLASSES)
_TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")


def task_class(name: str) -> type[Task]:
    """The ``Task`` subclass of ``config.task.name``: a built-in name (``TASKS``) or an import
    path ``"package.module:ClassName"`` (a custom task, see docs/custom_task.md).

    Raises ``ValueError`` naming ``config.task.name`` when the name is unknown, the module does not
    import, the attribute is missing or it is not a ``Task`` subclass.
    """
    from mojax import tasks

    if name in _TASK_CLASSES:
        return getattr(tasks, _TASK_CLASSES[name])
    if ":" not in name:
        raise ValueError(
            f"config.task.name={name!r} is not one of {list(TASKS)} nor an import path "
            "'package.module:ClassName'"
        )
    from mojax.tasks.extra_rewards import resolve

    cls = resolve(name, "config.task.name")
    attr = name.partition(":")[2]
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(
            f"config.task.name={name!r}: {attr!r} is not a subclass of mojax.tasks.base.Task"
        )
    return cls


def is_custom_task(name: str) -> bool:
    """Whether ``config.task.name`` is an import path rather than a built-in task."""
    return name not in _TASK_CLASSES


def build_task(task_cfg) -> Task:
    """The task object of ``config.task`` (constructor arguments from ``task.kwargs``), with the
    objectives of ``task.extra_rewards`` appended (``mojax.tasks.extra_rewards``)."""
    from mojax.tasks import extra_rewards

    kwargs = dict(task_cfg.kwargs)
    cls = task_class(task_cfg.name)
    added = extra_rewards.from_config(task_cfg.get("extra_rewards"))
    try:
        task = extra_rewards.with_extra_rewards(cls, added)(**kwargs)
    except TypeError as e:
        raise ValueError(f"config.task.kwargs {kwargs} do not fit {cls.__name__}: {e}") from e
    extra_rewards.check_names(task)
    return task


@dataclasses.dataclass
class Splits:
    """A run's examples; ``task``: the task object they were loaded for (``load_splits`` sets it,
    so ``build_tool`` can ask that object for its tool)."""

    train: list[Example]
    validation: list[Example]
    test: list[Example]
    task: Task | None = None


def load_splits(task: Task, task_cfg, seed: int) -> Splits:
    """Train / validation / test examples (``Splits.task`` is ``task``).

    Generated tasks draw their splits from their own disjoint streams; file-backed tasks read
    ``task.train_path`` (and ``task.eval_path`` for validation and test; without it the last
    ``num_eval`` training examples are held out).
    """
    return dataclasses.replace(_load_splits(task, task_cfg, seed), task=task)


def _load_splits(task: Task, task_cfg, seed: int) -> Splits:
    n_eval = int(task_cfg.num_eval)
    if task_cfg.name == "calculator":
        mix = dict(task_cfg.mix)
        return Splits(
            task.load("train", int(task_cfg.num_train), seed=seed, mix=mix),
            task.load("validation", n_eval, seed=seed, mix=mix),
            task.load("test", n_eval, seed=seed, mix=mix),
        )
    if task_cfg.name == "maze":
        train = task.load("train", int(task_cfg.num_train))
        test = task.load("test", n_eval)
        return Splits(train, test, test)
    if is_custom_task(task_cfg.name) and not task_cfg.train_path:
        return _custom_splits(task, task_cfg, seed)
    if not task_cfg.train_path:
        raise ValueError(
            f"config.task.train_path: task {task_cfg.name!r} reads its data from a file"
        )
    train = _load_file(task, task_cfg.train_path, "task.train_path")
    if task_cfg.eval_path:
        held = _load_file(task, task_cfg.eval_path, "task.eval_path")[:n_eval]
    else:
        if len(train) < 2:
            raise ValueError("config.task.train_path: need >= 2 examples to hold some out")
        n_eval = min(n_eval, len(train) // 2)
        train, held = train[:-n_eval], train[-n_eval:]
    return Splits(train, held, held)


def _custom_splits(task: Task, task_cfg, seed: int) -> Splits:
    """A file-less custom task's splits from its own ``load(split, num, seed=...)``."""
    n_eval = int(task_cfg.num_eval)
    out = {}
    for split, num in (
        ("train", int(task_cfg.num_train)),
        ("validation", n_eval),
        ("test", n_eval),
    ):
        try:
            examples = list(task.load(split, num, seed=seed))
        except Exception as e:  # noqa: BLE001 - report which protocol call failed
            raise ValueError(
                f"config.task.name={task_cfg.name!r}: load({split!r}, {num}, seed={seed}) failed "
                f"({type(e).__name__}: {e}); a custom task without task.train_path implements "
                "load(split, num, seed=...) -> list[Example] (docs/custom_task.md)"
            ) from e
        if not examples or not all(isinstance(x, Example) for x in examples):
            raise ValueError(
                f"config.task.name={task_cfg.name!r}: load({split!r}, ...) must return a non-empty "
                "list of mojax.tasks.base.Example"
            )
        out[split] = examples
    return Splits(out["train"], out["validation"], out["test"])


def _load_file(task: Task, path: str, key: str) -> list[Example]:
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"config.{key}: no file at {path!r}")
    return list(task.load(path))


def build_tokenizer(config, task: Task, splits: Splits, workdir: str):
    """``tokenizer.path``: ``"build"`` trains the task's own sentencepiece vocabulary into
    ``<workdir>/tokenizer.model`` (deterministic; written by process 0, read by every process); ``""`` uses the model checkpoint's tokenizer;
    anything else is loaded with ``mojax.models.load_tokenizer`` (a missing path in the shared
    folder names ``$MOJAX_SHARED_DIR``)."""
    path = config.tokenizer.path
    if path == "build":
        from mojax import distributed
        from mojax.tasks.vocab import build_sentencepiece

        out = os.path.join(workdir, "tokenizer.model")
        if distributed.is_leader():  # process 0 writes it; the others read the same file
            texts = corpus_texts(config, task, splits)
            vocab = config.tokenizer.vocab_size
            symbols = _TAGS + _think_tags(config) + _custom_tool_stop(config, task)
            build_sentencepiece(texts, out, vocab_size=vocab, user_symbols=symbols)
        distributed.barrier("mojax_tokenizer_built")
        return models.load_tokenizer(out)
    if path == "":
        if not config.model.checkpoint:
            raise ValueError(
                "config.tokenizer.path='' needs config.model.checkpoint (its tokenizer)"
            )
        return models.load_tokenizer(config.model.checkpoint)
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        from mojax.tasks.data import missing_file_message

        raise FileNotFoundError(missing_file_message(path, "config.tokenizer.path: tokenizer"))
    return models.load_tokenizer(path)


def _think_tags(config) -> tuple[str, ...]:
    """``<think>`` / ``</think>`` as symbols when the calculator's demos show a plan
    (``sft.think_rate > 0``); the default vocabulary is unchanged."""
    if config.task.name != "calculator" or not float(config.sft.think_rate) > 0:
        return ()
    from mojax.tasks.calculator import THINK_TAGS

    return THINK_TAGS


def _custom_tool_stop(config, task: Task) -> tuple[str, ...]:
    """A custom task's ``tool_stop`` as one symbol of the self-built vocabulary (an exact,
    single-token stop, like the built-in tags); built-in tasks keep their vocabularies."""
    stop = getattr(task, "tool_stop", None)
    if not stop or not is_custom_task(config.task.name) or stop in _TAGS:
        return ()
    return (stop,)


def corpus_texts(config, task: Task, splits: Splits) -> list[str]:
    """Texts the self-built vocabulary is trained on: every prompt (ChatML layout) and, for the
    calculator, the SFT transcripts (so answers, tags and observations are covered); for the maze,
    every prompt in both layouts (``maze_sft.corpus_prompts``)."""
    render = _ChatML()
    s = int(config.task.num_answers) or None
    examples = splits.train + splits.validation + splits.test
    if config.task.name == "maze":  # both prompt layouts: one vocabulary for every maze method
        from mojax.tasks.maze_sft import corpus_prompts

        return corpus_prompts(task, examples, render, int(config.task.num_answers))
    texts = []
    for ex in examples:
        texts.append(task.build_prompt(ex, render, num_answers=s))
    if config.task.name == "calculator":
        from mojax.tasks.calculator import sft_demonstrations

        think = float(config.sft.think_rate)
        demos = sft_demonstrations(splits.train, seed=config.seed, think_rate=think)
        texts += [d.response for d in demos]
        # every digit and sign in every position the model may need
        texts += ["0123456789 -+*=.,"]
    return texts


class _ChatML:
    """Renders prompts as text in the ChatML layout of ``SentencePieceTokenizer`` (no vocabulary yet)."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        del tokenize
        return models.tokenizer.chatml(messages, add_generation_prompt)


def build_model_config(config, tokenizer) -> models.QwenConfig:
    """The policy's ``QwenConfig``: a checkpoint's config.json (``eval.checkpoint`` in ``mode=eval``,
    else ``model.checkpoint``), or a variant with overrides (the vocabulary resized to a self-built
    tokenizer)."""
    execution = dict(
        dtype=config.model.dtype, param_dtype=config.model.param_dtype, remat=config.model.remat
    )
    if config.get("mode") == "eval" and config.eval.checkpoint:
        return _eval_checkpoint_config(config, tokenizer).replace(**execution)
    if config.model.checkpoint:
        cfg = models.QwenConfig.from_hf(config.model.checkpoint)
        return cfg.replace(**execution)
    overrides = dict(config.model.overrides)
    if config.tokenizer.path == "build" and tokenizer is None:  # dry runs: the largest vocabulary
        from mojax.tasks.vocab import REQUIRED_CHARS  # the build can add (configured + characters)

        overrides.setdefault("vocab_size", int(config.tokenizer.vocab_size) + len(REQUIRED_CHARS))
    if config.tokenizer.path == "build" and tokenizer is not None:
        overrides.setdefault("vocab_size", int(tokenizer.vocab_size))
        overrides.setdefault("eos_token_id", int(tokenizer.eos_token_id))
        overrides.setdefault("bos_token_id", None)
        overrides.setdefault("pad_token_id", int(tokenizer.pad_token_id))
    try:
        cfg = models.get_variant(config.model.variant, **overrides)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"config.model.variant / config.model.overrides: {e}") from e
    if tokenizer is not None and tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"config.model: vocab_size {cfg.vocab_size} < tokenizer vocabulary "
            f"{tokenizer.vocab_size}"
        )
    return cfg.replace(**execution)


def _eval_checkpoint_config(config, tokenizer) -> models.QwenConfig:
    """The architecture of the HF checkpoint ``eval.checkpoint`` (its ``config.json``), checked
    against the run's tokenizer."""
    path = os.path.expanduser(config.eval.checkpoint)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            f"config.eval.checkpoint={config.eval.checkpoint!r}: no config.json in {path} (it must "
            "be an HF checkpoint directory, e.g. written by python -m mojax.export)"
        )
    try:
        cfg = models.QwenConfig.from_hf(path)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"config.eval.checkpoint: {path}/config.json: {e}") from e
    if tokenizer is not None:
        ids = {
            "largest token id": tokenizer.vocab_size - 1,
            "eos_token_id": getattr(tokenizer, "eos_token_id", None),
            "pad_token_id": getattr(tokenizer, "pad_token_id", None),
        }
        bad = {k: int(v) for k, v in ids.items() if v is not None and int(v) >= cfg.vocab_size}
        if bad:
            raise ValueError(
                f"config.eval.checkpoint={config.eval.checkpoint!r}: the run's tokenizer "
                f"(config.tokenizer.path={config.tokenizer.path!r}, {tokenizer.vocab_size} tokens) "
                f"does not fit the checkpoint's vocab_size {cfg.vocab_size} (config.json): {bad} "
                f"out of range. Evaluate with the tokenizer the checkpoint was trained with: "
                f"--config.tokenizer.path={path} when that directory holds its tokenizer files, "
                "or the training run's config."
            )
    return cfg


def build_tool(task: Task | str, rollout_cfg, splits: Splits | None = None) -> Any:
    """The tool a task's rollouts call (None for tasks without tool execution).

    Args:
      task: the task object, or ``config.task.name`` (then the task object is ``splits.task``
        when the splits came from ``load_splits``).
      rollout_cfg: ``config.rollout``.
      splits: the run's examples.

    A task whose ``make_tool(rollout_cfg, splits)`` returns a tool gets that tool (a custom task's
    own tool, docs/custom_task.md). Otherwise the built-ins: calculator: the safe AST calculator;
    math: the sandboxed Python interpreter (isolation ``rollout.sandbox``: "bwrap", or
    "unsafe_fallback" by name only); qa: a Search-R1 retrieval server (``rollout.retrieval_url``)
    or, without one, BM25 over the titled paragraphs carried by the loaded examples (HotpotQA's
    ``context``).
    """
    obj = task if isinstance(task, Task) else getattr(splits, "task", None)
    if obj is not None:
        tool = obj.make_tool(rollout_cfg, splits)
        if tool is not None:
            return tool
    name = task if isinstance(task, str) else _builtin_name(task)
    return _builtin_tool(name, rollout_cfg, splits)


def _builtin_name(task: Task) -> str | None:
    """The built-in ``config.task.name`` of a task object (None for a custom task)."""
    from mojax import tasks

    for name, cls_name in _TASK_CLASSES.items():
        if isinstance(task, getattr(tasks, cls_name)):
            return name
    return None


def _builtin_tool(task_name: str | None, rollout_cfg, splits: Splits | None) -> Any:
    from mojax.rollout import tools

    if task_name == "calculator":
        return tools.Calculator()
    if task_name == "math":
        return tools.PythonSandbox(
            timeout_s=float(rollout_cfg.tool_timeout_s),
            mode=rollout_cfg.get("sandbox", "bwrap"),
        )
    if task_name == "qa":
        return _qa_tool(rollout_cfg, splits)
    return None


def _qa_tool(rollout_cfg, splits: Splits | None) -> Any:
    from mojax.rollout import tools

    if rollout_cfg.retrieval_url:
        return tools.RetrievalClient(
            rollout_cfg.retrieval_url, timeout_s=rollout_cfg.tool_timeout_s
        )
    corpus = {}
    for ex in (splits.train + splits.validation) if splits is not None else []:
        for para in (ex.meta or {}).get("context") or ():
            if isinstance(para, (list, tuple)) and len(para) == 2:
                title, sents = para
                text = " ".join(sents) if isinstance(sents, (list, tuple)) else str(sents)
                corpus[(str(title), text)] = None
    if not corpus:
        raise ValueError(
            "config.rollout.retrieval_url: the qa task needs a retrieval server or examples "
            "that carry a 'context' corpus"
        )
    return tools.BM25Retriever([f"{t}\n{x}" for t, x in corpus])


def build_judge(config, task: Task):
    """AWPO's judge when the task has an external ``r_reason`` objective, else None."""
    if "r_reason" not in task.external_objectives:
        return None
    from mojax.tasks.judge import make_judge

    j = config.judge
    return make_judge(j.kind, url=j.url, model=j.model, timeout_s=j.timeout_s)
