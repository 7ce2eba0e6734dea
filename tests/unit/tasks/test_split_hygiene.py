"""Held-out splits are disjoint from training: the calculator's default held-out problems (easy ones
included) never appear in training, and file-backed tasks carve validation from the training file
(or read ``task.val_path``), so nothing is selected on the test set."""

import pytest
from mojax_test_utils import load_config, run_spec

from mojax.rl import builders


def _exprs(examples):
    return {ex.meta["expr"] for ex in examples}


def test_calculator_held_out_problems_are_disjoint_from_training():
    spec = run_spec(load_config("paretopo"))
    task = spec.build_task()
    splits = builders.load_splits(task, spec)
    train = _exprs(splits.train)
    for held in (splits.validation, splits.test):
        assert not train & _exprs(held)
        assert {ex.meta["difficulty"] for ex in held} >= {"rule", "hard"}
    assert not _exprs(splits.validation) & _exprs(splits.test)
    # the default's sizes: 1024 distinct test problems, a 128-problem validation split
    assert len(_exprs(splits.test)) == len(splits.test) == 1024
    assert len(splits.validation) == 128


def _toolrl(shared, **over):
    c = load_config("awpo")
    with c.unlocked():
        c.task.train_path = str(shared / "data" / "toolrl" / "test.parquet")
        c.task.num_eval = 8
        for k, v in over.items():
            setattr(c.task, k, v)
    spec = run_spec(c)
    task = spec.build_task()
    return builders.load_splits(task, spec), task


def _prompts(examples):
    return [repr(ex.messages) for ex in examples]


@pytest.mark.parametrize("with_eval", [False, True])
def test_file_backed_validation_is_carved_from_training(shared, with_eval):
    path = shared / "data" / "toolrl" / "test.parquet"
    over = {"eval_path": str(path)} if with_eval else {}
    splits, task = _toolrl(shared, **over)
    rows = list(task.load(str(path)))
    assert len(splits.validation) == len(splits.test) == 8
    train, val, test = (set(_prompts(x)) for x in (splits.train, splits.validation, splits.test))
    assert not train & val and not val & test
    if with_eval:  # the test file is the eval file; validation and train come from train_path
        assert _prompts(splits.test) == _prompts(rows[:8])
        assert _prompts(splits.validation) == _prompts(rows[-8:])
        assert len(splits.train) == len(rows) - 8
    else:  # test = the last 8 rows, validation the 8 before, train the rest
        assert _prompts(splits.test) == _prompts(rows[-8:])
        assert _prompts(splits.validation) == _prompts(rows[-16:-8])
        assert not train & test and len(splits.train) == len(rows) - 16


def test_val_path_is_read_when_given(shared):
    path = shared / "data" / "toolrl" / "test.parquet"
    splits, task = _toolrl(shared, val_path=str(path), eval_path=str(path))
    rows = list(task.load(str(path)))
    assert _prompts(splits.validation) == _prompts(rows[:8]) == _prompts(splits.test)
    assert len(splits.train) == len(rows)
