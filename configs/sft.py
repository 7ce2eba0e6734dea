"""SFT only: the warm start as its own run (token cross-entropy on demonstrations, observations
masked); the resulting checkpoint seeds any RL config::

    python -m mojax.main --config=configs/sft.py
    python -m mojax.main --config=configs/sft.py:model=qwen2.5-1.5b,task=toolrl,checkpoint=/ckpt/Qwen2.5-1.5B-Instruct,sft_path=/data/toolrl/rlla_sft.json,train_path=/data/toolrl/test.parquet

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/sft.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS, sft_steps=500)
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = "grpo"
    c.advantage = dict(weights=defaults.static_weights(c))
    c.sft.steps = a.sft_steps
    c.steps = 0  # no RL: the run ends with the SFT evaluation
    c.eval_every = 1
    return c.lock()
