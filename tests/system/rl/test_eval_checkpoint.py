"""``mode=eval`` with ``eval.checkpoint=HF_DIR`` builds the model from the checkpoint's
``config.json``, not from the run config (issue 14), and refuses a tokenizer that does not fit the
checkpoint's vocabulary, naming the key and both sizes."""

import importlib.util
import json
import os
import pathlib

import jax
import pytest
from mojax_test_utils import run_spec

from mojax import models
from mojax.defaults import TINY_CALC_MODEL
from mojax.rl import builders, trainer
from mojax.tasks import build_task

REPO = pathlib.Path(__file__).resolve().parents[3]


def eval_config(hf_dir):
    spec = importlib.util.spec_from_file_location("cfg_grpo", REPO / "configs" / "grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config().copy_and_resolve_references()
    with c.unlocked():
        c.mode = "eval"
        c.eval.checkpoint = str(hf_dir)
        c.task.num_eval, c.task.num_validation = 4, 0
        c.task.num_train = 64
        c.eval.num_samples = 1
        c.eval.ks = (1,)
    return c


def run_tokenizer(c, tmp_path):
    task = build_task(c.task)
    splits = task.load_splits(c.task, seed=c.seed)
    return builders.build_tokenizer(run_spec(c), task, splits, str(tmp_path))


def save_hf(out, tok, vocab_size):
    """A tiny HF checkpoint whose architecture differs from the run config's (hidden 64, 2 layers);
    ``vocab_size`` None = the tokenizer's."""
    vocab_size = tok.vocab_size if vocab_size is None else vocab_size
    cfg = models.get_variant(
        "tiny-qwen3",
        **{**TINY_CALC_MODEL, "hidden_size": 64, "intermediate_size": 96, "num_layers": 2},
        vocab_size=vocab_size,
        eos_token_id=int(tok.eos_token_id),
        bos_token_id=None,
        pad_token_id=int(tok.pad_token_id),
    )
    params = models.init_params(cfg, jax.random.PRNGKey(0))
    models.save_pretrained(models.QwenModel(config=cfg, params=params), out)
    return cfg


def test_eval_checkpoint_uses_the_hf_config_json(tmp_path):
    c = eval_config(tmp_path / "hf")
    tok = run_tokenizer(c, tmp_path / "tok")
    saved = save_hf(tmp_path / "hf", tok, tok.vocab_size)
    built = builders.build_model_config(run_spec(c), tok)
    assert (built.hidden_size, built.num_layers, built.vocab_size) == (64, 2, tok.vocab_size)
    assert built == saved.replace(dtype=built.dtype, param_dtype=built.param_dtype)
    # the run config alone would build the 128-wide, 4-layer tiny model
    with c.unlocked():
        c.mode = "train"
    assert (
        builders.build_model_config(run_spec(c), tok).hidden_size
        == TINY_CALC_MODEL["hidden_size"]
        == 128
    )


@pytest.mark.slow
def test_eval_run_of_an_hf_checkpoint_with_another_architecture(tmp_path):
    c = eval_config(tmp_path / "hf")
    save_hf(tmp_path / "hf", run_tokenizer(c, tmp_path / "tok"), None)
    summary = trainer.run(c, str(tmp_path / "work"))
    assert "eval/accuracy" in summary
    report = json.loads((tmp_path / "work" / "eval" / "test.json").read_text())
    assert report


def test_eval_checkpoint_with_a_too_small_vocab_names_key_and_sizes(tmp_path):
    c = eval_config(tmp_path / "hf")
    tok = run_tokenizer(c, tmp_path / "tok")
    save_hf(tmp_path / "hf", tok, tok.vocab_size - 8)
    with pytest.raises(ValueError) as info:
        builders.build_model_config(run_spec(c), tok)
    msg = str(info.value)
    assert msg.startswith(f"config.eval.checkpoint={str(tmp_path / 'hf')!r}")
    assert f"{tok.vocab_size} tokens" in msg and f"vocab_size {tok.vocab_size - 8}" in msg
    assert "config.tokenizer.path='build'" in msg and "--config.tokenizer.path=" in msg


def test_eval_checkpoint_without_config_json_is_named(tmp_path):
    c = eval_config(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="config.eval.checkpoint=.*no config.json"):
        builders.build_model_config(run_spec(c), None)


def _files(workdir):
    """``{path: sha256}`` of every file under ``workdir`` except the evaluation's own report."""
    import hashlib

    return {
        str(p.relative_to(workdir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in pathlib.Path(workdir).rglob("*")
        if p.is_file() and p.relative_to(workdir).parts[0] != "eval"
    }


def test_eval_of_a_live_run_leaves_its_files_intact(tmp_path, monkeypatch):
    """``mode=eval`` on the workdir of a running job -- it holds the lock, its async save of step
    6 is in flight and its step 5 is damaged -- evaluates step 3 and leaves every file of the
    run as it was: nothing is deleted, moved aside or rewritten."""
    import shutil

    from mojax_test_utils import truncate_array_data

    from mojax import learner
    from mojax.infra import checkpoint as ckpt_lib
    from mojax.infra.workdir_lock import WorkdirLock
    from mojax.rl.builders import build_run

    c = eval_config("")  # "" = the workdir's latest checkpoint
    work = tmp_path / "run"
    run_ = build_run(run_spec(c), str(work), pool=None)
    saved = {}
    with ckpt_lib.Checkpointer(work / "checkpoints", async_save=False) as ck:
        for seed, step in enumerate((3, 5)):
            state = learner.create_train_state(
                run_.learner.model_config,
                run_.learner.tx,
                seed=seed,
                mesh=run_.learner.mesh,
                rules=run_.learner.rules,
            )
            ck.save(step, state, {"step": step})
            saved[step] = jax.device_get(state.params)
    shutil.copytree(work / "checkpoints" / "5", work / "checkpoints" / "6.orbax-checkpoint-tmp-7")
    truncate_array_data(work / "checkpoints" / "5")
    evaluated = []

    def fake_evaluate(run_, host, params, step, split="test", samples_path=""):
        evaluated.append(jax.device_get(params))
        return {"eval/accuracy": 0.0}

    monkeypatch.setattr(trainer, "evaluate", fake_evaluate)
    with WorkdirLock(work):
        before = _files(work)
        trainer.run(c, str(work))
        assert _files(work) == before
    (params,) = evaluated
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(saved[3]), strict=True):
        assert (a == b).all()
    assert sorted(os.listdir(work / "checkpoints")) == ["3", "5", "6.orbax-checkpoint-tmp-7"]
