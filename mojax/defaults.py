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
    c.mode = "train"  # "train" | "eval" (evaluate eval.checkpoint or the latest checkpoint)
    c.dry_run = False  # build with jax.eval_shape, check shardings, print memory per device; no run
    c.checkpoint_every = 10
    c.keep_checkpoints = 2
    c.eval_every = 10  # validation every N RL steps (ParetoPO Stage 1 overrides with its own)
    c.log_every = 1
    c.transcripts_per_step = 4  # sampled transcripts written to transcripts.jsonl per logged step

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

    c.rollout = ml_collections.ConfigDict()
    c.rollout.prompts_per_step = 16  # P
    c.rollout.num_samples = 8  # G
    c.rollout.max_new_tokens = 24  # per turn
    c.rollout.max_response_len = 48  # R: all turns and observations together
    c.rollout.max_turns = 3  # decode turns (tool calls + 1)
    c.rollout.max_tool_calls = 2
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.top_k = 0
    c.rollout.tool_timeout_s = 10.0
    c.rollout.tool_workers = 4

    c.estimator = "pareto_rank"  # a name of mojax.advantages.ESTIMATORS
    c.advantage = ml_collections.ConfigDict()  # the estimator's keyword arguments

    c.paretopo = ml_collections.ConfigDict()
    c.paretopo.enabled = False
    c.paretopo.stage1_steps = 10  # Stage 1 (HV-guided scalarization) steps, then Stage 2
    c.paretopo.stage1_estimator = "grpo"  # estimator of the scalarized reward in Stage 1
    c.paretopo.weights = (0.6, 0.4)  # w of r_w = w . r (000 Eq. 5)
    c.paretopo.mode = "global"  # "global" (Algorithm 1) | "per_trajectory" (Eq. 6)
    c.paretopo.gamma = 0.5  # EMA of ΔHV
    c.paretopo.reference = "initial"  # HV reference: "initial" (v_0) | "zeros"
    c.paretopo.validate_every = 1  # Stage-1 validation (archive update) every N steps

    c.tool_reward = ml_collections.ConfigDict()
    c.tool_reward.alpha = 0.7  # r_tool = exp(-alpha |N_call - N_opt|) (000 Eq. 4)
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

    c.eval = ml_collections.ConfigDict()
    c.eval.num_samples = 1  # samples per problem (best@k / pass@k need k <= this)
    c.eval.temperature = 0.0  # 0 = greedy
    c.eval.ks = (1, 3, 5, 10, 30)
    c.eval.checkpoint = ""  # mode=eval: an HF dir, or "" = the workdir's latest checkpoint
    c.eval.split = "test"

    c.judge = ml_collections.ConfigDict()  # AWPO's reasoning-reward judge
    c.judge.kind = "overlap"  # "overlap" (offline) | "http" (OpenAI-compatible) | "model" (local)
    c.judge.url = ""
    c.judge.model = ""
    c.judge.timeout_s = 30.0

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    return c
