"""The calculator's ``think=`` setting end to end on the host (no model): the self-built vocabulary
gains ``<think>`` / ``</think>`` as single pieces only when plans are shown (the default vocabulary is
unchanged), and the SFT rows hold each plan with the loss on, exactly as ``tokenize_demo`` writes it.
"""

import importlib.util
import pathlib

import numpy as np
from mojax_test_utils import run_spec

from mojax.tasks import build_task
from mojax.tasks import calculator as C

REPO = pathlib.Path(__file__).resolve().parents[3]


def _config(arg):
    spec = importlib.util.spec_from_file_location("cfg_saw", REPO / "configs" / "saw.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config(arg)
    with c.unlocked():
        c.task.num_train, c.task.num_eval, c.sft.num_examples = 300, 16, 300
        c.task.num_validation = 0
    return c


def _built(tmp_path, arg):
    from mojax.rl import builders

    c = _config(arg)
    task = build_task(c.task)
    splits = task.load_splits(c.task, seed=int(c.seed))
    return c, task, splits, builders.build_tokenizer(run_spec(c), task, splits, str(tmp_path))


def test_think_tags_are_single_pieces_only_when_plans_are_shown(tmp_path):
    from mojax.rl import builders

    _, _, _, plain = _built(tmp_path / "plain", None)
    c, task, splits, think = _built(tmp_path / "think", "think=0.2")
    for tag in C.THINK_TAGS:
        assert len(think.encode(tag)) == 1
        assert len(plain.encode(tag)) > 1
    assert "<think>" in "".join(builders.corpus_texts(run_spec(c), task, splits))
    for text in (C.think_plan(True), C.think_plan(False)):
        assert think.decode(think.encode(text)) == text


def test_sft_rows_hold_the_plans_with_the_loss_on(tmp_path):
    from mojax.rl import builders

    c, task, splits, tok = _built(tmp_path, "think=0.2")
    tokens, mask = builders.sft_arrays(run_spec(c), task, tok, splits.train)
    demos = C.sft_demonstrations(
        splits.train[:300],
        seed=int(c.seed),
        behaviours=dict(c.sft.behaviours),
        think_rate=0.2,
        problems=task.problems,
    )
    assert tokens.shape[0] == len(demos) == 300
    open_id = tok.encode(C.THINK_TAGS[0])[0]
    with_plan = 0
    for row, m, demo in zip(tokens, mask, demos):
        ids, want_mask = C.tokenize_demo(demo, tok, end_token_id=tok.eos_token_id)
        np.testing.assert_array_equal(row[: len(ids)], ids)
        np.testing.assert_array_equal(m[: len(ids)], want_mask)
        has = open_id in row.tolist()
        assert has == (C.think_format(demo.response) == 1.0)
        if has:
            assert m[row.tolist().index(open_id)] == 1.0
        with_plan += has
    assert 30 <= with_plan <= 90  # 20% of 300, binomial sd ~7
