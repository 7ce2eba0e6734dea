"""The base run config, generated from the run spec's schema, the embedded run's recipe, and
big_vision-style ``parse_arg``.

Every method config (``configs/<method>.py``) starts from :func:`base_config`, sets what the method
needs and returns the config locked, so ``--config.ppo.clip_hihg=0.3`` fails naming the key, and
:func:`mojax.spec.validate` checks values and combinations before anything is compiled.

Each key's default, type and help are declared once, by the spec field that reads it
(``mojax.config.option``; the sections of ``mojax.spec.schema``): :func:`schema_config` builds the
config from them at call time, and :data:`RECIPE` holds only the embedded run's values that are no
field's default. ``python -m mojax.main --config=... --config.mode=show`` prints every key with its
help.
"""

from __future__ import annotations

import dataclasses

import ml_collections


def parse_arg(arg: str | None, **defaults):
    """``"model=tiny,steps=8"`` -> a ConfigDict of the given ``defaults`` updated from ``arg``.

    Values are cast to the type of their default (``bool`` accepts true/false/1/0); unknown names
    raise a ValueError listing the allowed ones.
    """
    out = ml_collections.ConfigDict(dict(defaults))
    if not arg:
        return out
    for item in arg.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if name not in defaults:
            raise ValueError(f"config argument {name!r} is unknown; allowed: {sorted(defaults)}")
        default = defaults[name]
        if not sep:
            if not isinstance(default, bool):
                raise ValueError(f"config argument {name!r} needs a value ({name}=...)")
            value = "true"
        out[name] = _cast(name, value.strip(), default)
    return out


def _cast(name, value: str, default):
    if isinstance(default, bool):
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"config argument {name}={value!r}: expected true/false")
        return value.lower() in ("true", "1")
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


def base_config() -> ml_collections.ConfigDict:
    """Defaults shared by every method: the embedded tiny calculator run (before method tweaks).

    Built at call time from the schema (:func:`schema_config`: every spec field's key with its one
    declared default, ``mojax.config.option``) and :data:`RECIPE`, the embedded run's values where a
    spec field declares none or the run differs from it. Every key's meaning is the help of the spec
    field that reads it (``--config.mode=show``)."""
    return schema_config(RECIPE)


# The embedded run's values that are not a spec field's default: the keys whose spec field declares
# none (the method and the calculator's data mixes) and those the tiny run sets otherwise than the
# learner's library defaults (``mojax.learner.PPOConfig`` / ``OptimizerConfig``). Every other key's
# default is its spec field's (tests/unit/spec/test_config_schema.py checks each is declared once).
RECIPE: dict = {
    "estimator": "pareto_rank",
    # the default leans on easy and hard problems, where answering directly vs calling is clear-cut
    "task.mix": {"easy": 0.5, "medium": 0.1, "hard": 0.4},
    # redundant: call twice (an over-calling warm start; weight 0 leaves the demos unchanged)
    "sft.behaviours": {"always": 0.5, "never": 0.2, "when_hard": 0.3, "redundant": 0.0},
    "ppo.clip_high": 0.28,  # DAPO's clip-higher
    "optimizer.learning_rate": 1e-4,  # the tiny model learns at a tiny-model rate
    "optimizer.weight_decay": 0.0,
}


def schema_config(recipe: dict | None = None) -> ml_collections.ConfigDict:
    """Every config key of the run spec's schema (``mojax.spec.schema``, in its order) set to its
    spec field's default, or to ``recipe[key]`` where given (a key whose field declares no default
    must be in ``recipe``). Keys typed ``X | None`` are ``FieldReference``s typed ``X``, so that
    ``--config.KEY=...`` overrides a None."""
    from mojax.config import field_default, field_key, option_fields
    from mojax.spec import schema

    recipe = dict(recipe or {})
    c = ml_collections.ConfigDict()
    for cls in schema():
        for f in option_fields(cls):
            key = field_key(cls, f)
            value = recipe.pop(key, field_default(f))
            if value is dataclasses.MISSING:
                raise ValueError(f"config.{key}: its spec field declares no default; set it")
            section, _, name = key.rpartition(".")
            node = c
            if section:
                if section not in c:
                    c[section] = ml_collections.ConfigDict()
                node = c[section]
            node[name] = _leaf(value, f.type)
    if recipe:
        raise ValueError(f"recipe keys not in the config schema: {sorted(recipe)}")
    return c


def _leaf(value, annotation):
    """A config leaf: a mapping as a ConfigDict, an optional (``X | None``) key as a typed
    ``FieldReference``."""
    if isinstance(value, dict):
        return ml_collections.ConfigDict(value)
    text = annotation if isinstance(annotation, str) else str(annotation)
    parts = [p.strip() for p in text.split("|")]
    if "None" in parts:
        base = {"int": int, "float": float, "str": str, "bool": bool}[parts[0]]
        return ml_collections.FieldReference(value, field_type=base)
    return value


# The embedded default's model: a tiny Qwen3-architecture decoder (GQA, q/k norm, untied head) sized
# for the calculator task on a 2-core CPU; the vocabulary comes from the self-built tokenizer.
TINY_CALC_MODEL = dict(
    hidden_size=128,
    intermediate_size=384,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    max_position_embeddings=512,
    rope_theta=10000.0,
)

COMMON_ARGS = dict(
    # "" = "tiny" (the embedded default), or with checkpoint=DIR the architecture of DIR/config.json;
    # or a variant name (qwen2.5-math-1.5b, qwen3-4b, ...)
    model="",
    checkpoint="",  # HF checkpoint dir of that model (its weights, config.json and tokenizer)
    task="calculator",
    train_path="",
    eval_path="",
    sft_path="",
    steps=0,  # 0 = the config's default
    paper=False,  # the paper's training recipe (each config lists the keys it sets)
    data=-1,  # mesh axes
    fsdp=1,
    tensor=1,
    # calculator: a third objective r_format (a <think> plan first, calculator.think_format) and
    # this fraction of SFT demos that show it; 0 = the task's own (r_task, r_tool)
    think=0.0,
    lora=0,  # LoRA rank on a frozen base (0 = full fine-tuning); config.lora
    lora_quant="none",  # the frozen base's storage with lora=R: none | nf4 (QLoRA) | int8
    pack=False,  # sequence packing of the PPO and SFT rows; config.packing
)

# the calculator's static weights w = (0.6, 0.4) on (r_task, r_tool), and r_format's (think=)
CALC_WEIGHTS = (0.6, 0.4)
THINK_WEIGHT = 0.4


def apply_common_args(c: ml_collections.ConfigDict, a: ml_collections.ConfigDict) -> None:
    """Applies the arguments every method config accepts (``COMMON_ARGS``) to config ``c``.

    Sets the task and its data paths, the mesh, ``steps`` and the model. ``model=tiny`` (the
    default without ``checkpoint=``) is the embedded tiny run, a random init: with ``checkpoint=``
    it is refused (it would load none of the weights). ``checkpoint=DIR`` without ``model=`` runs
    the architecture of ``DIR/config.json``. Any other model sets only how that model executes: its
    variant and checkpoint, the checkpoint's tokenizer, bf16 params / compute / KV cache, full
    remat, log-probs in chunks of 512 positions and no SFT warm start. The training recipe of ``paper=true`` is set by each method
    config itself (``paper_lengths`` for the shared long-context shapes).
    """
    from mojax.tasks import task_class

    task = task_class(a.task)
    c.task.name = a.task
    c.task.train_path, c.task.eval_path = a.train_path, a.eval_path
    c.sft.data_path = a.sft_path
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = a.data, a.fsdp, a.tensor
    if a.steps:
        c.steps = a.steps
    apply_overrides(c, _task_overrides(task), f"task {a.task!r}'s configure()")
    _apply_think(c, a, task)
    _apply_lora_and_packing(c, a)
    model = a.model or ("" if a.checkpoint else "tiny")
    if model == "tiny":
        if a.checkpoint:
            raise ValueError(
                f"config argument checkpoint={a.checkpoint!r} with model=tiny: the embedded tiny "
                "model is a random init and loads no weights; drop model=tiny (the architecture "
                "then comes from the checkpoint's config.json), or keep model=tiny and drop "
                f"checkpoint= (--config.tokenizer.path={a.checkpoint} uses only its tokenizer)"
            )
        c.model.variant = "tiny-qwen3"
        c.model.overrides = ml_collections.ConfigDict(dict(TINY_CALC_MODEL))
        if not task.builds_vocabulary:  # real data: the real Qwen2 tokenizer, no warm start
            c.tokenizer.path = _shared_tokenizer()
            c.model.overrides.vocab_size = 151936
            c.model.overrides.max_position_embeddings = 8192
            c.model.overrides.tie_word_embeddings = True
            c.ppo.logprob_chunk = 64  # never materialise [B, T, 151936] logits at once
            c.sft.steps = 0
        return
    c.model.variant = model  # "": the checkpoint's config.json (mojax.spec.model_config)
    c.model.checkpoint = a.checkpoint
    c.tokenizer.path = "" if a.checkpoint else c.tokenizer.path
    c.model.dtype = c.model.param_dtype = c.model.cache_dtype = "bfloat16"
    c.model.remat = "full"
    c.ppo.logprob_chunk = 512
    c.sft.steps = 0


def _task_overrides(task) -> dict:
    """The task's own recipe defaults (``Task.configure``: task kwargs, evaluation)."""
    import inspect

    if inspect.signature(task.configure).parameters:
        raise ValueError(
            f"task {task.__name__}: configure() takes no argument and returns the recipe defaults "
            "as {dotted config key: value} (mojax.tasks.framework.base.Task.configure; docs/custom_task.md)"
        )
    return task.configure()


def apply_overrides(c: ml_collections.ConfigDict, overrides: dict, source: str) -> None:
    """Sets each ``{dotted key: value}`` of ``overrides`` on config ``c`` (a mapping value becomes a
    ConfigDict); a key the config does not have is a ValueError naming it and ``source``."""
    for key, value in overrides.items():
        section, _, name = key.rpartition(".")
        node = c
        for part in section.split(".") if section else ():
            node = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
        if not isinstance(node, ml_collections.ConfigDict) or name not in node:
            raise ValueError(f"{source}: config.{key} is not a config key")
        node[name] = ml_collections.ConfigDict(value) if isinstance(value, dict) else value


def _apply_lora_and_packing(c: ml_collections.ConfigDict, a: ml_collections.ConfigDict) -> None:
    """``lora=R``: LoRA adapters of rank R (alpha = 2R) on every projection of a frozen base, stored
    as ``lora_quant``; ``pack=true``: sequence packing."""
    if a.lora < 0:
        raise ValueError(f"config argument lora={a.lora}: a rank >= 1 (0 = off)")
    if a.lora:
        c.lora.enabled, c.lora.rank, c.lora.alpha = True, a.lora, 2.0 * a.lora
        c.lora.quant = a.lora_quant
    elif a.lora_quant != "none":
        raise ValueError("config argument lora_quant needs lora=R (the adapters' rank)")
    if a.pack:
        c.packing.enabled = True


def paper_lengths(c: ml_collections.ConfigDict) -> None:
    """The long-context shapes and cadence shared by the paper recipes: multi-turn responses of up to
    3072 tokens (1024 per turn, 4 turns, 3 tool calls), updates in 4 mini-batches of 8 micro-batches,
    500 held-out problems, evaluation and checkpoints every 20 steps; and fp32 parameters under bf16
    compute (verl's actor; VPO App. B): the recipes' AdamW steps at lr 1e-6 are below a bf16
    parameter's resolution, so bf16 parameters would barely move (0.9% of the weights in one step,
    against 100% in fp32)."""
    c.model.param_dtype = "float32"
    c.rollout.max_new_tokens, c.rollout.max_response_len = 1024, 3072
    c.rollout.max_turns, c.rollout.max_tool_calls = 4, 3
    c.ppo.num_minibatches, c.ppo.num_microbatches = 4, 8
    c.task.num_eval = 500
    c.eval_every = c.checkpoint_every = 20


def toolrl_recipe(c: ml_collections.ConfigDict, steps_arg: int) -> None:
    """ToolRL's GRPO recipe (Qian et al., arXiv:2504.13958), as SAW (arXiv:2606.07705, App. D,
    Table 4) lists it, on verl: 512 prompts x 4 samples per step, mini-batches of 128 prompts (4
    updates per step), lr 1e-6, no KL loss, single-turn responses of up to 1024 tokens, 15 epochs of
    the 3,920-prompt rlla_4k train split: 15 x 7 = 105 steps (verl drops an epoch's last partial
    batch). Where the table is silent, verl's defaults: clip 0.2 both sides, AdamW weight decay
    0.01, gradient norm 1.0, constant lr, temperature 1, token-mean loss, and an fp32 actor under
    bf16 compute (``paper_lengths``)."""
    paper_lengths(c)
    c.rollout.max_new_tokens = c.rollout.max_response_len = 1024
    c.rollout.max_turns, c.rollout.max_tool_calls = 1, 0
    c.rollout.prompts_per_step, c.rollout.num_samples = 512, 4
    c.ppo.num_minibatches, c.ppo.kl_coef = 4, 0.0
    c.ppo.clip_low = c.ppo.clip_high = 0.2
    c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
    c.steps = steps_arg or 15 * (3920 // 512)


def _shared_tokenizer() -> str:
    """The real Qwen2 tokenizer of the shared assets: ``$MOJAX_SHARED_DIR/assets/qwen2-tokenizer``.

    Without ``MOJAX_SHARED_DIR`` the shared folder is ``shared/`` beside the checkout
    (``mojax.tasks.framework.data.shared_dir``); set the variable when it lives elsewhere. Nothing is read
    here: a missing tokenizer is reported when the run loads it, naming ``MOJAX_SHARED_DIR`` and its
    value (``mojax.rl.builders.build_tokenizer``).
    """
    import os

    from mojax.tasks.framework import data

    return os.path.join(data.shared_dir(), "assets", "qwen2-tokenizer")


def shared_data(*parts: str) -> str:
    """A path under the shared data folder (``$MOJAX_SHARED_DIR/data`` or ``../shared/data``)."""
    import os

    return os.path.join(os.path.dirname(_shared_tokenizer()), "..", "data", *parts)


def _apply_think(c: ml_collections.ConfigDict, a: ml_collections.ConfigDict, task) -> None:
    """``think=p``: the task's format objective ``r_format`` (``task.think_reward``, static weight
    0.4) and a fraction ``p`` of SFT demonstrations that open with a plan (the SAW claim's
    setting)."""
    if not a.think:
        return
    if not task.think_reward or not 0.0 < a.think <= 1.0:
        raise ValueError(
            f"config argument think={a.think}: a fraction in (0, 1], on a task with <think> "
            f"demonstrations (task=calculator) only (task={a.task!r})"
        )
    c.sft.think_rate = a.think
    block = dict(fn=task.think_reward, min=0.0, max=1.0, weight=THINK_WEIGHT)
    c.task.extra_rewards = ml_collections.ConfigDict({"r_format": block})


def static_weights(c: ml_collections.ConfigDict, base=CALC_WEIGHTS) -> tuple[float, ...]:
    """``base`` (the task's own objectives) then the weight of each objective of
    ``config.task.extra_rewards``, in name order: one entry per objective, as GRPO's and GDPO's
    ``advantage.weights`` need."""
    extra = c.task.extra_rewards
    return tuple(base) + tuple(float(extra[name].get("weight", 0.0)) for name in sorted(extra))


def tiny_schedule(c: ml_collections.ConfigDict, steps_arg: int, steps: int = 40) -> None:
    """Run length of the tiny recipe: ``steps`` RL steps (or the ``steps=`` argument), evaluation
    every 10, and on the calculator a 500-step SFT warm start on mixed demonstrations."""
    from mojax.tasks import task_class

    c.steps = steps_arg or steps
    warm_start = task_class(c.task.name).tiny_sft_steps
    if warm_start:
        c.sft.steps = warm_start
    c.eval_every = 10
