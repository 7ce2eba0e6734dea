"""MO-GRPO: ``A = Σ_k w_k groupnorm(r_k)`` without GDPO's batch normalisation::

python -m mojax.main --config=configs/mo_grpo.py
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS)
    c = defaults.base_config()
    paper = defaults.apply_common_args(c, a)
    c.estimator = "mo_grpo"
    c.advantage = dict(weights=(0.6, 0.4))
    defaults.tiny_schedule(c, paper, a.steps)
    return c.lock()
