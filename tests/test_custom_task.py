"""Custom tasks by import path (issue 16 item 3): a Task subclass defined outside mojax/ is loaded
from ``config.task.name="module:Class"``, validated at config time, and trains 2 RL steps with a
multi-objective estimator (GDPO) through the public in-process API ``mojax.rl.trainer.run``."""

import json
import sys
import textwrap

import numpy as np
import pytest
from mojax_test_utils import load_config, shrink

MODULE = "mojax_custom_task_test_mod"

# The example of docs/custom_task.md, in a module outside mojax/.
TASK_SOURCE = textwrap.dedent(
    '''
    import random

    import numpy as np

    from mojax.tasks.base import Example, Objective, Task


    class EchoWordTask(Task):
        """Repeat a word: r_correct (1 if the word appears) and r_brief (shorter is better)."""

        name = "echo_word"
        objectives = (
            Objective("r_correct", 0.0, 1.0, success=True),
            Objective("r_brief", 0.0, 1.0),
        )
        scalar_weights = (0.8, 0.2)

        def __init__(self, words=("apple", "river", "stone"), max_chars=40):
            self.words = tuple(words)
            self.max_chars = int(max_chars)

        def load(self, split, num, seed=0):
            rng = random.Random(f"{seed}/{split}")
            out = []
            for i in range(num):
                w = rng.choice(self.words)
                msg = ({"role": "user", "content": f"Say the word {w}."},)
                out.append(Example(id=f"echo/{split}/{i}", messages=msg, target=w))
            return out

        def score(self, response, example):
            correct = float(example.target in response)
            brief = max(0.0, 1.0 - len(response) / self.max_chars)
            return np.array([correct, brief], np.float32)
    '''
)


@pytest.fixture
def custom_module(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(TASK_SOURCE)
    (tmp_path / "not_a_task_mod.py").write_text("class Plain:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{MODULE}:EchoWordTask"
    for name in (MODULE, "not_a_task_mod"):
        sys.modules.pop(name, None)


def _config(task_name, **kwargs):
    c = shrink(load_config("gdpo"))
    c.task.name = task_name
    c.task.kwargs = kwargs
    c.sft.steps = 0  # a custom task brings no SFT demonstrations
    c.task.num_train = 16
    return c


def test_custom_task_loads_by_import_path(custom_module):
    from mojax.rl import builders

    c = _config(custom_module, words=["moon"], max_chars=10)
    task = builders.build_task(c.task)
    assert type(task).__name__ == "EchoWordTask" and task.words == ("moon",)
    assert task.objective_names == ("r_correct", "r_brief")
    splits = builders.load_splits(task, c.task, seed=3)
    assert len(splits.train) == 16 and len(splits.validation) == len(splits.test) == 4
    assert {ex.target for ex in splits.train} == {"moon"}
    # score: the task's own rule, computed here independently
    r = task.score_safe("moon", splits.train[0])[0]
    np.testing.assert_allclose(r, [1.0, 1.0 - 4 / 10])


@pytest.mark.parametrize(
    "name, needle",
    [
        ("no_such_module_xyz:Task", "cannot import module 'no_such_module_xyz'"),
        ("not_a_task_mod:Plain", "not a subclass of mojax.tasks.base.Task"),
        ("not_a_task_mod:Missing", "has no 'Missing'"),
        ("calculatr", "not allowed"),
    ],
)
def test_bad_custom_task_is_a_config_error(custom_module, name, needle):
    from mojax.config import ConfigError
    from mojax.rl import spec as spec_lib

    with pytest.raises(ConfigError) as err:
        spec_lib.validate(_config(name))
    msg = str(err.value)
    assert "config.task.name" in msg and needle in msg, msg


def test_custom_task_bad_kwargs_name_the_key(custom_module):
    from mojax.config import ConfigError
    from mojax.rl import spec as spec_lib

    with pytest.raises((ConfigError, ValueError)) as err:
        spec_lib.validate(_config(custom_module, colour="red"))
    assert "config.task.kwargs" in str(err.value)


@pytest.mark.slow
def test_custom_task_trains_two_gdpo_steps(custom_module, tmp_path):
    from mojax.rl import trainer

    c = _config(custom_module)
    assert c.estimator == "gdpo" and c.steps == 2
    trainer.run(c, str(tmp_path / "work"))
    lines = (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        for obj in ("r_correct", "r_brief"):
            assert np.isfinite(r[f"reward/{obj}/mean"])
            assert 0.0 <= r[f"reward/{obj}/mean"] <= 1.0
        assert np.isfinite(r["loss"])
    assert (tmp_path / "work" / "done").exists()
