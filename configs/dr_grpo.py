"""Dr.GRPO: ``A = s − mean_g s`` (no std) with the ``seq-mean-token-sum-norm`` loss::

python -m mojax.main --config=configs/dr_grpo.py

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/dr_grpo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS)
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = "dr_grpo"
    c.advantage = dict(weights=defaults.static_weights(c))
    c.ppo.agg = "seq-mean-token-sum-norm"
    c.ppo.max_len = c.rollout.max_response_len
    c.ppo.clip_low = c.ppo.clip_high = 0.2
    if a.paper:  # the ParetoPO paper's baseline recipe (arXiv:2606.16111, Sec. 4.1)
        defaults.paper_lengths(c)
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 1024, 8
        c.steps = a.steps or 300
    else:
        defaults.tiny_schedule(c, a.steps)
    return c.lock()
