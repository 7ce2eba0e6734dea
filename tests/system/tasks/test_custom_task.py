"""Custom tasks by import path (issue 16 item 3): a Task subclass defined outside mojax/ is loaded
from ``config.task.name="module:Class"``, validated at config time, brings its own tool
(``Task.make_tool``, called on a multi-turn tool stop) and trains 2 RL steps with a
multi-objective estimator (GDPO) through the public in-process API ``mojax.rl.trainer.run``."""

import json
import sys
import textwrap

import numpy as np
import pytest
from mojax_test_utils import load_config, run_spec, shrink

from mojax.tasks import build_task, task_class

MODULE = "mojax_custom_task_test_mod"

# The example of docs/custom_task.md, in a module outside mojax/.
TASK_SOURCE = textwrap.dedent(
    '''
    import random

    import numpy as np

    from mojax.rollout.tools import ToolResult
    from mojax.tasks.framework.base import Example, Objective, Task


    class SpellTool:
        """Spells a text out letter by letter; appends each call to ``log_path`` when set."""

        def __init__(self, log_path=""):
            self.log_path = log_path

        def __call__(self, text):
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(repr(text) + "\\n")
            return ToolResult(output=" ".join(text.strip()[:20]))


    class EchoWordTask(Task):
        """Repeat a word: r_correct (1 if the word appears) and r_brief (shorter is better).

        Tool: ``<spell>text</spell>`` is answered with ``<out>t e x t</out>``.
        """

        name = "echo_word"
        objectives = (
            Objective("r_correct", 0.0, 1.0, success=True),
            Objective("r_brief", 0.0, 1.0),
        )
        scalar_weights = (0.8, 0.2)
        tool_stop = "</spell>"

        def __init__(self, words=("apple", "river", "stone"), max_chars=40, log_path=""):
            self.words = tuple(words)
            self.max_chars = int(max_chars)
            self.log_path = log_path

        def load(self, split, num, seed=0):
            rng = random.Random(f"{seed}/{split}")
            out = []
            for i in range(num):
                w = rng.choice(self.words)
                text = f"Say the word {w}. <spell>{w}</spell> spells it."
                msg = ({"role": "user", "content": text},)
                out.append(Example(id=f"echo/{split}/{i}", messages=msg, target=w))
            return out

        def score(self, response, example):
            correct = float(example.target in response)
            brief = max(0.0, 1.0 - len(response) / self.max_chars)
            return np.array([correct, brief], np.float32)

        # ---- the tool: a turn that ends on tool_stop is a call
        def make_tool(self, rollout_cfg, splits):
            return SpellTool(self.log_path)

        def parse_tool_call(self, text):
            return text.rsplit("<spell>", 1)[-1].removesuffix("</spell>")

        def format_observation(self, result_text):
            return f"<out>{result_text}</out>"
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

    c = _config(custom_module, words=["moon"], max_chars=10)
    task = build_task(c.task)
    assert type(task).__name__ == "EchoWordTask" and task.words == ("moon",)
    assert task.objective_names == ("r_correct", "r_brief")
    splits = task.load_splits(c.task, seed=3)
    assert len(splits.train) == 16 and len(splits.validation) == len(splits.test) == 4
    assert {ex.target for ex in splits.train} == {"moon"}
    # score: the task's own rule, computed here independently
    r = task.score_safe("moon", splits.train[0])[0]
    np.testing.assert_allclose(r, [1.0, 1.0 - 4 / 10])


def test_custom_task_brings_its_own_tool(custom_module, tmp_path):
    from mojax.rl import builders
    from mojax.rollout.tools import Calculator, ToolResult

    log = tmp_path / "calls.txt"
    c = _config(custom_module, log_path=str(log))
    spec = run_spec(c)
    task = build_task(c.task)
    splits = builders.load_splits(task, spec)
    assert splits.task is task
    tool = builders.build_tool(task, spec, splits)
    assert type(tool).__name__ == "SpellTool"
    assert tool("moon") == ToolResult(output="m o o n")
    assert log.read_text().splitlines() == ["'moon'"]
    # built-in tasks bring their tools the same way; a task without make_tool has none
    calc = build_task(load_config("grpo").task)
    assert isinstance(builders.build_tool(calc, spec, None), Calculator)
    assert builders.build_tool(task_class("musique")(), spec, None) is None
    # the self-built vocabulary holds the custom tool stop as one piece (an exact stop)
    tok = builders.build_tokenizer(run_spec(c), task, splits, str(tmp_path))
    assert len(tok.encode("</spell>")) == 1


@pytest.mark.parametrize(
    "name, needle",
    [
        ("no_such_module_xyz:Task", "cannot import module 'no_such_module_xyz'"),
        ("not_a_task_mod:Plain", "not a subclass of mojax.tasks.framework.base.Task"),
        ("not_a_task_mod:Missing", "has no 'Missing'"),
        ("calculatr", "not allowed"),
    ],
)
def test_bad_custom_task_is_a_config_error(custom_module, name, needle):
    from mojax import spec as spec_lib
    from mojax.config import ConfigError

    with pytest.raises(ConfigError) as err:
        spec_lib.validate(_config(name))
    msg = str(err.value)
    assert "config.task.name" in msg and needle in msg, msg


def test_custom_task_bad_kwargs_name_the_key(custom_module):
    from mojax import spec as spec_lib
    from mojax.config import ConfigError

    with pytest.raises((ConfigError, ValueError)) as err:
        spec_lib.validate(_config(custom_module, colour="red"))
    assert "config.task.kwargs" in str(err.value)


@pytest.mark.slow
def test_custom_task_trains_two_gdpo_steps(custom_module, tmp_path):
    from mojax.rl import trainer

    log = tmp_path / "calls.txt"
    c = _config(custom_module, log_path=str(log))
    # 16 rollouts a step of 48-token turns, sampled near-uniformly (temperature 2): the random
    # policy ends several turns on the one-piece tool stop
    c.rollout.prompts_per_step = c.rollout.num_samples = 4
    c.rollout.max_new_tokens, c.rollout.max_response_len, c.rollout.temperature = 48, 96, 2.0
    assert c.estimator == "gdpo" and c.steps == 2 and c.rollout.max_turns >= 2
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
    # the task's own tool ran on the multi-turn tool stops of the training rollouts
    train_calls = sum(r["rollout/tool_calls_mean"] * 16 for r in records[1:])
    assert train_calls >= 1
    assert len(log.read_text().splitlines()) >= round(train_calls)


def test_a_task_by_import_path_takes_the_built_in_path(tmp_path):
    """The calculator named by import path builds exactly what ``task=calculator`` builds: the
    recipe defaults, the splits, the tool, the SFT demonstrations and the self-built vocabulary
    (nothing outside ``mojax/tasks`` branches on the name)."""
    from mojax.rl import builders
    from mojax.spec.show import flatten

    path = "mojax.tasks.calculator:CalculatorTask"
    built = {}
    for name, arg in (("calculator", None), ("path", f"task={path}")):
        c = load_config("grpo", arg)
        with c.unlocked():
            c.task.num_train, c.task.num_eval, c.sft.num_examples = 64, 4, 64
            c.task.num_validation = 0
        spec = run_spec(c)
        task = spec.build_task()
        splits = builders.load_splits(task, spec)
        tok = builders.build_tokenizer(spec, task, splits, str(tmp_path / name))
        pieces = [tok.sp.id_to_piece(i) for i in range(tok.sp.get_piece_size())]
        tokens, mask = builders.sft_arrays(spec, task, tok, splits.train)
        tool = builders.build_tool(task, spec, splits)
        built[name] = (flatten(c), splits, pieces, tokens, mask, type(tool))
    (ca, sa, pa, ta, ma, ka), (cb, sb, pb, tb, mb, kb) = built["calculator"], built["path"]
    assert {k for k in ca if ca[k] != cb[k]} == {"task.name"} and cb["task.name"] == path
    for split in ("train", "validation", "test"):
        assert [x.id for x in getattr(sa, split)] == [x.id for x in getattr(sb, split)]
    assert pa == pb and ka is kb
    np.testing.assert_array_equal(ta, tb)
    np.testing.assert_array_equal(ma, mb)
