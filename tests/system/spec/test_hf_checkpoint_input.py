"""An HF checkpoint given to a run (``checkpoint=DIR`` / ``config.model.checkpoint``) is the model
that trains, or one ``config.`` error naming the file and what is wrong, before anything is built
or compiled (issue 49): ``checkpoint=DIR`` without ``model=`` takes the architecture of
``DIR/config.json`` (with ``model=tiny`` it is refused: the tiny model loads no weights); a
malformed checkpoint (bad config.json, missing or truncated safetensors, a ``vocab_size`` that is
not the embedding's, no tokenizer files) and a tokenizer whose ids the checkpoint has no rows for
are refused when the run loads them.

The checkpoints are real: ``save_pretrained`` of a random ``tiny-qwen2`` (vocab 256) with a
sentencepiece tokenizer trained for it, then damaged."""

import json
import os
import shutil

import pytest
from mojax_test_utils import load_config, run_spec

from mojax import models
from mojax.config import ConfigError
from mojax.rl import builders, trainer
from mojax.spec.model_config import qwen_config
from mojax.tasks.framework.vocab import build_sentencepiece

QWEN2_TOKENIZER = os.path.join(
    os.environ.get("MOJAX_SHARED_DIR", "../shared"), "assets", "qwen2-tokenizer"
)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny-qwen2 HF checkpoint (random weights, vocab 256) with its own sentencepiece
    tokenizer (``tokenizer.model``, fewer than 256 pieces)."""
    out = tmp_path_factory.mktemp("ckpt") / "tiny-qwen2"
    models.save_pretrained(models.from_pretrained("tiny-qwen2"), out)
    texts = [f"what is {i} plus {i * 7}? the answer is {i * 8}." for i in range(200)]
    build_sentencepiece(texts, out / "tokenizer.model", vocab_size=96)
    return out


@pytest.fixture
def ckpt(hf_dir, tmp_path):
    """A fresh copy of ``hf_dir`` to damage."""
    return shutil.copytree(hf_dir, tmp_path / "ckpt")


def _config(ckpt, arg=""):
    c = load_config("grpo", f"checkpoint={ckpt}" + (f",{arg}" if arg else ""))
    with c.unlocked():  # nothing below reaches the warm start
        c.sft.steps = 0
    return c


def test_checkpoint_without_model_takes_the_architecture_of_its_config_json(ckpt):
    c = _config(ckpt)
    assert c.model.checkpoint == str(ckpt) and c.tokenizer.path == ""
    spec = run_spec(c)
    tok = builders.build_tokenizer(spec, None, None, "")
    cfg = qwen_config(spec, tok)
    want = models.get_variant("tiny-qwen2")  # what save_pretrained wrote
    for name in ("model_type", "vocab_size", "hidden_size", "num_layers", "num_heads"):
        assert getattr(cfg, name) == getattr(want, name), name
    assert cfg.num_kv_heads == 2 and cfg.qkv_bias and not cfg.qk_norm


def test_checkpoint_with_model_tiny_is_refused_naming_both_arguments(ckpt):
    with pytest.raises(ValueError) as info:
        load_config("grpo", f"model=tiny,checkpoint={ckpt}")
    msg = str(info.value)
    assert f"checkpoint={str(ckpt)!r} with model=tiny" in msg and "loads no weights" in msg


def _damage(ckpt, what):
    """Damages ``ckpt``; returns the substrings the error must hold."""
    config, weights = ckpt / "config.json", ckpt / "model.safetensors"
    if what == "no config.json":
        config.unlink()
        return ["no config.json in it"]
    if what == "bad config JSON":
        config.write_text(config.read_text()[:40])
        return [f"{config}: not valid JSON"]
    if what == "config.json not an object":
        config.write_text("[1, 2]")
        return [f"{config}: not a JSON object"]
    if what == "no safetensors":
        weights.unlink()
        return ["no model.safetensors or model.safetensors.index.json", str(ckpt)]
    if what == "truncated safetensors":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
        return [str(weights), "truncated file?"]
    if what == "wrong vocab_size":
        hf = json.loads(config.read_text())
        hf["vocab_size"] = 512
        config.write_text(json.dumps(hf))
        return [
            f"{ckpt}/config.json has vocab_size 512",
            f"model.embed_tokens.weight in {weights} has 256 rows",
        ]
    if what == "mis-shaped layer":
        hf = json.loads(config.read_text())
        hf["intermediate_size"] = 96
        config.write_text(json.dumps(hf))
        return ["mis-shaped tensors", "model.layers.0.mlp.gate_proj.weight", str(weights)]
    assert what == "no tokenizer"
    (ckpt / "tokenizer.model").unlink()
    return ["config.tokenizer.path='' reads the tokenizer", f"{ckpt} holds no tokenizer file"]


@pytest.mark.parametrize(
    "what",
    [
        "no config.json",
        "bad config JSON",
        "config.json not an object",
        "no safetensors",
        "truncated safetensors",
        "wrong vocab_size",
        "mis-shaped layer",
        "no tokenizer",
    ],
)
def test_a_malformed_checkpoint_is_one_config_error_naming_the_file(ckpt, tmp_path, what):
    wants = _damage(ckpt, what)
    workdir = tmp_path / "w"
    with pytest.raises(ConfigError) as info:
        trainer.run(_config(ckpt), str(workdir))
    assert len(info.value.errors) == 1, info.value.errors
    msg = info.value.errors[0]
    assert msg.startswith(("config.model.checkpoint=", "config.tokenizer.path=")), msg
    for want in wants:
        assert want in msg, (want, msg)
    assert not workdir.exists()  # refused before the workdir (or anything else) was made


def test_a_tokenizer_the_checkpoint_has_no_rows_for_is_refused_at_load(ckpt):
    """The Qwen2 tokenizer (151,646 ids) with a vocab-256 checkpoint: refused when the model config
    is built, before the sampler ever sees an id past row 255."""
    (ckpt / "tokenizer.model").unlink()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(QWEN2_TOKENIZER, name), ckpt / name)
    spec = run_spec(_config(ckpt))
    tok = builders.build_tokenizer(spec, None, None, "")
    with pytest.raises(ConfigError) as info:
        builders.build_model_config(spec, tok)
    msg = str(info.value)
    assert f"config.model.checkpoint={str(ckpt)!r}" in msg and "vocab_size 256" in msg
    assert f"'largest token id': {tok.vocab_size - 1}" in msg and "out of range [0, 256)" in msg
    assert f"the tokenizer files in {ckpt} are not the ones its weights were trained with" in msg


def test_an_unreadable_tokenizer_file_is_a_config_error_naming_it(ckpt):
    (ckpt / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    spec = run_spec(_config(ckpt))
    with pytest.raises(ConfigError) as info:
        builders.build_tokenizer(spec, None, None, "")
    msg = str(info.value)
    assert msg.startswith("config.tokenizer.path='' (the tokenizer of config.model.checkpoint=")
    assert str(ckpt) in msg
