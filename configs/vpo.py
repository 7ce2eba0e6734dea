"""VPO (Vector Policy Optimization, arXiv:2605.22817): S answers per completion scored by a Dirichlet-scalarized set maximum (Eq. 1), on the
maze (App. A.1); best@k and reward-space diversity in evaluation::

    python -m mojax.main --config=configs/vpo.py                      # tiny maze run, S = 2 routes
    python -m mojax.main --config=configs/vpo.py:estimator=multi_rlvr # Multi-RLVR baseline (fixed w*)
    python -m mojax.main --config=configs/vpo.py:estimator=max_at_k   # Max@k baseline (single answers)
    python -m mojax.main --config=configs/vpo.py:task=bandit                # the route bandit, S = 3
    python -m mojax.main --config=configs/vpo.py:task=bandit,estimator=grpo # its GRPO baseline (w*)

Paper scale: the maze of Table 2 from the Hugging Face directory of Qwen3-4B (the mazes are
generated, no data file; ``estimator=multi_rlvr|max_at_k|grpo`` for the baselines)::

    python -m mojax.main --workdir=/runs/vpo_maze --config=configs/vpo.py:paper=true,model=qwen3-4b,checkpoint=/ckpt/Qwen3-4B
    python -m mojax.main --config=configs/vpo.py:paper=true,model=qwen3-4b,data=2,fsdp=4 \
      --config.dry_run=true   # shapes, shardings and memory per device on 8 devices

On the 8 accelerators of one host, decode in slots (continuous batching) to fit: add
``--config.sampler.engine=continuous --config.continuous.slots=256``. The dry run on 8 devices puts
the peak per device at 146.3 GiB with the static engine and 52.8 GiB with these slots.

``paper=true`` is the paper's recipe (App. B): m = 3 answers per completion, K = 100 Dirichlet(1)
weights per group (the authors' code; the paper does not give K), 128 prompts x 8 rollouts per step,
mini-batches of 64 prompts, one PPO epoch, clip 0.2 with dual clip c = 3, token-mean loss, a k3 KL
loss of 1e-3 to the initial policy, AdamW lr 1e-6 constant (no warmup), weight decay 0.01, gradient
norm 1.0, fp32 parameters under bf16 compute, rollouts at temperature 1; 1000 training mazes (seeds
from 42) and the 100 held-out mazes (from 4242) of Table 2, evaluated with 10 chains x m answers at
temperature 0.7 and best@k for k in {1, 3, 5, 10, pool} (k counts answers). The paper does not give
the maze run's response length or run length: one turn of up to 1024 tokens and 300 steps here
(``steps=N``). It validates greedily during training; mojax's periodic evaluation uses the
final-evaluation sampler above.

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/vpo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    args = dict(defaults.COMMON_ARGS, task="maze")
    a = defaults.parse_arg(arg, **args, answers=0, estimator="vpo")
    if a.estimator not in ("vpo", "multi_rlvr", "max_at_k", "grpo"):
        raise ValueError(
            f"configs/vpo.py: estimator={a.estimator!r} is not 'vpo', 'multi_rlvr', 'max_at_k' "
            "or 'grpo'"
        )
    if a.paper and a.task != "maze":
        raise ValueError(
            f"configs/vpo.py: paper=true is VPO's maze recipe (Table 2); task={a.task!r} is not "
            "task=maze"
        )
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    # Max@k (arXiv:2510.23393) and GRPO (the task's w*): single-answer rollouts
    single = a.estimator in ("max_at_k", "grpo")
    c.task.num_answers = 0 if single else a.answers or (3 if a.paper else 2)
    c.estimator = a.estimator
    c.advantage = {"vpo": dict(num_weights=100, alpha=1.0), "max_at_k": dict(k=2)}.get(
        a.estimator, {}
    )
    if a.paper:
        defaults.paper_lengths(c)
        c.rollout.max_new_tokens = c.rollout.max_response_len = 1024  # no tool: one turn
        c.rollout.max_turns, c.rollout.max_tool_calls = 1, 0
        c.task.num_train, c.task.num_eval = 1000, 100  # A.1's train and Table 2's test mazes
        c.ppo.clip_low = c.ppo.clip_high = 0.2
        c.ppo.dual_clip, c.ppo.kl_coef, c.ppo.kl_type = 3.0, 1e-3, "k3"
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 128, 8  # App. B, Qwen <= 4B
        c.ppo.num_minibatches = 2  # mini-batch 64 of 128 prompts
        pool = 10 * (a.answers or 3)  # 10 chains x m answers; single-answer methods: pool chains
        c.eval.num_samples, c.eval.temperature = (pool if single else 10), 0.7
        c.eval.ks = tuple(k for k in (1, 3, 5, 10) if k < pool) + (pool,)
        c.steps = a.steps or 300
    else:
        c.tokenizer.path = "build"  # a small vocabulary trained on the maze prompts
        c.model.overrides = dict(defaults.TINY_CALC_MODEL, max_position_embeddings=2048)
        c.task.num_train, c.task.num_eval = 64, 4
        c.rollout.prompts_per_step, c.rollout.num_samples = 2, 4
        c.rollout.max_new_tokens = c.rollout.max_response_len = 32
        # the same answer pool for every method: 2 chains x S answers, or 2 x S single answers
        pool_chains = 2 * (c.task.num_answers or 2) if single else 2
        c.eval.num_samples, c.eval.temperature, c.eval.ks = pool_chains, 1.0, (1, 2, 3)
        c.tokenizer.vocab_size = 256
        defaults.tiny_schedule(c, a.steps, steps=4)
    if a.task == "bandit" and not a.paper:
        _bandit(c, a, single)
    return c.lock()


def _bandit(c, a, single: bool) -> None:
    """The route bandit's tiny recipe: S = 3 answers (or single ones), 8 contexts, a 200-step
    maximum-entropy warm start, 60 RL steps of 8 contexts x 8 samples, and one answer pool for every
    method at evaluation (4 chains x 3 answers, or 12 single answers) at temperature 1."""
    c.task.num_answers = 0 if single else a.answers or 3
    c.task.num_train, c.task.num_eval = 64, 8
    c.rollout.prompts_per_step, c.rollout.num_samples = 8, 8
    c.rollout.max_new_tokens = c.rollout.max_response_len = 32
    s = a.answers or 3
    c.eval.num_samples = 4 * s if single else 4
    c.eval.temperature, c.eval.ks = 1.0, tuple(k for k in (1, 2, 3, 6) if k < 4 * s) + (4 * s,)
    c.tokenizer.vocab_size = 128
    c.sft.steps, c.sft.batch_size, c.sft.num_examples = 200, 32, 64
    c.steps = a.steps or 60
