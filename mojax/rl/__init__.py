"""The RL loop, ten modules: one step top to bottom with its PPO batch (``step``), the loop around it
with its phases and what a signal saves (``trainer``), asynchronous generation (``async_loop``), the
run's pieces built once (``builders``), the policy it starts from and LoRA's frozen base
(``warm_start``), episodes (``episodes``), the host state a checkpoint restores with the prompt
iterator and the in-flight rollouts (``state``), held-out evaluation and validation (``evaluate``),
the compiled memory estimate (``dry_run``) and the public PPO-clip loss name (``losses``).

Entry point: ``mojax.rl.trainer.run(config, workdir)`` (what ``mojax.main`` calls). The run spec the
loop reads is ``mojax.spec``; the update itself (losses, log-probs, train state, the sharded PPO
step) is ``mojax.learner``; run plumbing (workdir, lock, checkpoints, logs) is ``mojax.infra``.
"""
