"""AWPO's local judge (``judge.kind='model'``) built from an HF checkpoint directory.

Reference: transformers' greedy ``generate`` on the same directory, prompted with the same chat
template of the same judge messages; the verdict texts must be equal token for token. The
directory is a small random-init Qwen2 (``save_pretrained``) with the real Qwen2 tokenizer's files,
so the judge prompt is the real rubric in the real vocabulary.
"""

import shutil

import numpy as np
import pytest
from mojax_test_utils import build_hf, hf_config, load_config, run_spec

from mojax.config import ConfigError
from mojax.tasks.framework import judge as judge_lib

ROWS = (
    ("What is 3 + 4?", "<think>add them</think><calc>3+4</calc> 7", "<think>3 plus 4</think> 7"),
    ("Weather in Paris?", "<think>call weather</think>", "<think>weather(Paris)</think>"),
)
NEW = 12  # verdict tokens: enough to compare the decode, the test needs no full verdict


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory, qwen2_tokenizer_dir):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(qwen2_tokenizer_dir)
    config = hf_config("qwen2", 4, 2, tie=True)
    config.vocab_size = len(tok)
    path = tmp_path_factory.mktemp("judge")
    model = build_hf(config, seed=3)
    model.save_pretrained(path)
    for f in qwen2_tokenizer_dir.iterdir():
        if f.is_file() and f.name != "config.json":
            shutil.copy(f, path / f.name)
    return path, model, tok


def reference_verdicts(model, tok):
    """transformers: chat template, greedy decode of NEW tokens, stop at EOS."""
    import torch

    out = []
    for prompt, response, ref in ROWS:
        text = tok.apply_chat_template(
            judge_lib.judge_messages(prompt, response, ref),
            tokenize=False,
            add_generation_prompt=True,
        )
        ids = torch.tensor([tok.encode(text)])
        with torch.no_grad():
            gen = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=NEW,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.eos_token_id,
            )[0, ids.shape[1] :].tolist()
        if tok.eos_token_id in gen:
            gen = gen[: gen.index(tok.eos_token_id)]
        out.append(tok.decode(gen))
    return out


def test_local_judge_from_an_hf_directory_decodes_as_transformers(judge_dir):
    path, model, tok = judge_dir
    judge = judge_lib.make_judge("model", model=str(path), dtype="float32")
    assert isinstance(judge, judge_lib.ModelJudge)
    judge.max_new_tokens = NEW
    got = judge.verdicts(*zip(*ROWS))
    assert got == reference_verdicts(model, tok)
    # a random model writes no verdict: every row fails (NaN), none raises
    scores, failures = judge_lib.judge_batch(judge, *zip(*ROWS))
    assert np.isnan(scores).all() and failures == len(ROWS)


def test_awpo_config_builds_the_local_judge(judge_dir):
    from mojax.rl import builders

    path, model, _ = judge_dir
    c = load_config("awpo", "task=calculator")
    with c.unlocked():
        c.judge.kind, c.judge.model = "model", str(path)
        c.model.dtype = "float32"
    spec = run_spec(c)
    judge = builders.build_judge(spec, spec.build_task())
    assert isinstance(judge, judge_lib.ModelJudge)
    import jax

    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(judge.model.params))
    assert count == sum(p.numel() for p in model.parameters())


def test_local_judge_without_config_json_is_one_clear_error(tmp_path):
    from mojax.spec.input_files import check_files

    c = load_config("awpo", "task=calculator")
    with c.unlocked():
        c.judge.kind, c.judge.model = "model", str(tmp_path)
    with pytest.raises(ConfigError, match=r"config.judge.model=.*: no config.json in it"):
        check_files(run_spec(c))
