"""SAW (002): batch coefficient-of-variation weights, at reward level (``mode=grpo``, Eq. 4) or
advantage level (``mode=gdpo``, Eq. 6)::

    python -m mojax.main --config=configs/saw.py                 # reward level (saw_grpo)
    python -m mojax.main --config=configs/saw.py:mode=gdpo       # advantage level (saw_gdpo)
    python -m mojax.main --config=configs/saw.py:mode=gdpo,model=qwen2.5-1.5b,task=toolrl,checkpoint=/ckpt/Qwen2.5-1.5B-Instruct,train_path=/data/rlla_4k/train.parquet,eval_path=/data/rlla_4k/test.parquet
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS, mode="grpo")
    if a.mode not in ("grpo", "gdpo"):
        raise ValueError(f"configs/saw.py: mode={a.mode!r} is not one of ['grpo', 'gdpo']")
    c = defaults.base_config()
    paper = defaults.apply_common_args(c, a)
    c.estimator = f"saw_{a.mode}"
    c.advantage = dict(fallback=True)
    if paper:  # 002 App. D: train batch 512, mini-batch 128, lr 1e-6
        c.rollout.prompts_per_step = 64
        c.ppo.num_minibatches = 4
    defaults.tiny_schedule(c, paper, a.steps)
    return c.lock()
