"""HostState: a JSON round trip keeps every piece, and AWPO's running peak (estimator state) is
carried across steps and restored from a checkpoint exactly."""

import json
import pathlib

import numpy as np
import pytest

from mojax.pareto import NOptimalTracker, stage1_init, stage1_update
from mojax.rl.host_state import HostState
from mojax.tasks.base import RewardStats


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
    return HostState(
        step=7,
        data={"epoch": 1, "position": 3, "seed": 0},
        tracker=tracker,
        val_tracker=val,
        stage1=stage1,
        estimator={"peak": 1.75},
        reward_stats=stats,
    )


def test_json_round_trip_keeps_every_piece():
    host = _filled()
    back = HostState.from_json(host.to_json())
    assert back.to_json() == host.to_json()
    assert back.tracker.table == {"a": 2, "b": 1} and back.val_tracker.table == {"v": 4}
    np.testing.assert_array_equal(back.stage1.archive, host.stage1.archive)
    assert back.stage1.r_pareto == host.stage1.r_pareto
    assert back.estimator == {"peak": 1.75} and back.step == 7
    assert back.reward_stats["train"].as_metrics() == host.reward_stats["train"].as_metrics()
    assert back.reward_stats["eval"].reasons == {"nan": 1}
    assert back.reward_stats["validation"].scored == 0


def test_incompatible_host_state_names_what_is_missing():
    d = json.loads(_filled().to_json())
    del d["tracker"]
    with pytest.raises(ValueError, match=r"lacks \['tracker'\]"):
        HostState.from_dict(d)


def _awpo_config(steps):
    from mojax_test_utils import load_config, shrink

    c = shrink(load_config("awpo"))
    with c.unlocked():
        c.steps = steps
        c.advantage.r_max_mode = "running_peak"
        c.eval_every = c.checkpoint_every = 10
    return c


def _records(workdir: pathlib.Path):
    out = []
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        out.append({k: v for k, v in json.loads(line).items() if not k.startswith("time/")})
    return out


@pytest.mark.slow
def test_awpo_running_peak_is_carried_and_resumes_exactly(tmp_path, shared):
    from mojax.rl import trainer

    full, part = tmp_path / "full", tmp_path / "part"
    trainer.run(_awpo_config(2), str(full))
    trainer.run(_awpo_config(1), str(part))  # stops after step 1 with a checkpoint
    trainer.run(_awpo_config(2), str(part))  # resumes: peak restored from HostState
    a, b = _records(full), _records(part)
    assert [r["step"] for r in b] == [0, 1, 2]
    for ra, rb in zip(a, b):
        for key in ("advantage/awpo/r_max", "advantage/awpo/gate_frac", "advantage/awpo/w_mean"):
            assert ra.get(key) == rb.get(key), (ra["step"], key)
    peaks = [r["advantage/awpo/r_max"] for r in a[1:]]
    assert peaks == sorted(peaks), peaks  # a running peak never goes down
    host = json.loads((full / "checkpoints" / "2" / "host" / "metadata").read_text())
    assert host["estimator"]["peak"] == pytest.approx(peaks[-1])
