"""DAPO: token-mean loss, clip-higher (0.2, 0.28), dynamic sampling judged per objective, overlong
shaping, on the GRPO scalarization ``w·r``::

    python -m mojax.main --config=configs/dapo.py
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS)
    c = defaults.base_config()
    paper = defaults.apply_common_args(c, a)
    c.estimator = "grpo"
    c.advantage = dict(weights=(0.6, 0.4))
    c.ppo.agg = "token-mean"
    c.ppo.clip_low, c.ppo.clip_high = 0.2, 0.28
    c.dapo.dynamic_sampling = True
    c.dapo.overlong_buffer = 512 if paper else 8
    defaults.tiny_schedule(c, paper, a.steps)
    return c.lock()
