"""The multi-turn rollout on the continuous-batching sampler gives the static sampler's rollout.

Same scripted scene as ``test_rollout_agent`` (the tiny Qwen biased toward calculator calls, the
real Calculator), sampled at temperature 1: each row draws from its own random stream (call key,
row id, response position), so the rows' tokens, tool calls and observations do not depend on the
slot a row decodes in. Reference: the same rollout on the static in-graph sampler; the log-probs
agree to fp32 rounding (1e-5: XLA CPU's matmuls round differently for different row counts, and a
resumed row is prefilled from its whole context here instead of appended chunk by chunk).
"""

import dataclasses
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from mojax.rollout import RolloutSpec, run_rollout
from mojax.sampling.continuous.engine import ContinuousSampler

sys.path.insert(0, str(Path(__file__).parent))
from test_rollout_agent import SETTINGS, prompts_for, scripted, tok  # noqa: E402,F401

from mojax.rollout.tools import Calculator  # noqa: E402
from mojax.tasks.calculator import CalculatorTask, Problem  # noqa: E402


def _turns(result):
    """Each row's ``Turn`` records without the tools' wall times."""
    return [[{**dataclasses.asdict(t), "duration_s": 0} for t in turns] for turns in result.turns]


def assert_same_rollout(got, ref):
    for field in ("tokens", "loss_mask", "lengths", "n_calls"):
        np.testing.assert_array_equal(getattr(got, field), getattr(ref, field))
    np.testing.assert_allclose(got.logprobs, ref.logprobs, atol=1e-5, rtol=0)
    assert got.finish_reason == ref.finish_reason and got.texts == ref.texts
    assert _turns(got) == _turns(ref)


@pytest.fixture(scope="module")
def scene(tok):  # noqa: F811
    """Rows scripted to call the calculator once or twice; the model's vocabulary covers every id
    the tokenizer gives (sampled text can tokenize into any piece)."""
    task, calc = CalculatorTask(), Calculator()
    end = [tok.eos_token_id]
    problems = [Problem(12, "*", 34, "hard"), Problem(23, "-", 9, "medium")]
    problems += [Problem(5, "+", 7, "easy")]
    scripts = [
        ["<calc>12*34</calc>", tok.encode("<answer>408</answer>") + end],
        ["<calc>23-9</calc>", "<calc>14*2</calc>", tok.encode("<answer>28</answer>") + end],
        [tok.encode("<answer>12</answer>") + end],
    ]
    prompts = prompts_for(tok, task, problems)
    model, prompts, _ = scripted(tok, task, prompts, scripts, calc.run, vocab=tok.vocab_size)
    return task, calc, model, prompts


@pytest.mark.parametrize(
    "num_slots, cache", [(2, {}), (5, {}), (2, dict(kv_cache="paged", page_size=4, num_pages=40))]
)
def test_continuous_rollout_equals_the_static_rollout(tok, scene, num_slots, cache):  # noqa: F811
    """Dense cache, and a paged one (4-token pages, a 40-page pool: rows cross pages)."""
    task, calc, model, prompts = scene
    spec = RolloutSpec.create(tok, task, temperature=1.0, **SETTINGS)
    key = jax.random.key(4)
    ref = run_rollout(spec, model, tok, task, prompts, key=key, tool=calc, num_samples=2)
    sampler = ContinuousSampler.of(model, slots=num_slots, **cache)
    got = run_rollout(
        spec,
        sampler,
        tok,
        task,
        prompts,
        key=key,
        tool=calc,
        num_samples=2,
    )
    assert_same_rollout(got, ref)
    assert ref.counters["tool_calls"] >= 1 and ref.counters["decode_calls"] >= 2  # a tool turn
    assert got.counters["tool_calls"] == ref.counters["tool_calls"]
    if cache:
        assert sampler.pages.pool.all_free() and sampler.pages.pool.peak <= 40


class _SlowFirstCall:
    """The calculator, with its first expression's answer 0.3 s late (later calls come back
    first)."""

    def __init__(self, calc):
        self.calc = calc

    def run(self, text):
        if "12*34" in text:
            time.sleep(0.3)
        return self.calc.run(text)


def test_tool_rows_enter_the_running_decode(tok, scene, monkeypatch):  # noqa: F811
    """Two slots, six rows: a row whose observation is ready re-enters a free slot, ahead of the
    first-turn rows still queued, while the other rows decode on (no round ends before it); a
    late tool answer changes nothing in the rollout."""
    from mojax.sampling.continuous import session as continuous_session

    task, calc, model, prompts = scene
    spec = RolloutSpec.create(tok, task, temperature=1.0, **SETTINGS)
    key = jax.random.key(4)
    ref = run_rollout(spec, model, tok, task, prompts, key=key, tool=calc, num_samples=2)
    seen = []  # per requeue: (rows requeued, first-turn rows still queued, rows in slots)
    real = continuous_session.ContinuousSession.requeue

    def spy(self, rows, obs, max_new, **kw):
        waiting = [r for r in self.work.queue if not self.state.length[r]]
        seen.append((sorted(rows), waiting, int((self.held >= 0).sum())))
        real(self, rows, obs, max_new, **kw)
        assert self.work.queue[: len(rows)] == sorted(rows)  # at the queue's front

    monkeypatch.setattr(continuous_session.ContinuousSession, "requeue", spy)
    sampler = ContinuousSampler.of(model, slots=2)
    slow = _SlowFirstCall(calc)
    got = run_rollout(spec, sampler, tok, task, prompts, key=key, tool=slow, num_samples=2)
    assert_same_rollout(got, ref)
    assert seen, "no row was requeued"
    early = [s for s in seen if s[1]]  # requeued while first-turn rows still wait for a slot
    assert early, f"every tool row waited for the first turns to end: {seen}"
    assert got.counters["decode_calls"] == 1 and got.counters["segments"] > 1
