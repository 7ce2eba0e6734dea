"""``mojax.rl.losses.ppo_clip_loss``, the public name of the PPO-clip loss, kept as an alias of
:mod:`mojax.learner.losses` (where the loss lives) for code written against it."""

from mojax.learner.losses import AGGREGATIONS, KL_TYPES, ppo_clip_loss, sft_loss

__all__ = ["AGGREGATIONS", "KL_TYPES", "ppo_clip_loss", "sft_loss"]
