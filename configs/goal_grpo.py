"""Goal-Conditioned GRPO, the baseline of VPO (Vector Policy Optimization, arXiv:2605.22817, Sec. 5,
App. E.5): each training prompt gets ``w ~ Dir(1, ..., 1)`` written into it and GRPO trains on
``w . r``; evaluation and validation condition on the canonical ``w*`` (Table 6, "G.C. w = w*")::

    python -m mojax.main --config=configs/goal_grpo.py                 # tiny maze run, single answer
    python -m mojax.main --config=configs/goal_grpo.py:estimator=dr_grpo
    python -m mojax.main --config=configs/goal_grpo.py:paper=true,model=qwen3-4b,checkpoint=/ckpt/Qwen3-4B

``paper=true`` mirrors configs/vpo.py's App. B recipe (clip 0.2 with dual clip c = 3, a k3 KL term of
1e-3, lr 1e-6, 128 prompts x 8 rollouts, mini-batches of 64), with one answer per completion.

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/goal_grpo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    args = dict(defaults.COMMON_ARGS, task="maze")
    a = defaults.parse_arg(arg, **args, estimator="grpo")
    if a.estimator not in ("grpo", "dr_grpo"):
        raise ValueError(
            f"configs/goal_grpo.py: estimator={a.estimator!r} is not 'grpo' or 'dr_grpo'"
        )
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.task.num_answers = 0
    c.task.goal_conditioned = True
    c.estimator = a.estimator
    c.advantage = {}
    if a.paper:
        defaults.paper_lengths(c)
        c.ppo.clip_low = c.ppo.clip_high = 0.2
        c.ppo.dual_clip, c.ppo.kl_coef, c.ppo.kl_type = 3.0, 1e-3, "k3"
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 128, 8  # App. B, Qwen <= 4B
        c.ppo.num_minibatches = 2  # mini-batch 64 of 128 prompts
        c.eval.num_samples, c.eval.temperature = 10, 0.7
        c.eval.ks = (1, 3, 5, 10)
        c.steps = a.steps or 300
    else:
        c.tokenizer.path = "build"  # a small vocabulary trained on the maze prompts
        c.model.overrides = dict(defaults.TINY_CALC_MODEL, max_position_embeddings=2048)
        c.task.num_train, c.task.num_eval = 64, 4
        c.rollout.prompts_per_step, c.rollout.num_samples = 2, 4
        c.rollout.max_new_tokens = c.rollout.max_response_len = 32
        c.eval.num_samples, c.eval.temperature, c.eval.ks = 2, 1.0, (1, 2)
        c.tokenizer.vocab_size = 256
        defaults.tiny_schedule(c, a.steps, steps=4)
    return c.lock()
