"""Search-R1 multi-hop QA (EM / F1 over aliases) and MuSiQue (VPO App. A.2) rewards."""

import json

import numpy as np
import pytest

from mojax.tasks import musique, qa


def test_normalisation_em_f1_by_hand():
    assert qa.normalize_answer("  The Chief-of Protocol! ") == "chiefof protocol"
    assert qa.exact_match("the chief of protocol.", "Chief of Protocol") == 1.0
    assert qa.exact_match("chief", ["Chief of Protocol", "Chief"]) == 1.0
    assert qa.exact_match("chief", ["Chief of Protocol"]) == 0.0
    # gold tokens [chief, of, protocol], pred [chief, protocol, officer]: 2 common -> P = R = 2/3
    assert qa.token_f1("Chief protocol officer", "Chief of Protocol") == pytest.approx(2 / 3)
    # best over aliases: [chief] vs pred [chief, protocol, officer] -> P 1/3, R 1 -> 1/2
    assert qa.token_f1("chief protocol officer", ["Chief", "x"]) == pytest.approx(0.5)
    assert qa.token_f1(None, "a") == 0.0 and qa.token_f1("the", "an") == 1.0


@pytest.fixture(scope="module")
def hotpot(shared):
    return qa.QATask().load(shared / "data/qa/hotpotqa_dev500.jsonl")


def test_real_hotpot_and_bamboogle(hotpot, shared):
    task = qa.QATask()
    assert len(hotpot) == 500
    for ex in hotpot:
        r = task.score(f"<think>...</think><answer> {ex.target[0]} </answer>", ex)
        assert r.tolist() == [1.0, 0.0]
    ex = hotpot[0]
    transcript = (
        "<think>Who played Corliss Archer?</think><search> Kiss and Tell 1945 film </search>"
        + task.format_observation(qa.format_passages([("Shirley Temple", "...")]))
        + "<think>ok</think><answer>wrong first</answer> then <answer>Chief of Protocol</answer>"
    )
    assert task.score(transcript, ex)[0] == 1.0  # the last answer counts
    assert task.count_tool_calls(transcript) == 1
    assert task.score("<answer>Chief of Staff</answer>", ex)[0] == 0.0
    f1 = qa.QATask(metric="f1")
    assert f1.score("<answer>Chief of Staff</answer>", ex)[0] == pytest.approx(2 / 3)
    bam = task.load(shared / "data/qa/bamboogle.jsonl")
    assert len(bam) == 125 and bam[0].target == ("james madison",)
    assert "Question: Who was president" in bam[0].messages[0]["content"]
    assert "<search> query </search>" in bam[0].messages[0]["content"]


def test_search_protocol_and_search_r1_parquet(tmp_path):
    task = qa.QATask()
    assert task.tool_stop == "</search>"
    assert task.parse_tool_call("<think>x</think><search> capital of France </search>") == (
        "capital of France"
    )
    assert task.parse_tool_call("<search>   </search>") is None
    assert task.parse_tool_call("<search>unterminated") is None
    assert task.format_observation("Doc 1(Title: P) x\n") == (
        "\n\n<information>Doc 1(Title: P) x</information>\n\n"
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "nq",
            "prompt": [{"role": "user", "content": "Q?"}],
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Paris", "paris fr"]}},
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "nq.parquet")
    ex = task.load(tmp_path / "nq.parquet")[0]
    assert ex.target == ("Paris", "paris fr") and ex.messages[0]["content"] == "Q?"


def _musique_record(n_hops=3):
    paragraphs = [
        {
            "idx": i,
            "title": f"T{i}",
            "paragraph_text": f"text {i}",
            "is_supporting": i in (3, 7, 15),
        }
        for i in range(20)
    ]
    decomp = [
        {"id": k, "question": f"q{k}", "answer": f"a{k}", "paragraph_support_idx": p}
        for k, p in enumerate((3, 7, 15, 18)[:n_hops])
    ]
    return {
        "id": "2hop__1",
        "paragraphs": paragraphs,
        "question": "Where is it?",
        "question_decomposition": decomp,
        "answer": "Eiffel Tower",
        "answer_aliases": ["La Tour Eiffel"],
        "answerable": True,
    }


def test_musique_reward_by_hand(tmp_path):
    p = tmp_path / "musique.jsonl"
    p.write_text(json.dumps(_musique_record(3)) + "\n" + json.dumps(_musique_record(4)))
    task = musique.MuSiQueTask()
    ex3, ex4 = task.load(p)
    prompt = ex3.messages[0]["content"]
    assert "[3] (Title: T3) text 3" in prompt and "Question: Where is it?" in prompt
    assert "<support>comma-separated paragraph indices" in prompt
    # cites 3 and 7 (hops 1, 2), not 15 (hop 3); hop 4 does not exist -> 0; F1 1 ("the" dropped)
    r = task.score("reasoning <support>3, 7, 12</support><answer>the Eiffel Tower</answer>", ex3)
    np.testing.assert_allclose(r, [1, 1, 0, 0, 1])
    assert task.scalar(r) == pytest.approx((2 + 3) / 7)
    # at most four distinct citations count: 1, 2, 3, 4 -> 15 and 18 are ignored
    r = task.score("<support>1,1,2,3,4,15,18</support><answer>tour</answer>", ex4)
    # "tour" vs alias "la tour eiffel": P 1, R 1/3 -> F1 1/2 (best over aliases)
    np.testing.assert_allclose(r, [1, 0, 0, 0, 0.5])
    r = task.score("<support>18 15 7 3</support><answer>Paris</answer>", ex4)
    np.testing.assert_allclose(r, [1, 1, 1, 1, 0])
    np.testing.assert_allclose(task.score("no tags", ex4), [0, 0, 0, 0, 0])
    padded = musique.MuSiQueTask(missing_hop_value=1.0)
    np.testing.assert_allclose(padded.score("<support>3</support>", ex3), [1, 0, 0, 1, 0])


def test_musique_multi_answer(tmp_path):
    task = musique.MuSiQueTask()
    ex = musique.MuSiQueTask.example(_musique_record(2), "m")
    msgs = task.messages(ex, num_answers=3)
    assert "Give 3 different answers in <response_i>...</response_i> tags" in msgs[0]["content"]
    assert "First reason" not in msgs[0]["content"]
    text = (
        "<response_1><support>3</support><answer>Eiffel Tower</answer></response_1>"
        "<response_2><support>7</support></response_2>"
        "<response_3><support>3,7</support><answer>x</answer></response_3>"
    )
    r, v = task.score_set(text, ex, 3)
    assert v.tolist() == [True, False, True]
    np.testing.assert_allclose(r, [[1, 0, 0, 0, 1], [0] * 5, [1, 1, 0, 0, 0]])
    with pytest.raises(ValueError, match="lacks MuSiQue keys"):
        bad = tmp_path / "b.jsonl"
        bad.write_text(json.dumps({"question": "q"}))
        task.load(bad)
