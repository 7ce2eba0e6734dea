"""DAPO: token-mean loss, clip-higher (0.2, 0.28), dynamic sampling judged per objective, overlong
shaping, on the GRPO scalarization ``w·r``::

    python -m mojax.main --config=configs/dapo.py

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/dapo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS)
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = "grpo"
    c.advantage = dict(weights=defaults.static_weights(c))
    c.ppo.agg = "token-mean"
    c.ppo.clip_low, c.ppo.clip_high = 0.2, 0.28
    c.dapo.dynamic_sampling = True
    if a.paper:  # DAPO's recipe as ParetoPO uses it: lr 1e-6, 8 samples, 512-token overlong buffer
        defaults.paper_lengths(c)
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 1024, 8
        c.dapo.overlong_buffer = 512
        c.steps = a.steps or 300
    else:
        c.dapo.overlong_buffer = 8
        defaults.tiny_schedule(c, a.steps)
    return c.lock()
