"""The full run-config schema with its defaults, and big_vision-style ``parse_arg``.

Every method config (``configs/<method>.py``) starts from :func:`base_config`, sets what the method
needs and returns the config locked, so ``--config.ppo.clip_hihg=0.3`` fails naming the key, and
:func:`mojax.config.validate` checks values and combinations before anything is compiled.

Sections (all keys are listed, with their meaning, in the comments below):
``model``, ``tokenizer``, ``task``, ``rollout``, ``estimator`` + ``advantage`` (the estimator's keyword
arguments), ``paretopo`` (Stage 1 / Stage 2 schedule), ``tool_reward``, ``dapo``, ``ppo``,
``optimizer``, ``sft``, ``eval``, ``judge``, ``mesh``, and the run-level keys.
"""

from __future__ import annotations

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
    """Defaults shared by every method: the embedded tiny calculator run (before method tweaks)."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.steps = 40  # RL steps (rollout batch -> advantages -> PPO update(s))
    c.mode = (
        "train"  # "train" | "eval" (eval.checkpoint or the latest checkpoint) | "show" (config)
    )
    c.dry_run = False  # build with jax.eval_shape, check shardings, print memory per device; no run
    c.checkpoint_every = 10
    c.keep_checkpoints = 2
    c.eval_every = 10  # validation every N RL steps (ParetoPO Stage 1 overrides with its own)
    c.transcripts_per_step = 4  # sampled transcripts written to transcripts.jsonl per logged step
    # rerunning a workdir (mojax.workdir): "" resumes only if its config.json matches (up to
    # steps / eval / checkpoint cadence), "force" resumes under this config anyway, "new" moves the
    # old workdir to <workdir>.old-<n> and starts from scratch
    c.resume = ""

    c.model = ml_collections.ConfigDict()
    c.model.variant = "tiny-qwen3"  # a mojax.models.VARIANTS name (random init) ...
    c.model.overrides = ml_collections.ConfigDict()  # ... with QwenConfig fields replaced
    c.model.checkpoint = ""  # HF directory (safetensors + config.json); overrides variant
    c.model.dtype = "float32"  # compute dtype
    c.model.param_dtype = "float32"
    c.model.cache_dtype = ""  # KV cache dtype ("" = compute dtype; "bfloat16" halves memory)
    c.model.remat = "none"  # "none" | "full" | "dots"

    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.path = "build"  # "build": train the task's own sentencepiece; "": the checkpoint's
    c.tokenizer.vocab_size = 96  # for "build"

    c.task = ml_collections.ConfigDict()
    c.task.name = "calculator"  # calculator | toolrl | math | qa | musique | maze
    c.task.train_path = ""  # data file for file-backed tasks
    c.task.eval_path = ""
    c.task.num_train = 4000  # generated tasks (calculator, maze): training problems
    c.task.num_eval = 128  # validation problems (ParetoPO's v_t) / evaluation problems
    c.task.num_answers = 0  # S answers per completion (VPO, Multi-RLVR); 0 = single answer
    c.task.kwargs = ml_collections.ConfigDict()  # task constructor arguments (e.g. toolrl mode)
    # objectives added to the task by import path, {name: {fn: "pkg.mod:attr", min, max, weight,
    # kwargs}}, appended in name order (mojax.tasks.extra_rewards, docs/custom_task.md)
    c.task.extra_rewards = ml_collections.ConfigDict()  # {name: {fn, min, max, weight, kwargs}}
    # goal-conditioned GRPO (VPO App. E.5): w ~ Dir(1) per training prompt, written into the prompt,
    # reward w . r (estimator grpo / dr_grpo); evaluation and validation condition on w*
    c.task.goal_conditioned = False
    # calculator difficulty mix (easy: single-digit, medium: two-digit +/-, hard: products); the
    # default leans on easy and hard problems, where answering directly vs calling is clear-cut
    c.task.mix = ml_collections.ConfigDict({"easy": 0.5, "medium": 0.1, "hard": 0.4})

    c.rollout = ml_collections.ConfigDict()
    c.rollout.prompts_per_step = 16  # P
    c.rollout.num_samples = 8  # G
    c.rollout.max_prompt_len = 0  # 0 = measured from the data (dry runs assume 1024)
    c.rollout.max_new_tokens = 24  # per turn
    c.rollout.max_response_len = 48  # R: all turns and observations together
    c.rollout.max_turns = 3  # decode turns (tool calls + 1)
    c.rollout.max_tool_calls = 2
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.top_k = 0
    c.rollout.draw = "gumbel"  # or "inverse_cdf": same distribution, 14x cheaper draw at 32k vocab
    c.rollout.tool_timeout_s = 10.0
    c.rollout.tool_workers = 4
    c.rollout.sandbox = (
        "bwrap"  # math's Python tool: "bwrap" (fails closed) | "unsafe_fallback" (weak)
    )
    c.rollout.retrieval_url = ""  # Search-R1 retrieval server (qa); "" = BM25 over the data

    c.estimator = "pareto_rank"  # a name of mojax.advantages.ESTIMATORS
    c.advantage = ml_collections.ConfigDict()  # the estimator's keyword arguments

    c.paretopo = ml_collections.ConfigDict()
    c.paretopo.enabled = False
    c.paretopo.stage1_steps = 10  # Stage 1 (HV-guided scalarization) steps, then Stage 2
    c.paretopo.stage1_estimator = "grpo"  # estimator of the scalarized reward in Stage 1
    c.paretopo.weights = (0.6, 0.4)  # w of r_w = w . r (ParetoPO Eq. 5)
    c.paretopo.mode = "global"  # "global" (Algorithm 1) | "per_trajectory" (Eq. 6)
    c.paretopo.gamma = 0.5  # EMA of ΔHV
    c.paretopo.reference = "initial"  # HV reference: "initial" (v_0) | "zeros"
    c.paretopo.validate_every = 1  # Stage-1 validation (archive update) every N steps
    c.paretopo.dynamic_weighting = True  # False: ablation "w/o dynamic weighting" (r_pareto = 1)
    c.paretopo.pareto_ranking = (
        True  # False: ablation "w/o Pareto ranking" (Stage 1 estimator only)
    )

    c.tool_reward = ml_collections.ConfigDict()
    c.tool_reward.alpha = 0.7  # r_tool = exp(-alpha |N_call - N_opt|) (ParetoPO Eq. 4)
    c.tool_reward.no_success = "zero"  # "zero" | "group_min" | "assume_zero_calls"

    c.dapo = ml_collections.ConfigDict()
    c.dapo.dynamic_sampling = False  # drop groups with no variance in any objective, refill
    c.dapo.max_refill_rounds = 2
    c.dapo.overlong_buffer = 0  # tokens before the max length where the soft penalty ramps up
    c.dapo.overlong_penalty = 1.0  # penalty at the max length (subtracted from every objective)

    c.ppo = ml_collections.ConfigDict()
    c.ppo.clip_low = 0.2
    c.ppo.clip_high = 0.28
    c.ppo.dual_clip = ml_collections.FieldReference(None, field_type=float)
    c.ppo.agg = "token-mean"
    c.ppo.max_len = ml_collections.FieldReference(None, field_type=int)
    c.ppo.kl_coef = 0.0
    c.ppo.kl_type = "k3"
    c.ppo.entropy_coef = 0.0
    c.ppo.ppo_epochs = 1
    c.ppo.num_minibatches = 1
    c.ppo.num_microbatches = 1
    c.ppo.shuffle = True
    c.ppo.logprob_chunk = ml_collections.FieldReference(None, field_type=int)
    c.ppo.log_entropy = True
    c.ppo.ratio_level = "token"  # "token" | "sequence" (AWPO Eq. 30)
    c.ppo.num_seqs = ml_collections.FieldReference(None, field_type=int)  # seq-mean constant N

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.learning_rate = 1e-4
    c.optimizer.schedule = "constant"
    c.optimizer.warmup_steps = 0
    c.optimizer.total_steps = 0
    c.optimizer.end_lr_ratio = 0.0
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    c.optimizer.eps = 1e-8
    c.optimizer.weight_decay = 0.0
    c.optimizer.max_grad_norm = ml_collections.FieldReference(1.0, field_type=float)

    c.sft = ml_collections.ConfigDict()
    c.sft.steps = 0  # SFT warm-start steps before RL (0 = none)
    c.sft.batch_size = 64
    c.sft.num_examples = 4000
    c.sft.data_path = ""  # demonstrations file for file-backed tasks (e.g. rlla_sft.json)
    c.sft.learning_rate = 3e-3
    c.sft.warmup_steps = 20
    # calculator demonstrations: behaviour mix (always call / never call / call only when hard)
    c.sft.behaviours = ml_collections.ConfigDict({"always": 0.5, "never": 0.2, "when_hard": 0.3})
    # calculator demonstrations: the fraction that open with a <think> plan (the think= argument)
    c.sft.think_rate = 0.0

    c.eval = ml_collections.ConfigDict()
    c.eval.num_samples = 1  # samples per problem (best@k / pass@k need k <= this)
    c.eval.temperature = 0.0  # 0 = greedy
    c.eval.ks = (1,)  # best@k / pass@k budgets (each k <= num_samples x answers)
    c.eval.checkpoint = ""  # mode=eval: an HF dir, or "" = the workdir's latest checkpoint
    c.eval.split = "test"

    c.judge = ml_collections.ConfigDict()  # AWPO's reasoning-reward judge
    c.judge.kind = "overlap"  # "overlap" (offline) | "http" (OpenAI-compatible) | "model" (local)
    c.judge.url = ""
    c.judge.model = ""
    c.judge.timeout_s = 30.0

    c.wandb = ml_collections.ConfigDict()  # Weights & Biases logging (mojax.logging.MetricsWriter)
    c.wandb.enabled = False
    c.wandb.project = "mojax"
    c.wandb.entity = ""
    c.wandb.mode = "online"  # "online" | "offline" | "disabled"
    c.wandb.name = ""  # "" = the workdir's name
    c.wandb.group = ""

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    return c


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
    model="tiny",  # "tiny" (embedded default) or a variant name (qwen2.5-math-1.5b, qwen3-4b, ...)
    checkpoint="",  # HF checkpoint dir of that model
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
)

# the calculator's static weights w = (0.6, 0.4) on (r_task, r_tool), and r_format's (think=)
CALC_WEIGHTS = (0.6, 0.4)
THINK_WEIGHT = 0.4


def apply_common_args(c: ml_collections.ConfigDict, a: ml_collections.ConfigDict) -> None:
    """Applies the arguments every method config accepts (``COMMON_ARGS``) to config ``c``.

    Sets the task and its data paths, the mesh, ``steps`` and the model. ``model=tiny`` is the
    embedded tiny run. Any other model sets only how that model executes: its variant and checkpoint,
    the checkpoint's tokenizer, bf16 params / compute / KV cache, full remat, log-probs in chunks of
    512 positions and no SFT warm start. The training recipe of ``paper=true`` is set by each method
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
    task.configure(c)  # the task's own recipe defaults (task kwargs, evaluation)
    _apply_think(c, a, task)
    if a.model == "tiny":
        c.model.variant = "tiny-qwen3"
        c.model.overrides = ml_collections.ConfigDict(dict(TINY_CALC_MODEL))
        if not task.builds_vocabulary:  # real data: the real Qwen2 tokenizer, no warm start
            c.tokenizer.path = a.checkpoint or _shared_tokenizer()
            c.model.overrides.vocab_size = 151936
            c.model.overrides.max_position_embeddings = 8192
            c.model.overrides.tie_word_embeddings = True
            c.ppo.logprob_chunk = 64  # never materialise [B, T, 151936] logits at once
            c.sft.steps = 0
        return
    c.model.variant = a.model
    c.model.checkpoint = a.checkpoint
    c.tokenizer.path = "" if a.checkpoint else c.tokenizer.path
    c.model.dtype = c.model.param_dtype = c.model.cache_dtype = "bfloat16"
    c.model.remat = "full"
    c.ppo.logprob_chunk = 512
    c.sft.steps = 0


def paper_lengths(c: ml_collections.ConfigDict) -> None:
    """The long-context shapes and cadence shared by the paper recipes: multi-turn responses of up to
    3072 tokens (1024 per turn, 4 turns, 3 tool calls), updates in 4 mini-batches of 8 micro-batches,
    500 held-out problems, evaluation and checkpoints every 20 steps."""
    c.rollout.max_new_tokens, c.rollout.max_response_len = 1024, 3072
    c.rollout.max_turns, c.rollout.max_tool_calls = 4, 3
    c.ppo.num_minibatches, c.ppo.num_microbatches = 4, 8
    c.task.num_eval = 500
    c.eval_every = c.checkpoint_every = 20


def _shared_tokenizer() -> str:
    """The real Qwen2 tokenizer of the shared assets: ``$MOJAX_SHARED_DIR/assets/qwen2-tokenizer``.

    Without ``MOJAX_SHARED_DIR`` the shared folder is ``shared/`` beside the checkout
    (``mojax.tasks.data.shared_dir``); set the variable when it lives elsewhere. Nothing is read
    here: a missing tokenizer is reported when the run loads it, naming ``MOJAX_SHARED_DIR`` and its
    value (``mojax.rl.builders.build_tokenizer``).
    """
    import os

    from mojax.tasks import data

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
