"""SAW (002): batch coefficient-of-variation weights, at reward level (``mode=grpo``, Eq. 4) or
advantage level (``mode=gdpo``, Eq. 6)::

    python -m mojax.main --config=configs/saw.py                 # reward level (saw_grpo)
    python -m mojax.main --config=configs/saw.py:mode=gdpo       # advantage level (saw_gdpo)
    python -m mojax.main --config=configs/saw.py:mode=gdpo,think=0.1  # + r_format (the SAW claim)
    python -m mojax.main --config=configs/saw.py:mode=gdpo,model=qwen2.5-1.5b,task=toolrl,paper=true,checkpoint=/ckpt/Qwen2.5-1.5B-Instruct,train_path=/data/rlla_4k/train.parquet,eval_path=/data/rlla_4k/test.parquet

``paper=true`` is SAW's ToolRL recipe (arXiv:2606.07705, App. D, Table 4): 512 prompts x 4 samples per
step, mini-batches of 128 prompts (4 updates), lr 1e-6, clip 0.2, no KL loss, responses up to 1024
tokens, 15 epochs.

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/saw.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS, mode="grpo")
    if a.mode not in ("grpo", "gdpo"):
        raise ValueError(f"configs/saw.py: mode={a.mode!r} is not one of ['grpo', 'gdpo']")
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = f"saw_{a.mode}"
    c.advantage = dict(fallback=True)  # reward_min: the task's declared minima (trainer)
    if a.paper:
        defaults.paper_lengths(c)
        c.ppo.clip_low = c.ppo.clip_high = 0.2
        c.rollout.max_new_tokens = c.rollout.max_response_len = 1024
        c.rollout.prompts_per_step, c.rollout.num_samples = 512, 4
        c.ppo.num_minibatches, c.ppo.kl_coef = 4, 0.0
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.steps = a.steps or 15 * 8  # 15 epochs of the 4k-prompt rlla_4k train split
    else:
        defaults.tiny_schedule(c, a.steps)
    return c.lock()
