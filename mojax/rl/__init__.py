"""The RL loop: one step top to bottom (``step``), the loop around it (``trainer``), the run spec
(``spec``) and the pieces a run builds once (``builders``).

Entry point: ``mojax.rl.trainer.run(config, workdir)`` (what ``mojax.main`` calls). The update
itself (losses, log-probs, train state, the sharded PPO step) is ``mojax.learner``.
"""
