"""ParetoPO (000): hypervolume-guided Stage 1, then Pareto-rank advantages (Stage 2), DAPO options.

The embedded default (no argument) trains a tiny Qwen3-architecture model with a self-built
tokenizer on the calculator tool-use task: SFT warm start on mixed demonstrations, then ParetoPO with
real calculator calls, on a 2-core CPU in minutes::

    python -m mojax.main --config=configs/paretopo.py
    python -m mojax.main --config=configs/paretopo.py --config.steps=4 --workdir=/tmp/p  # smoke run

Paper scale (ToRL math with the sandboxed Python tool; Search-R1 QA with retrieval)::

    python -m mojax.main --workdir=/runs/paretopo_math \
      --config=configs/paretopo.py:paper=true,model=qwen2.5-math-1.5b,task=math,checkpoint=/ckpt/Qwen2.5-Math-1.5B,train_path=/data/torl/train.parquet,eval_path=/data/math500.jsonl
    python -m mojax.main --workdir=/runs/paretopo_qa \
      --config=configs/paretopo.py:paper=true,model=qwen2.5-3b,task=qa,checkpoint=/ckpt/Qwen2.5-3B,train_path=/data/nq_hotpotqa_train.parquet \
      --config.rollout.retrieval_url=http://127.0.0.1:8000
    python -m mojax.main --config=configs/paretopo.py:paper=true,model=qwen2.5-math-1.5b,task=math,data=2,fsdp=4 \
      --config.dry_run=true   # shapes, shardings and memory per device, nothing allocated
    python -m mojax.main --config=configs/paretopo.py --config.paretopo.dynamic_weighting=false  # ablation
    python -m mojax.main --config=configs/paretopo.py --config.paretopo.pareto_ranking=false     # ablation

The testbed (methods.md, ParetoPO and the calculator's rule set) is the default: problems whose
no-call path is a rule on unseen operands, r_tool paid to successes, and a validation vector of 4
samples at T = 1 scored with the task's fixed N_opt against a reference below v_0. The earlier
testbed (single-digit facts, r_tool paid to every sample, greedy one-sample validation)::

    python -m mojax.main --config=configs/paretopo.py --config.task.kwargs.problems=facts \
      --config.tool_reward.gate=all --config.task.num_eval=128 --config.task.num_validation=0 \
      --config.paretopo.validation_samples=1 --config.paretopo.validation_temperature=0 \
      --config.paretopo.validation_n_opt=tracked --config.paretopo.reference=initial

``paper=true`` is the paper's recipe (ParetoPO, arXiv:2606.16111, Sec. 4.1): lr 1e-6, batch 1024 prompts
x 8 samples, DAPO strategies (token-mean, clip-higher, dynamic sampling, 512-token overlong buffer),
Stage 1 for one epoch (``stage1_steps=-1``: ``ceil(len(train) / prompts_per_step)``, resolved when the
data is loaded), then Stage 2; alpha 0.7, gamma 0.5, beta 0.5, w = (0.6, 0.4).

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/paretopo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(
        arg, **defaults.COMMON_ARGS, stage1_steps=-2, mode="global", normalize="zscore"
    )
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = "pareto_rank"
    # Eqs. 7-9. The paper's Theorem 3.5 form ("none") gives every sample a positive advantage
    # (A >= 1 - beta/2); ParetoPO then runs GRPO on it (Sec. 4.1), i.e. the rank advantages are
    # group-normalised: "zscore". Without it, token-mean PPO reinforces every sampled response and
    # the policy sharpens on its most frequent behaviour instead of the Pareto ranking.
    c.advantage = dict(weights=defaults.static_weights(c), beta=0.5, normalize=a.normalize)
    c.paretopo.enabled = True
    c.paretopo.weights = defaults.static_weights(c)
    c.paretopo.mode = a.mode
    c.paretopo.gamma = 0.5
    c.tool_reward.alpha = 0.7
    # DAPO strategies (Sec. 4.1): token-mean loss, clip-higher, dynamic sampling
    c.ppo.agg = "token-mean"
    c.ppo.clip_low, c.ppo.clip_high = 0.2, 0.28
    c.dapo.dynamic_sampling = True
    if a.paper:
        defaults.paper_lengths(c)
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 1024, 8
        c.paretopo.stage1_steps = -1  # one epoch
        c.dapo.overlong_buffer = 512
        c.steps = a.steps or 300
    else:
        defaults.tiny_schedule(c, a.steps)
        c.paretopo.stage1_steps = 10
        c.paretopo.validate_every = 2
        if c.task.name == "calculator":  # the task's rule gives N_opt (0 where a rule applies)
            c.paretopo.validation_n_opt = "fixed"
    if a.stage1_steps != -2:  # -2: the recipe's; -1: one epoch; N: N steps
        c.paretopo.stage1_steps = a.stage1_steps
    return c.lock()
