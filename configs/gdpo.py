"""GDPO: per-objective group normalisation, weighted sum, then batch normalisation::

python -m mojax.main --config=configs/gdpo.py
python -m mojax.main --config=configs/gdpo.py:batch_norm=token
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS, batch_norm="sample")
    c = defaults.base_config()
    paper = defaults.apply_common_args(c, a)
    c.estimator = "gdpo"
    c.advantage = dict(weights=(0.6, 0.4), batch_norm=a.batch_norm)
    defaults.tiny_schedule(c, paper, a.steps)
    return c.lock()
