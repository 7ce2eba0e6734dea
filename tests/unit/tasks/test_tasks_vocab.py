"""The self-built sentencepiece vocabulary: deterministic, exact, digit-split, tags as single pieces."""

import pytest

from mojax.models import load_tokenizer
from mojax.tasks.calculator import CalculatorTask, sft_demonstrations, tokenize_demo
from mojax.tasks.framework.vocab import CHAT_SYMBOLS, REQUIRED_CHARS, build_sentencepiece

TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")


def _texts(n=600):
    task = CalculatorTask()
    demos = sft_demonstrations(task.load("train", n, seed=0), seed=0)
    prompts = [
        "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in d.example.messages)
        + "<|im_start|>assistant\n"
        for d in demos
    ]
    return demos, [p + d.response for p, d in zip(prompts, demos)]


def test_build_is_deterministic_exact_and_composable(tmp_path):
    demos, texts = _texts()
    a = build_sentencepiece(texts, tmp_path / "a.model", vocab_size=96, user_symbols=TAGS)
    b = build_sentencepiece(texts, tmp_path / "b.model", vocab_size=96, user_symbols=TAGS)
    assert open(a, "rb").read() == open(b, "rb").read()
    tok = load_tokenizer(a)
    assert (
        tok.eos_token_id == 2
        and tok.pad_token_id == 0
        and tok.vocab_size <= 96 + len(REQUIRED_CHARS)
    )
    for text in texts:
        assert tok.decode(tok.encode(text)) == text
    for sym in (*CHAT_SYMBOLS, *TAGS):
        assert len(tok.encode(sym)) == 1, sym
    assert [tok.decode([i]) for i in tok.encode("1234567")] == list("1234567")
    # segment-wise tokenisation (how rollouts build sequences) decodes to the whole transcript
    ids, mask = tokenize_demo(demos[0], tok)
    assert tok.decode(ids[:-1]).endswith(demos[0].response) and ids[-1] == tok.eos_token_id
    assert len(ids) == len(mask)


def test_empty_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="texts"):
        build_sentencepiece(["", ""], tmp_path / "x.model")
