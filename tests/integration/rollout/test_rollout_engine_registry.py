"""A third engine plugs in through the registry alone (``mojax.sampling.protocol.SAMPLERS``).

The engine is written here: ``ReplaySampler`` replays fixed turns (token lists) per row instead of
decoding a model, behind the protocol's ``open`` / ``Session`` (``step``, ``requeue``, ``fits``,
``view``, ``output``). It is registered as ``sampler.engine='replay'`` by one registry entry; the
run's config check accepts the name, ``rl.builders.build_sampler`` builds it, and
``run_rollout`` drives it with the real calculator tool, without a change to ``rl/`` or
``rollout/``. Reference: the transcript built independently from the script and the real
Calculator (``test_rollout_agent.build``): the policy turns, each call's real observation
(loss-masked) in between.
"""

import dataclasses
import sys
import types
from pathlib import Path
from typing import ClassVar

import jax
import numpy as np
import pytest

from mojax import distributed
from mojax.config import option, spec_checker
from mojax.rollout import RolloutSpec, run_rollout
from mojax.rollout.tools import Calculator
from mojax.sampling import protocol
from mojax.tasks.calculator import CalculatorTask, Problem

sys.path.insert(0, str(Path(__file__).parent))
from test_rollout_agent import SETTINGS, build, prompts_for, tok  # noqa: E402,F401


class ReplaySession:
    """Rows that replay their scripted turns: one turn per ``step`` for every queued row."""

    rounds = False  # requeued rows are taken one by one

    def __init__(self, scripts, requests: protocol.Requests):
        g, r = requests.num_samples, requests.max_response_len
        b = len(requests.prompt_tokens) * g
        self.layout = distributed.group_layout(b, g)  # one process: every row
        self.scripts = [scripts[i // g] for i in range(b)]  # a prompt's G samples alike
        self.turn = np.zeros((b,), np.int64)
        self.stops = set(int(i) for i in requests.stop_token_ids)
        self.tokens = np.full((b, r), requests.pad_id, np.int32)
        self.logprobs = np.zeros((b, r), np.float32)
        self.sampled = np.zeros((b, r), bool)
        self.length = np.zeros((b,), np.int32)
        self.reason = np.full((b,), protocol.RUNNING, np.int32)
        self.max_new = np.full((b,), requests.max_new_tokens, np.int64)
        self.queue, self.steps = list(range(b)), 0

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def step(self, more_coming: bool = False) -> np.ndarray:
        rows, self.queue = sorted(self.queue), []
        for i in rows:
            turn = self.scripts[i][self.turn[i]][: self.max_new[i]]
            n, m = int(self.length[i]), len(turn)
            self.tokens[i, n : n + m], self.logprobs[i, n : n + m] = turn, -0.5
            self.sampled[i, n : n + m] = True
            self.length[i] = n + m
            last = turn[-1] if m else -1
            self.reason[i] = protocol.STOP if last in self.stops else protocol.LENGTH
            self.turn[i] += 1
        self.steps += 1
        return np.asarray(rows, np.int64)

    def requeue(self, rows, obs, max_new) -> None:
        for i, ids, budget in zip(rows, obs, max_new, strict=True):
            n, m = int(self.length[i]), len(ids)
            self.tokens[i, n : n + m] = ids
            self.length[i], self.reason[i], self.max_new[i] = n + m, protocol.RUNNING, budget
            self.queue.append(int(i))

    def fits(self, rows, appended) -> np.ndarray:
        room = self.tokens.shape[1]  # no cache: the response buffer is the room
        return self.length[np.asarray(rows, np.int64)] + np.asarray(appended, np.int64) + 1 <= room

    def view(self) -> protocol.Progress:
        return protocol.Progress(self.tokens, self.length, self.reason)

    def output(self) -> protocol.SamplingOutput:
        return protocol.SamplingOutput(
            self.tokens, self.logprobs, self.sampled, self.length, self.reason, state=None
        )

    def counters(self) -> dict[str, int]:
        return {"decode_calls": self.steps}


class ReplaySampler:
    """The toy engine: ``open`` replays ``scripts[p]`` (token lists, one per turn) for prompt p."""

    def __init__(self, scripts):
        self.scripts, self.weights, self.sampling = scripts, None, None

    def update_weights(self, params) -> None:
        self.weights = params

    def open(self, requests, sampling) -> ReplaySession:
        self.sampling = dict(sampling)
        return ReplaySession(self.scripts, requests)


@pytest.fixture
def replay(tok, monkeypatch):  # noqa: F811
    """``sampler.engine='replay'``: one registry entry (a build function, as a module's)."""
    task = CalculatorTask()
    problems = [Problem(12, "*", 34, "hard"), Problem(5, "+", 7, "easy")]
    end = [tok.eos_token_id]
    segments = [
        ["<calc>12*34</calc>", tok.encode("<answer>408</answer>") + end],
        [tok.encode("<answer>12</answer>") + end],
    ]
    scripts = [[tok.encode(s) if isinstance(s, str) else s for s in row] for row in segments]
    built = {}

    def build_replay(model_config, rollout, options, mesh, rules):
        built["args"] = (model_config, rollout.max_turns, options, mesh, rules)
        return ReplaySampler(scripts)

    engine = types.SimpleNamespace(build=build_replay, CONFIG=ReplayConfig)  # as a module
    monkeypatch.setitem(protocol.SAMPLERS, "replay", engine)
    return task, prompts_for(tok, task, problems), segments, built


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The replaying engine's own config section, ``config.replay`` (as ``config.continuous``)."""

    SECTION: ClassVar[str] = "replay"
    speed: int = option(1, help="segments per step (read by nothing: the section's plumbing)")

    def __post_init__(self):
        c = spec_checker("replay", self)
        c.in_range("replay.speed", 1)
        c.raise_if_any()


def test_a_registered_engine_is_built_and_driven(tok, replay):  # noqa: F811
    from mojax.rl import builders

    task, prompts, segments, built = replay
    options = ReplayConfig(speed=3)
    spec_like = types.SimpleNamespace(
        sampler=types.SimpleNamespace(engine="replay"),
        rollout=types.SimpleNamespace(max_turns=2),
        engine_options=options,
    )
    sampler = builders.build_sampler(spec_like, "model-config", None, ())
    assert isinstance(sampler, ReplaySampler)
    assert built["args"] == ("model-config", 2, options, None, ())
    spec = RolloutSpec.create(tok, task, temperature=1.0, **SETTINGS)
    calc = Calculator()
    sampler.update_weights({"w": 1})
    got = run_rollout(spec, sampler, tok, task, prompts, key=jax.random.key(0), tool=calc)
    for row, (prompt, script) in enumerate(zip(prompts, segments, strict=True)):
        seq, policy, spans = build(tok, task, prompt, script, calc.run)
        n = int(got.lengths[row])
        assert got.tokens[row, :n].tolist() == seq[len(prompt) :]
        np.testing.assert_array_equal(got.loss_mask[row, :n], policy[len(prompt) :])
        for a, b in spans:  # observations: loss-masked, log-prob 0
            assert not got.logprobs[row, a:b].any()
    assert got.finish_reason == ["stop", "stop"]
    assert got.n_calls.tolist() == [1, 0]
    assert [t.ended_by for t in got.turns[0]] == ["tool", "stop"]
    assert got.counters["decode_calls"] == 2 and got.counters["tool_calls"] == 1
    assert sampler.sampling["temperature"] == 1.0  # the rollout's sampling settings reach it


def test_the_config_check_reads_the_registry(replay):
    """``sampler.engine`` is checked against ``protocol.SAMPLERS``: a registered engine passes,
    an unknown one is named in one clear error."""
    from mojax_test_utils import load_config, run_spec

    c = load_config("grpo")  # after the registration: the base config holds config.replay
    assert c.replay.speed == 1
    with c.unlocked():
        c.sampler.engine, c.replay.speed = "replay", 3
    spec = run_spec(c)
    assert spec.sampler.engine == "replay" and spec.engine_options == ReplayConfig(speed=3)
    assert spec.engines["replay"] == ReplayConfig(speed=3)
    with c.unlocked():
        c.replay.speed = 0
    with pytest.raises(ValueError, match=r"config\.replay\.speed: 0 is out of range"):
        run_spec(c)  # the engine's section checks its own fields
    with c.unlocked():
        c.sampler.engine, c.replay.speed = "static", 3
    with pytest.raises(ValueError, match=r"config\.replay\.speed: 3 is set, but sampler"):
        run_spec(c)  # a value in the section of an engine that does not run is refused
    with c.unlocked():
        c.sampler.engine, c.replay.speed = "replay2", 1
    with pytest.raises(ValueError, match=r"sampler\.engine.*'replay2'"):
        run_spec(c)
    with pytest.raises(ValueError, match=r"config\.sampler\.engine='replay2' is not one of"):
        protocol.build("replay2", None, None, None, None, ())


def test_the_model_judge_takes_a_sampler(tok):  # noqa: F811
    """AWPO's model judge decodes through the protocol: on the replaying engine its verdict is
    the replayed text (up to its EOS), row by row, and ``score`` parses it."""
    from mojax.tasks.framework import judge as judge_lib

    end = [tok.eos_token_id]
    verdicts = ["Tier: II", "Tier: V"]
    scripts = [[tok.encode(v) + end] for v in verdicts]
    sampler = ReplaySampler(scripts)
    judge = judge_lib.ModelJudge(sampler, tok, max_new_tokens=16)
    rows = (("q1", "r1", "ref1"), ("q2", "r2", "ref2"))
    texts = [tok.decode(tok.encode(v)) for v in verdicts]
    assert judge.verdicts(*zip(*rows)) == texts and sampler.sampling == {"temperature": 0.0}
    assert judge.score_batch(*zip(*rows)) == [0.8, 0.2]  # Tier II, Tier V
