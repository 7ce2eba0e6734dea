"""Task interface: safe scoring (exceptions, NaN/inf counted, never a crash), batches, multi-answer
parsing, loaders, and prompts through the real Qwen2 chat template for every task."""

import json
import subprocess
import sys

import numpy as np
import pytest

import mojax.tasks as tasks
from mojax.tasks.framework import data, multi_answer
from mojax.tasks.framework.base import Example, Objective, RewardStats, Task


class _Toy(Task):
    name = "toy"
    objectives = (
        Objective("a", 0.0, 1.0, success=True),
        Objective("b", -1.0, 1.0),
        Objective("ext", 0.0, 1.0, external=True),
    )
    scalar_weights = (0.5, 0.5, 0.0)

    def score(self, response, example):
        if response == "raise":
            return 1 / 0
        if response == "key":
            return {}["missing"]
        return {  # "unknown" raises KeyError too
            "ok": [1.0, -0.5, 0.0],
            "nan": [float("nan"), 0, 0],
            "inf": [0, float("-inf"), 0],
            "shape": [1.0, 0.0],
            "range": [1.0, 2.0, 0.0],
        }[response]

    def parseable(self, answer, example):
        return answer != "bad"


EX = Example("e", ({"role": "user", "content": "q"},), None)


def test_safe_scoring_marks_invalid_and_counts_reasons():
    task, stats = _Toy(), RewardStats()
    responses = ["ok", "raise", "nan", "inf", "shape", "range", "key", "ok", "unknown"]
    batch = task.score_batch(responses, [EX] * len(responses), stats=stats)
    assert batch.rewards.dtype == np.float32 and batch.rewards.shape == (9, 3)
    assert batch.valid.tolist() == [True, False, False, False, False, False, False, True, False]
    np.testing.assert_array_equal(batch.rewards[0], [1.0, -0.5, 0.0])
    assert not batch.rewards[~batch.valid].any() and np.isfinite(batch.rewards).all()
    assert stats.scored == 9 and stats.invalid == 7
    assert dict(stats.reasons) == {
        "ZeroDivisionError": 1,
        "nan": 1,
        "inf": 1,
        "shape": 1,
        "out_of_range:b": 1,
        "KeyError": 2,
    }
    m = stats.as_metrics()
    assert m["reward_invalid/count"] == 7 and m["reward_invalid/KeyError"] == 2
    assert RewardStats.from_state_dict(json.loads(json.dumps(stats.state_dict()))) == stats
    assert batch.external == ("ext",)
    assert task.is_success(batch.rewards).tolist() == [True] + [False] * 6 + [True, False]
    np.testing.assert_allclose(task.scalar(batch.rewards[:1]), [0.25])


def test_external_objectives_are_filled_and_checked():
    task = _Toy()
    batch = task.score_batch(
        ["ok", "ok", "ok", "raise"], [EX] * 4, external={"ext": [0.5, np.nan, 2.0, 0.3]}
    )
    assert batch.valid.tolist() == [True, False, True, False]
    np.testing.assert_allclose(batch.rewards[:, 2], [0.5, 0.0, 1.0, 0.0])  # 2.0 clipped to max
    assert batch.stats.reasons["external_nonfinite:ext"] == 1 and batch.external == ()
    with pytest.raises(KeyError, match="no objective 'r_tool'"):
        task.score_batch(["ok"], [EX], external={"r_tool": [1.0]})
    with pytest.raises(ValueError, match=r"external\['ext'\] must have shape \[2\]"):
        task.score_batch(["ok", "ok"], [EX] * 2, external={"ext": [1.0]})
    with pytest.raises(ValueError, match="same length"):
        task.score_batch(["ok"], [EX, EX])


def test_objective_validation():
    with pytest.raises(ValueError, match="'x'"):
        Objective("x", 1.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        Objective("x", 0.0, float("inf"))


def test_parse_blocks_padding_and_dedup():
    text = (
        "<response_2> b </response_2><response_1>a</response_1><response_3>a</response_3>"
        "<response_4>unclosed <response_6>x</response_6>"
    )
    blocks = multi_answer.parse_blocks(text, 5)
    assert [b.text for b in blocks] == ["a", " b ", "a", None, None]
    assert [b.reason for b in blocks] == [None, None, None, "unclosed", "missing"]
    blocks = multi_answer.parse_blocks(text, 3, dedup=True)
    assert [b.reason for b in blocks] == [None, None, "duplicate"]
    assert multi_answer.parse_blocks("<route_1>UP</route_1>", 1, tag="route")[0].text == "UP"
    with pytest.raises(ValueError, match="num_answers"):
        multi_answer.parse_blocks("", 0)
    with pytest.raises(ValueError, match="tag"):
        multi_answer.parse_blocks("", 1, tag="a>b")


def test_score_set_and_batch():
    task = _Toy()
    text = "<response_1>ok</response_1><response_2>bad</response_2><response_3>nan</response_3>"
    out = task.score_set_batch([text, None], [EX, EX], 4)
    assert out.set_rewards.shape == (2, 4, 3) and out.set_valid.shape == (2, 4)
    assert out.set_valid.tolist() == [[True, False, False, False], [False] * 4]
    assert out.stats.reasons == {"unparseable": 1, "nan": 1, "missing": 5}


def test_a_multi_answer_batch_is_scored_into_sets_and_their_means():
    """``mojax.rewards.score_rollouts`` with ``num_answers``: ``set_rewards [P, G, S, M]`` as the
    task scores each answer, and per row the mean over its valid answers (a numpy loop from the
    definition), valid where any answer is; the sources' states pass through."""
    from mojax.rewards import score_rollouts

    task, s = _Toy(), 3
    blocks = ["ok", "bad", "nan", "inf", "range"]  # "ok" and "inf" parse; "bad" does not
    texts = [
        "".join(f"<response_{k + 1}>{blocks[(i + k) % 5]}</response_{k + 1}>" for k in range(s))
        for i in range(6)
    ]
    texts[5] = "no blocks"
    rb = score_rollouts(task, [EX, EX], texts, [0] * 6, 3, states={"x": 1}, num_answers=s)
    ref = task.score_set_batch(texts, [EX] * 6, s)
    assert rb.set_rewards.shape == (2, 3, s, 3) and rb.set_valid.shape == (2, 3, s)
    np.testing.assert_array_equal(rb.set_rewards.reshape(6, s, 3), ref.set_rewards)
    np.testing.assert_array_equal(rb.set_valid.reshape(6, s), ref.set_valid)
    for i in range(6):
        ok = [k for k in range(s) if ref.set_valid[i, k]]
        want = np.mean([ref.set_rewards[i, k] for k in ok], 0) if ok else np.zeros(3)
        np.testing.assert_allclose(rb.rewards.reshape(6, 3)[i], want, rtol=1e-6)
        assert rb.valid.reshape(6)[i] == bool(ok)
    assert rb.valid.reshape(6).tolist()[5] is False and rb.states == {"x": 1}
    assert rb.metrics["reward/valid_answer_fraction"] == pytest.approx(ref.set_valid.mean())


def test_loaders_name_the_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(ValueError, match=r"x.jsonl:3: invalid JSON"):
        data.read_jsonl(p)
    (tmp_path / "l.jsonl").write_text("[1]\n")
    with pytest.raises(ValueError, match="l.jsonl:1: expected a JSON object"):
        data.read_jsonl(tmp_path / "l.jsonl")
    (tmp_path / "d.json").write_text(json.dumps({"data": [{"a": 1}]}))
    assert data.read_records(tmp_path / "d.json") == [{"a": 1}]
    (tmp_path / "b.json").write_text("{")
    with pytest.raises(ValueError, match="b.json: invalid JSON"):
        data.read_json(tmp_path / "b.json")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        data.read_records(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(ValueError, match="unknown data format"):
        data.read_records(tmp_path / "x.csv")


def test_import_has_no_side_effects():
    code = (
        "import sys, mojax.tasks as t; t.ToolRLTask; t.MazeTask; t.CalculatorTask; "
        "assert 'jax' not in sys.modules and 'math_verify' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


@pytest.fixture(scope="module")
def tok(qwen2_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen2_tokenizer_dir)


def test_every_task_builds_prompts_with_the_real_chat_template(shared, tok):
    from mojax.tasks.musique import MuSiQueTask

    d = shared / "data"
    para = [{"idx": i, "title": "t", "paragraph_text": "p"} for i in range(20)]
    cases = [
        (tasks.ToolRLTask(), tasks.ToolRLTask.load(d / "toolrl/test.parquet")[0]),
        (tasks.MathTask(), tasks.MathTask().load(d / "math/aime25.jsonl")[0]),
        (tasks.QATask(), tasks.QATask().load(d / "qa/bamboogle.jsonl")[0]),
        (
            MuSiQueTask(),
            MuSiQueTask.example(
                {
                    "paragraphs": para,
                    "question": "q?",
                    "answer": "a",
                    "question_decomposition": [{"paragraph_support_idx": 1}],
                },
                "m",
            ),
        ),
        (tasks.MazeTask(), tasks.MazeTask.load("test", 1)[0]),
        (tasks.CalculatorTask(), tasks.CalculatorTask().load("test", 1)[0]),
    ]
    for task, ex in cases:
        text = task.build_prompt(ex, tok)
        msgs = task.messages(ex)
        want = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        assert text == want and text.endswith("<|im_start|>assistant\n")
        for m in msgs:
            assert f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>" in text
    calc = cases[-1][1]
    assert tasks.CalculatorTask().build_prompt(calc, tok).count("<|im_start|>user\nCompute ") == 1
    math_text = cases[1][0].build_prompt(cases[1][1], tok)
    assert math_text.startswith("<|im_start|>system\nPlease reason step by step")


def test_calculator_sft_tokens_mask_observations(tok):
    from mojax.tasks.calculator import CalculatorTask, sft_demonstrations, tokenize_demo

    task = CalculatorTask()
    demos = sft_demonstrations(task.load("train", 40, seed=0), seed=0)
    for demo in demos:
        ids, mask = tokenize_demo(demo, tok)
        assert len(ids) == len(mask)
        prompt = task.build_prompt(demo.example, tok)
        n_prompt = len(tok.encode(prompt, add_special_tokens=False))
        assert not any(mask[:n_prompt]) and ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
        assert tok.decode(ids) == prompt + demo.response + "<|im_end|>"
        trained = tok.decode([t for t, m in zip(ids, mask) if m])
        observed = tok.decode([t for t, m in zip(ids[n_prompt:], mask[n_prompt:]) if not m])
        if demo.n_calls:
            assert observed == f"<output>{demo.example.target}</output>"
            assert trained == demo.response.replace(observed, "") + "<|im_end|>"
        else:
            assert observed == "" and trained == demo.response + "<|im_end|>"
