"""HostState: a JSON round trip keeps every piece, AWPO's running peak (the method's carried state) is
carried across steps and restored from a checkpoint exactly, and host states of earlier checkpoints
(``stage1`` / ``estimator`` keys; the ``tracker`` / ``val_tracker`` tables before the reward sources)
still load."""

import dataclasses
import json

import numpy as np
import pytest

from mojax.pareto import NOptimalTracker, stage1_init, stage1_update
from mojax.rl.state import HostState
from mojax.tasks.framework.base import RewardStats


def _filled() -> HostState:
    calls, ok = np.array([[2, 3], [1, 0], [0, 1]]), np.array([[1, 1], [1, 0], [0, 0]], bool)
    tracker = NOptimalTracker().update(["a", "b", 3], calls, ok)
    val = NOptimalTracker().update(["v"], np.array([[4, 5]]), np.array([[1, 0]], bool))
    stage1 = stage1_init(np.array([0.2, 0.5]), gamma=0.5)
    stage1, _ = stage1_update(stage1, np.array([0.4, 0.45]))
    stats = {"train": RewardStats(), "validation": RewardStats(), "eval": RewardStats()}
    stats["train"].record(False, "ValueError")
    stats["train"].record(True)
    stats["eval"].record(False, "nan")
    tables = {"train": tracker.to_state(), "validation": val.to_state()}
    return HostState(
        step=7,
        data={"epoch": 1, "position": 3, "seed": 0},
        reward_state={"tool_efficiency": tables},
        method=stage1.to_state(),
        reward_stats=stats,
    )


def test_json_round_trip_keeps_every_piece():
    host = _filled()
    back = HostState.from_json(host.to_json())
    assert back.to_json() == host.to_json()
    tables = {
        k: NOptimalTracker.from_state(v) for k, v in back.reward_state["tool_efficiency"].items()
    }
    assert tables["train"].table == {"a": 2, "b": 1} and tables["validation"].table == {"v": 4}
    assert back.method == host.method and back.method["archive"] == [[0.2, 0.5], [0.4, 0.45]]
    assert back.step == 7
    assert back.reward_stats["train"].as_metrics() == host.reward_stats["train"].as_metrics()
    assert back.reward_stats["eval"].reasons == {"nan": 1}
    assert back.reward_stats["validation"].scored == 0


def test_host_states_of_earlier_checkpoints_load():
    d = json.loads(_filled().to_json())
    stage1 = d.pop("method")
    assert HostState.from_dict({**d, "stage1": stage1, "estimator": None}).method == stage1
    peak = {"peak": 1.75}
    assert HostState.from_dict({**d, "stage1": None, "estimator": peak}).method == peak


def test_incompatible_host_state_names_what_is_missing():
    d = json.loads(_filled().to_json())
    del d["reward_state"]
    with pytest.raises(ValueError, match=r"lacks \['reward_state'\]"):
        HostState.from_dict(d)


def _awpo_step(host, rewards, valid):
    """``mojax.rl.step.advantages`` for AWPO with ``r_max_mode="running_peak"`` (the trainer's own
    code path: the estimator's state goes in from and comes back into ``HostState``)."""
    import types

    from mojax.advantages import AWPO, MethodContext
    from mojax.rl.step import advantages

    kwargs = dict(r_max=2.0, r_max_mode="running_peak")
    spec = types.SimpleNamespace(estimator="awpo")
    run = types.SimpleNamespace(spec=spec, hooks=AWPO.make_hooks(MethodContext(AWPO, kwargs)))
    eps = types.SimpleNamespace(
        rewards=rewards,
        valid=valid,
        objective_valid=None,
        goal_weights=None,
        set_rewards=None,
        set_valid=None,
    )
    host, out, metrics = advantages(run, host, eps, key=None)
    return host, metrics


def _awpo_batches():
    """Group means of R_out fall after step 1, so a per-batch peak and a carried peak differ."""
    rng = np.random.default_rng(3)
    out = []
    for level in (1.6, 0.9, 1.1, 0.7):
        r_out = np.clip(level + 0.3 * rng.standard_normal((3, 4)), 0.0, 2.0)
        r_reason = rng.uniform(0.0, 1.0, (3, 4))
        out.append(np.stack([r_out, r_reason], -1).astype(np.float32))
    return out


def test_awpo_running_peak_is_carried_and_restored_exactly():
    valid = np.ones((3, 4), bool)
    batches = _awpo_batches()
    host, straight = HostState(), []
    for r in batches:  # uninterrupted
        host, m = _awpo_step(host, r, valid)
        straight.append(m)
    resumed_host, resumed = HostState(), []
    for t, r in enumerate(batches):
        if t == 2:  # "checkpoint" and restore in between, through JSON
            resumed_host = HostState.from_json(resumed_host.to_json())
        resumed_host, m = _awpo_step(resumed_host, r, valid)
        resumed.append(m)
    for a, b in zip(straight, resumed):
        for key in ("advantage/awpo/r_max", "advantage/awpo/gate_frac", "advantage/awpo/w_mean"):
            assert a[key] == b[key], key
    peaks = [m["advantage/awpo/r_max"] for m in straight]
    assert peaks == sorted(peaks) and peaks[-1] == peaks[0]  # carried: the first batch's peak
    assert host.method["peak"] == pytest.approx(peaks[-1])
    fresh = [_awpo_step(HostState(), r, valid)[1]["advantage/awpo/r_max"] for r in batches]
    assert fresh[1] < peaks[1]  # a per-batch peak would have dropped


def _old_layout(host: HostState, tracker: NOptimalTracker, val: NOptimalTracker) -> dict:
    """``host`` as the host state of a checkpoint written before the reward sources: the
    ``to_dict`` of that version, by hand (the N_optimal tables as ``tracker`` / ``val_tracker``)."""
    return {
        "step": host.step,
        "data": dict(host.data),
        "tracker": tracker.to_state(),
        "val_tracker": val.to_state(),
        "method": host.method,
        "reward_stats": {k: v.state_dict() for k, v in host.reward_stats.items()},
        "inflight": [],
    }


def test_a_checkpoint_of_the_old_layout_restores_into_the_reward_state():
    new = _filled()
    train = NOptimalTracker.from_state(new.reward_state["tool_efficiency"]["train"])
    val = NOptimalTracker.from_state(new.reward_state["tool_efficiency"]["validation"])
    old = json.loads(json.dumps(_old_layout(new, train, val)))  # as the checkpoint stored it
    back = HostState.from_dict(old)
    assert back == HostState.from_json(new.to_json())
    assert back.to_json() == new.to_json()
    # empty tables (a task without r_tool, or no validation yet) are no state at all
    empty = _old_layout(new, train, NOptimalTracker())
    assert set(HostState.from_dict(empty).reward_state["tool_efficiency"]) == {"train"}
    none = _old_layout(new, NOptimalTracker(), NOptimalTracker())
    assert HostState.from_dict(none).reward_state == {}


def test_in_flight_host_fields_of_the_old_layout_apply_to_the_training_state():
    from mojax.rl.async_loop import _host_fields, _with_fields

    host = _filled()
    fields = _host_fields(host)
    assert fields["reward_state"] == {
        "tool_efficiency": {"train": host.reward_state["tool_efficiency"]["train"]}
    }
    old = {k: v for k, v in fields.items() if k != "reward_state"}
    old["tracker"] = NOptimalTracker({"z": 5}).to_state()
    got = _with_fields(host, json.loads(json.dumps(old)))
    state = got.reward_state["tool_efficiency"]
    assert NOptimalTracker.from_state(state["train"]).table == {"z": 5}
    assert state["validation"] == host.reward_state["tool_efficiency"]["validation"]


def test_a_signal_in_the_evaluation_leaves_the_callers_reward_stats_as_they_were():
    """The pending checkpoint of a signal during an evaluation holds the host state before the
    step's after-step phases: the validation that ran before the signal scored into a copy, so the
    resumed run, which redoes it, counts it once (the interrupt matrix's SIGTERM cell on ParetoPO
    found it counted twice)."""
    from types import SimpleNamespace

    from mojax.infra.preemption import Interrupted
    from mojax.rl import trainer

    def fake_run(params, examples, *, stats, num_samples=1, **kw):
        for _ in examples:
            stats.record(True)
        if kw.get("states") == {}:  # the evaluation (the reward sources start fresh): a signal
            raise Interrupted(15, 0.0, 30.0)
        ones = np.ones((len(examples), num_samples), bool)
        return SimpleNamespace(valid=ones, rewards=np.ones((*ones.shape, 2))), {}

    def hook(step, state, validate):
        validate()
        return state, {}

    run = SimpleNamespace(
        spec=SimpleNamespace(
            seed=0,
            steps=4,
            eval_every=2,
            eval=SimpleNamespace(batch_prompts=0, num_samples=1, temperature=0.0),
        ),
        hooks=SimpleNamespace(after_step=hook),
        runner=SimpleNamespace(run=fake_run),
        splits=SimpleNamespace(validation=["v1", "v2"], test=["t1", "t2", "t3"]),
        task=SimpleNamespace(objective_names=("r_task", "r_tool")),
        workdir="",
    )
    host = dataclasses.replace(_filled(), step=2)  # step 2: validation, then the evaluation
    before = host.to_json()
    with pytest.raises(Interrupted):
        trainer.after_step(run, host, None)
    assert host.to_json() == before
    done, _ = trainer.after_step(run, dataclasses.replace(host, step=3), None)  # no evaluation
    assert done.reward_stats["validation"].scored == 2 and host.to_json() == before
