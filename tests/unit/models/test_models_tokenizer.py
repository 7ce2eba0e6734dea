"""``load_tokenizer`` on the real Qwen2 tokenizer files and on a freshly trained sentencepiece."""

import pytest

import mojax.models as mm

QWEN_CHATML = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
)


def test_qwen2_tokenizer_ids_and_chat_template(qwen2_tokenizer_dir):
    tok = mm.load_tokenizer(qwen2_tokenizer_dir)
    assert isinstance(tok, mm.HFTokenizer)
    # special ids as listed in the checkpoint's tokenizer_config.json / config.json
    assert tok.eos_token_id == 151645  # <|im_end|>
    assert tok.pad_token_id == 151643  # <|endoftext|>
    assert tok.vocab_size == 151646
    text = "Hello world! 1234 is a number; 日本語 too."
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.encode("Hello world") == [9707, 1879]  # byte-level BPE ids of the real vocab
    msgs = [{"role": "user", "content": "What is 2+3?"}]
    rendered = tok.apply_chat_template(msgs, add_generation_prompt=True)
    assert rendered == QWEN_CHATML
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    assert ids == tok.encode(QWEN_CHATML)
    assert ids.count(151644) == 3 and ids.count(151645) == 2  # <|im_start|>, <|im_end|> atomic


def test_sentencepiece_tokenizer(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    lines = [f"the answer to {a} plus {b} is {a + b}" for a in range(40) for b in range(10)]
    corpus.write_text("\n".join(lines))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=64,
        pad_id=3, minloglevel=2,
    )  # fmt: skip
    tok = mm.load_tokenizer(tmp_path / "sp.model")
    assert isinstance(tok, mm.SentencePieceTokenizer)
    assert tok.vocab_size == 64 and tok.eos_token_id == 2 and tok.pad_token_id == 3
    ids = tok.encode("the answer to 12 plus 3 is 15")
    assert all(0 <= i < 64 for i in ids)
    assert tok.decode(ids) == "the answer to 12 plus 3 is 15"
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == tok.decode(ids)
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer at"):
        mm.load_tokenizer(tmp_path)
