"""AWPO (arXiv:2512.19126): variance-aware gating of a judge's reasoning reward, difficulty weights and the dynamic
clip radius (Eqs. 25–30), on ToolRL function calling with ``(R_out, R_reason)``.

The tiny default trains on the real ToolRL test split in ``../shared/data/toolrl`` (80 prompts, the
real Qwen2 tokenizer) with the offline overlap judge; point ``judge.kind=http`` at a served judge
for the paper's setting. ``task=calculator`` is a small task where the judge carries signal: every
response opens with a ``<think>`` plan (tool or mental), ``R_out`` = plan format + correctness and the
offline judge scores the plan against the decision the problem's fixed ``N_opt`` makes. On the rule
problem set (the embedded default's data) that reference is right on held-out problems (mental for a
rule problem, tool for the multi-digit ones), so the judge agrees with the outcome, and the
calculator sets ``eps_mix`` 0.75 (the paper's "modest inflation", ``eps_mix`` in (0.5, 1); at 0.5
only an anti-correlated judge ever mixes in; docs/methods.md; pre-registered grid:
``experiments/awpo_rule.py``)::

    python -m mojax.main --config=configs/awpo.py
    python -m mojax.main --config=configs/awpo.py:task=calculator
    python -m mojax.main --config=configs/awpo.py:task=calculator,estimator=grpo  # outcome only

Paper scale, from the Hugging Face directory of Qwen3-4B-Instruct-2507 (the paper's Qwen3-1.7B and
Qwen3-8B: ``model=qwen3-1.7b`` / ``qwen3-8b`` and their directories), ToolRL's rlla_4k parquet files
and the paper's judge, Qwen3-235B-A22B, served behind an OpenAI-compatible endpoint::

    python -m mojax.main --workdir=/runs/awpo_toolrl --config=configs/awpo.py:paper=true,model=qwen3-4b,checkpoint=/ckpt/Qwen3-4B-Instruct-2507,train_path=/data/rlla_4k/train.parquet,eval_path=/data/rlla_4k/test.parquet --config.judge.kind=http --config.judge.url=http://judge:8000 --config.judge.model=Qwen3-235B-A22B
    python -m mojax.main --config=configs/awpo.py:paper=true,model=qwen3-4b,data=2,fsdp=4 \
      --config.dry_run=true   # shapes, shardings and memory per device on 8 devices

On the 8 accelerators of one host, decode in slots (continuous batching) to fit: add
``--config.sampler.engine=continuous --config.continuous.slots=64``. The dry run on 8 devices puts
the peak per device at 911.4 GiB with the static engine and 50.4 GiB with these slots.

A judge small enough to run beside the policy can be loaded from its own HF directory instead
(``judge.kind=model``: each process loads a copy and judges its own rows, greedily, with the same
rubric): ``--config.judge.kind=model --config.judge.model=/ckpt/Qwen3-8B``.

``paper=true`` sets what the paper gives: Eq. 30's sequence-level importance ratio with Algorithm
1's ``1/(GK)`` mean over responses (``ppo.ratio_level="sequence"``,
``ppo.agg="seq-mean-token-mean"``; π_old recomputed by the learner, as verl does: a sampler-vs-learner
log-prob gap summed over a whole response would push the ratio out of the clip), and the SWiRL
single-step decomposition of multi-turn dialogues (Sec. 4.1; ``task.kwargs.swirl``). The paper gives
no training numbers; AWPO trains with verl against ToolRL's GRPO as its baseline, so the recipe takes
ToolRL's (``mojax.defaults.toolrl_recipe``: 512 prompts x 4 samples, mini-batches of 128 prompts,
lr 1e-6, no KL, responses up to 1024 tokens, 105 steps, fp32 parameters under bf16 compute), and
AWPO's own hyper-parameters are mojax's choices (docs/methods.md): ``R_max`` = 2 (the theoretical
maximum of ``R_out``; the paper's "peak group-mean" read as a running peak is
``--config.advantage.r_max_mode=running_peak``), ``eps_mix`` 0.5, ``tau`` (0.2, 0.8) on the mean
normalised by ``R_max`` (0.75 on the calculator), ``alpha`` (1.0, 1.5), clip radius in [0.1, 0.2]. Not reproduced: the paper's
corpus (ToolACE, Hammer, xLAM: about 44k samples, SWiRL-decomposed), its GPT-4o / GLM-4.6 reference
rationales (the judge compares with the gold answer) and its BFCL / API-Bank evaluation.

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/awpo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    args = dict(defaults.COMMON_ARGS, task="toolrl", estimator="awpo")
    a = defaults.parse_arg(arg, **args)
    if a.estimator not in ("awpo", "grpo"):
        raise ValueError(f"configs/awpo.py: estimator={a.estimator!r} is not 'awpo' or 'grpo'")
    if a.task not in ("toolrl", "calculator"):
        raise ValueError(
            "configs/awpo.py: AWPO's (R_out, R_reason) rewards come from task=toolrl or "
            "task=calculator (mode awpo)"
        )
    if a.paper and a.task != "toolrl":
        raise ValueError("configs/awpo.py: paper=true is AWPO's ToolRL recipe; use task=toolrl")
    if a.task == "toolrl" and not a.train_path:
        a.train_path = defaults.shared_data("toolrl", "test.parquet")
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    if a.task == "calculator":
        return _calculator(c, a)
    if a.estimator != "awpo":
        raise ValueError(
            "configs/awpo.py: estimator=grpo is the calculator's baseline (task=calculator)"
        )
    # ToolRLTask switches (docs/methods.md): matching, tool-name Jaccard, Eq. 19 on direct replies,
    # SWiRL single-step decomposition of multi-turn dialogues
    c.task.kwargs = dict(
        mode="awpo", matching="optimal", name_jaccard="multiset", direct_reply="eq19", swirl=False
    )
    c.estimator = "awpo"
    c.judge.kind = "overlap"
    _awpo_advantage(c)
    if a.paper:  # the paper's Eq. 30 and SWiRL data; ToolRL's recipe for every number
        c.task.kwargs.swirl = True
        c.ppo.ratio_level, c.ppo.agg = "sequence", "seq-mean-token-mean"
        c.ppo.old_logprobs = "recompute"
        defaults.toolrl_recipe(c, a.steps)
    else:
        c.task.num_eval = 8
        c.rollout.prompts_per_step = 4
        c.rollout.num_samples = 4
        c.rollout.max_new_tokens = c.rollout.max_response_len = 32
        c.eval.ks = (1,)
        # ToolRL prompts are ~4k tokens (T = 4128): `--config.dry_run=true` prints the update's
        # memory; remat and micro-batches of at most ppo.microbatch_tokens keep it small
        c.model.remat = "full"
        c.ppo.num_microbatches = 4
        defaults.tiny_schedule(c, a.steps, steps=4)
    return c.lock()


def _awpo_advantage(c) -> None:
    """AWPO's keywords; ``R_max`` = the theoretical maximum of ``R_out`` (format 1 + outcome 1)."""
    c.estimator = "awpo"
    c.advantage = dict(
        r_max=2.0,
        eps_mix=0.5,
        tau_low=0.2,
        tau_high=0.8,
        alpha_base=1.0,
        alpha_prio=1.5,
        clip_min=0.1,
        clip_max=0.2,
    )
    c.judge.kind = "overlap"


def _calculator(c, a):
    """The calculator in AWPO's mode: every demonstration opens with a plan, the offline judge
    scores the plan, the embedded default's sizes and 40 RL steps after a 500-step warm start."""
    c.task.kwargs = dict(c.task.kwargs, mode="awpo")
    c.sft.think_rate = 1.0
    _awpo_advantage(c)
    # eps_mix 0.75, not the general 0.5: sigma_mix^2 = sigma_out^2 + sigma_reason^2 + 2 Cov, so
    # r_g < 0.5 only where the judge is anti-correlated with the outcome. Here the judge's
    # reference (CalculatorTask.judge_reference, the fixed N_opt's plan) is right on held-out
    # problems, so it agrees with the outcome; the paper's "modest inflation of V" (Eq. 25) reads as
    # eps_mix in (0.5, 1): r_g < 0.75 <=> sigma_mix < 3 sigma_out (docs/methods.md, AWPO eps_mix)
    c.advantage.eps_mix = 0.75
    if a.estimator == "grpo":  # the outcome-only baseline: GRPO on R_out, the judge ignored
        c.estimator, c.advantage = "grpo", dict(weights=(1.0, 0.0))
    defaults.tiny_schedule(c, a.steps)
    return c.lock()
