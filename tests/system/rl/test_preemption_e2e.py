"""Preemption within the grace period, end to end (in this process, real signals).

One run is stopped three times, each time by a real signal sent from inside the work it interrupts
(so the moment is exact), and resumed each time; it must end as the uninterrupted run does:

1. SIGHUP during the SFT warm start (step 8 of 20, checkpointed every 5): the warm start saves
   step 8 and stops;
2. SIGTERM inside the first decode call of RL step 2's rollout: the rollout is abandoned (no other
   decode call follows), and step 1, the last completed one, is saved (``checkpoint_every`` is too
   large to have saved it otherwise);
3. SIGINT inside the evaluation rollout after RL step 2's update, after its validation: step 2
   is saved with its after-step phases pending; the resumed run redoes them first (the validation
   counted once: it scored into a copy of the reward stats).

The config is ParetoPO's (its Stage 1 validates after every step, before the evaluation, and DAPO's
dynamic sampling refills its rollouts), made short.

The reference is the uninterrupted run of the same config: ``metrics.jsonl`` (all keys but
``time/``), ``sft_metrics.jsonl``, ``transcripts.jsonl``, the final params and host state.
"""

import contextlib
import json
import pathlib
import signal

import jax
import numpy as np
import pytest
from mojax_test_utils import load_config, persistent_compilation_cache

from mojax.infra.preemption import Preempted

REPO = pathlib.Path(__file__).resolve().parents[3]


def _config(name="paretopo"):
    c = load_config(name)
    with c.unlocked():
        if name == "paretopo":
            c.paretopo.stage1_steps, c.paretopo.validate_every = 2, 1
        c.steps, c.checkpoint_every, c.eval_every = 3, 100, 1
        c.sft.steps, c.sft.batch_size, c.sft.num_examples = 20, 16, 64
        c.sft.checkpoint_every = 5
        c.task.num_train, c.task.num_eval, c.task.num_validation = 64, 4, 0
        c.rollout.prompts_per_step, c.rollout.num_samples = 2, 4
        c.eval.ks, c.eval.num_samples = (1,), 1
        c.ppo.kl_coef = 0.01  # the resumed run rebuilds the reference policy
    return c


class _Trap:
    """Sends ``sig`` inside the first decode call (``generate``) of one phase: ``("collect", t)``,
    the rollout that follows RL step ``t`` (DAPO's refill rounds are more calls of it), or
    ``("evaluate", t)``, the evaluation after step ``t``; or, with an int, inside the ``phase``-th
    ``generate`` of the run. Counts the sampler's decode calls after that (``generate`` and
    ``append_and_continue``)."""

    def __init__(self, monkeypatch, phase, sig):
        from mojax.rl import step, trainer
        from mojax.sampling.static.engine import InGraphSampler

        self.at, self.after, self.fired, self.rollouts = None, 0, False, 0
        generate, append = InGraphSampler.generate, InGraphSampler.append_and_continue
        collect, evaluate = step.collect, trainer.evaluate

        def gen(*args, **kwargs):
            self.after += self.fired
            self.rollouts += 1
            out = generate(*args, **kwargs)
            if phase in (self.at, self.rollouts) and not self.fired:
                self.fired = True
                signal.raise_signal(sig)
            return out

        def app(*args, **kwargs):
            self.after += self.fired
            return append(*args, **kwargs)

        def during(name, fn, step_of):
            def call(*args, **kwargs):
                self.at = (name, step_of(*args, **kwargs))
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.at = None

            return call

        monkeypatch.setattr(InGraphSampler, "generate", gen)
        monkeypatch.setattr(InGraphSampler, "append_and_continue", app)
        monkeypatch.setattr(step, "collect", during("collect", collect, lambda r, h, *a: h.step))
        monkeypatch.setattr(
            trainer, "evaluate", during("evaluate", evaluate, lambda r, h, p, t, **k: t)
        )


def _run(workdir):
    from mojax.rl import trainer

    return trainer.run(_config(), str(workdir))


def _stopped(workdir) -> Preempted:
    with pytest.raises(Preempted) as e:
        _run(workdir)
    return e.value


def _lines(path, drop_time=False):
    rows = [json.loads(x) for x in pathlib.Path(path).read_text().splitlines()]
    if drop_time:
        rows = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]
    return rows


def _final(workdir):
    import orbax.checkpoint as ocp

    step = workdir / "checkpoints" / "3"
    with ocp.StandardCheckpointer() as ck:
        state = ck.restore(step / "state")
    return state, json.loads((step / "host" / "metadata").read_text())


@pytest.mark.slow
def test_signals_in_sft_rollout_and_evaluation_resume_to_the_uninterrupted_run(
    tmp_path, monkeypatch, request
):
    from mojax import learner

    cache = contextlib.ExitStack()
    cache.enter_context(persistent_compilation_cache(tmp_path / "cache"))
    request.addfinalizer(cache.close)
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    _run(straight)

    # 1. SIGHUP inside SFT step 8
    make = learner.make_sft_step
    box = {}

    def make_trapped(*a, **k):
        step = make(*a, **k)
        box["n"] = 0

        def call(state, batch):
            out = step(state, batch)
            box["n"] += 1
            if box["n"] == 8:
                signal.raise_signal(signal.SIGHUP)
            return out

        return call

    from mojax.infra.checkpoint import Checkpointer

    saves, save = [], Checkpointer.save

    def recorded(self, step, *args, **kwargs):
        saves.append((pathlib.Path(self.directory).name, step))
        return save(self, step, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(learner, "make_sft_step", make_trapped)
        m.setattr(Checkpointer, "save", recorded)
        e = _stopped(stopped)
    assert e.exit_code == 129 and box["n"] == 8 and "after SFT step 8 of 20" in str(e)
    assert saves == [("checkpoints_sft", 5), ("checkpoints_sft", 8)]  # periodic, then the signal
    assert [r["step"] for r in _lines(stopped / "sft_metrics.jsonl")] == list(range(1, 9))
    assert e.checkpoint == str(stopped / "checkpoints_sft" / "8")
    assert sorted(p.name for p in (stopped / "checkpoints_sft").iterdir()) == ["8"]
    assert not (stopped / "checkpoints").exists() or not list((stopped / "checkpoints").iterdir())

    # 2. SIGTERM inside the first decode call of step 2's rollout
    with monkeypatch.context() as m:
        trap = _Trap(m, ("collect", 1), signal.SIGTERM)
        e = _stopped(stopped)
    assert e.exit_code == 143 and trap.fired and trap.after == 0, trap.after
    assert "after RL step 1 (the rollout of step 2 was abandoned)" in str(e)
    assert "within the 30 s grace" in str(e)
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["1"]
    assert [r["step"] for r in _lines(stopped / "metrics.jsonl")] == [0, 1]

    # 3. SIGINT inside step 2's evaluation (resumed at step 1: step 2's rollout, its validation)
    with monkeypatch.context() as m:
        trap = _Trap(m, ("evaluate", 2), signal.SIGINT)
        e = _stopped(stopped)
    assert e.exit_code == 130 and trap.fired and trap.after == 0
    assert "after the update of RL step 2 (its evaluation is redone on resume)" in str(e)
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["1", "2"]
    host2 = json.loads((stopped / "checkpoints" / "2" / "host" / "metadata").read_text())
    assert "pending" in json.dumps(host2)
    assert [r["step"] for r in _lines(stopped / "metrics.jsonl")] == [0, 1]

    _run(stopped)  # evaluates step 2, then step 3

    assert _lines(stopped / "metrics.jsonl", True) == _lines(straight / "metrics.jsonl", True)
    assert _lines(stopped / "sft_metrics.jsonl") == _lines(straight / "sft_metrics.jsonl")
    assert _lines(stopped / "transcripts.jsonl") == _lines(straight / "transcripts.jsonl")
    assert len(_lines(stopped / "transcripts.jsonl")) == 3 * 4  # one set per step, none twice
    (a, ha), (b, hb) = _final(straight), _final(stopped)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ha == hb and "pending" not in json.dumps(hb)


@pytest.mark.slow
def test_a_signal_while_generating_ahead_keeps_the_update_and_regenerates(tmp_path, monkeypatch):
    """``rollout.staleness = 1``: SIGTERM inside the rollout generated ahead after step 1's update
    (the 3rd rollout: step-0 evaluation, step 1's, step 2's ahead). The update is kept and saved
    with step 1's evaluation pending; the dropped rollout is generated again on resume with the
    resumed weights (policy lag 0 where the uninterrupted run has 1); the run then finishes."""
    from mojax.rl import trainer

    def config():
        c = _config("grpo")
        with c.unlocked():
            c.rollout.staleness = 1
        return c

    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    trainer.run(config(), str(straight))
    with monkeypatch.context() as m:
        trap = _Trap(m, 3, signal.SIGTERM)
        with pytest.raises(Preempted) as info:
            trainer.run(config(), str(stopped))
    e = info.value
    assert e.exit_code == 143 and trap.fired and trap.after == 0, (trap.rollouts, trap.after)
    assert "after the update of RL step 1 (the rollout generated ahead was dropped" in str(e)
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["1"]
    host1 = json.loads((stopped / "checkpoints" / "1" / "host" / "metadata").read_text())
    assert "pending" in json.dumps(host1) and '"inflight": []' in json.dumps(host1)
    trainer.run(config(), str(stopped))
    a, b = _lines(straight / "metrics.jsonl", True), _lines(stopped / "metrics.jsonl", True)
    assert [r["step"] for r in b] == [0, 1, 2, 3]
    assert b[:2] == a[:2]  # the initial evaluation, and step 1 (update kept, evaluation redone)
    assert [r["async/policy_lag"] for r in a[1:]] == [0.0, 1.0, 1.0]
    assert [r["async/policy_lag"] for r in b[1:]] == [0.0, 0.0, 1.0]
