"""VPO (003): S answers per completion scored by a Dirichlet-scalarized set maximum (Eq. 1), on the
maze (App. A.1); best@k and reward-space diversity in evaluation::

    python -m mojax.main --config=configs/vpo.py                      # tiny maze run, S = 2 routes
    python -m mojax.main --config=configs/vpo.py:estimator=multi_rlvr # Multi-RLVR baseline (fixed w*)
    python -m mojax.main --config=configs/vpo.py:model=qwen3-4b,checkpoint=/ckpt/Qwen3-4B,answers=4
"""

from mojax import defaults


def get_config(arg=None):
    args = dict(defaults.COMMON_ARGS, task="maze")
    a = defaults.parse_arg(arg, **args, answers=2, estimator="vpo")
    if a.estimator not in ("vpo", "multi_rlvr"):
        raise ValueError(f"configs/vpo.py: estimator={a.estimator!r} is not 'vpo' or 'multi_rlvr'")
    c = defaults.base_config()
    paper = defaults.apply_common_args(c, a)
    c.task.num_answers = a.answers
    c.estimator = a.estimator
    c.advantage = dict(num_weights=100, alpha=1.0) if a.estimator == "vpo" else {}
    if not paper:
        c.tokenizer.path = "build"  # a small vocabulary trained on the maze prompts
        c.model.overrides = dict(defaults.TINY_CALC_MODEL, max_position_embeddings=2048)
        c.task.num_train, c.task.num_eval = 64, 4
        c.rollout.prompts_per_step, c.rollout.num_samples = 2, 4
        c.rollout.max_new_tokens = c.rollout.max_response_len = 32
        c.eval.num_samples, c.eval.temperature, c.eval.ks = 2, 1.0, (1, 2, 3)
        c.tokenizer.vocab_size = 256
    defaults.tiny_schedule(c, paper, a.steps, steps=4)
    return c.lock()
