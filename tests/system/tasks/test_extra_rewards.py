"""A reward added to an existing task by import path (issue 16 item 3): ``config.task.extra_rewards``
appends one objective per block to the built-in calculator task, so ``rewards [P, G, M]`` grows to
``M = 3``, the objective is named in the metrics and GDPO normalises it like the task's own; a bad
import path is a ConfigError naming the block's key before anything is built."""

import json
import sys
import textwrap

import numpy as np
import pytest
from mojax_test_utils import load_config, shrink

from mojax.tasks import build_task

MODULE = "mojax_extra_reward_test_mod"

# An external reward module, outside mojax/.
REWARD_SOURCE = textwrap.dedent(
    '''
    def brevity(response, example, max_chars=40):
        """1 for an empty response, 0 from max_chars characters on."""
        return max(0.0, 1.0 - len(response) / max_chars)


    class Mentions:
        """1 when the response mentions ``word``."""

        def __init__(self, word="calc"):
            self.word = word

        def __call__(self, response, example):
            return float(self.word in response)
    '''
)


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(REWARD_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield MODULE
    sys.modules.pop(MODULE, None)


def _config(extra, weights=(0.5, 0.3, 0.2)):
    c = shrink(load_config("gdpo"))
    c.task.extra_rewards = extra
    c.advantage.weights = weights
    return c


def _brevity(max_chars=20, weight=0.1):
    block = {"fn": f"{MODULE}:brevity", "min": 0.0, "max": 1.0, "weight": weight}
    return {"r_short": dict(block, kwargs={"max_chars": max_chars})}


def test_added_reward_extends_the_task(reward_module):
    from mojax.tasks import CalculatorTask

    c = _config(_brevity())
    task = build_task(c.task)
    assert isinstance(task, CalculatorTask) and task.name == "calculator"
    assert task.objective_names == ("r_task", "r_tool", "r_short")
    assert task.scalar_weights == (0.6, 0.4, 0.1)
    assert task.external_objectives == ("r_tool",)
    splits = task.load_splits(c.task, seed=0)
    ex = splits.train[0]
    answer = f"<answer>{ex.target}</answer>"
    base = CalculatorTask().score(answer, ex)
    r, ok, _ = task.score_safe(answer, ex)
    assert ok and r.shape == (3,)
    np.testing.assert_allclose(r, [*base, max(0.0, 1.0 - len(answer) / 20)], rtol=1e-6)
    # a class: instances built once with kwargs; blocks are appended in name order
    c.task.extra_rewards = dict(
        _brevity(), a_calc={"fn": f"{MODULE}:Mentions", "kwargs": {"word": "<calc>"}}
    )
    task = build_task(c.task)
    assert task.objective_names == ("r_task", "r_tool", "a_calc", "r_short")
    assert task.score_safe("<calc>1+1</calc>", ex)[0][2] == 1.0


def test_added_reward_reaches_rewards_and_gdpo(reward_module):
    from mojax.advantages import ESTIMATORS
    from mojax.rewards import ToolEfficiency, score_rollouts

    c = _config(_brevity())
    task = build_task(c.task)
    ex = task.load_splits(c.task, seed=0).train[:2]
    # every answer wrong, no calls: only the added objective varies within a group
    responses = ["<answer>x</answer>", "<answer>xxxxxxxxxx</answer>"] * 2
    batch = score_rollouts(task, ex, responses, np.zeros(4), 2, sources=[ToolEfficiency()])
    assert batch.rewards.shape == (2, 2, 3) and batch.valid.all()
    assert "reward/r_short/mean" in batch.metrics
    np.testing.assert_allclose(batch.rewards[..., 0], 0.0)
    adv = np.asarray(
        ESTIMATORS["gdpo"](batch.rewards, batch.valid, weights=(0.5, 0.3, 0.2)).advantages
    )
    assert np.all(adv[:, 0] > 0) and np.all(adv[:, 1] < 0)  # the shorter answer is preferred


@pytest.mark.parametrize(
    "block, key, needle",
    [
        ({"fn": "no_such_module_xyz:f"}, "r_short.fn", "cannot import module 'no_such_module_xyz'"),
        ({"fn": f"{MODULE}:missing"}, "r_short.fn", "has no 'missing'"),
        ({"fn": f"{MODULE}brevity"}, "r_short.fn", "import path"),
        ({"fn": f"{MODULE}:brevity", "maxx": 2.0}, "r_short", "unknown field(s) ['maxx']"),
        ({"fn": f"{MODULE}:brevity", "min": 1.0, "max": 0.0}, "r_short", "min < max"),
        ({"min": 0.0}, "r_short.fn", "missing"),
    ],
)
def test_bad_added_reward_is_a_config_error(reward_module, block, key, needle):
    from mojax import spec as spec_lib
    from mojax.config import ConfigError

    with pytest.raises(ConfigError) as err:
        spec_lib.validate(_config({"r_short": block}))
    msg = str(err.value)
    assert f"config.task.extra_rewards.{key}" in msg and needle in msg, msg


def test_added_reward_name_and_weights_are_checked(reward_module):
    from mojax import spec as spec_lib
    from mojax.config import ConfigError

    clash = {"r_task": _brevity()["r_short"]}
    with pytest.raises(ConfigError, match=r"config.task.extra_rewards.r_task: .*already has"):
        spec_lib.validate(_config(clash))
    with pytest.raises(ConfigError, match=r"config.advantage.weights: .*'r_short'"):
        spec_lib.validate(_config(_brevity(), weights=(0.6, 0.4)))
    spec_lib.validate(_config(_brevity()))


@pytest.mark.slow
def test_added_reward_trains_two_gdpo_steps(reward_module, tmp_path):
    from mojax.rl import trainer

    c = _config(_brevity())
    c.sft.steps = 0
    trainer.run(c, str(tmp_path / "work"))
    records = [
        json.loads(x) for x in (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        for obj in ("r_task", "r_tool", "r_short"):
            assert 0.0 <= r[f"reward/{obj}/mean"] <= 1.0
        assert np.isfinite(r["loss"])
    saved = json.loads((tmp_path / "work" / "config.json").read_text())
    assert saved["task"]["extra_rewards"]["r_short"]["fn"] == f"{MODULE}:brevity"
