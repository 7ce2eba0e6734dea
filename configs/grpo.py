"""GRPO baseline: scalar ``s = w·r`` with group z-scores (methods.md "Baselines").

On the embedded default (calculator, tiny model, same SFT warm start and tool turns as
``paretopo.py``) this is the comparison run: ``w = (0.6, 0.4)`` on ``(r_task, r_tool)``::

    python -m mojax.main --config=configs/grpo.py
    python -m mojax.main --config=configs/grpo.py:paper=true,model=qwen2.5-math-1.5b,task=math,checkpoint=/ckpt/Qwen2.5-Math-1.5B,train_path=/data/torl/train.parquet

``paper=true`` is the ParetoPO paper's GRPO baseline recipe (arXiv:2606.16111, Sec. 4.1): lr 1e-6,
1024 prompts x 8 samples per step, the shared long-context shapes (``defaults.paper_lengths``).

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/grpo.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS, std_ddof=0)
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = "grpo"
    c.advantage = dict(weights=defaults.static_weights(c), std_ddof=a.std_ddof)
    c.ppo.clip_low = c.ppo.clip_high = 0.2
    if a.paper:
        defaults.paper_lengths(c)
        c.optimizer.learning_rate, c.optimizer.weight_decay = 1e-6, 0.01
        c.rollout.prompts_per_step, c.rollout.num_samples = 1024, 8
        c.steps = a.steps or 300
    else:
        defaults.tiny_schedule(c, a.steps)
    return c.lock()
