"""MO-GRPO: ``A = Σ_k w_k groupnorm(r_k)`` without GDPO's batch normalisation::

python -m mojax.main --config=configs/mo_grpo.py

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/mo_grpo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS)
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = "mo_grpo"
    c.advantage = dict(weights=defaults.static_weights(c))
    if a.paper:  # the ParetoPO paper's baseline recipe (arXiv:2606.16111, Sec. 4.1)
        defaults.paper_lengths(c)
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 1024, 8
        c.steps = a.steps or 300
    else:
        defaults.tiny_schedule(c, a.steps)
    return c.lock()
