"""``python -m mojax.export``: a run's checkpoint as an HF directory that transformers loads, whose
greedy ``generate`` equals ``mojax.sampling.generate(temperature=0.0)`` token for token, with the
task's own sentencepiece tokenizer converted to an HF tokenizer with the same ids.

The run is made the way the trainer makes one: config -> ``builders`` tokenizer (written to
``<workdir>/tokenizer.model``) and model config -> ``learner.create_train_state`` -> ``Checkpointer`` in
``<workdir>/checkpoints``, plus ``config.json`` from ``mojax.infra.logbook.write_config``.
"""

import importlib.util
import json
import pathlib
import random
import shutil
import string

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mojax_test_utils import run_spec  # noqa: E402

from mojax import export as export_lib  # noqa: E402
from mojax import learner, models  # noqa: E402
from mojax import sampling as ms  # noqa: E402
from mojax import sharding as sharding_lib  # noqa: E402
from mojax.infra import checkpoint as ckpt_lib  # noqa: E402
from mojax.infra import logbook as log_lib  # noqa: E402
from mojax.rl import builders  # noqa: E402
from mojax.rollout.tools import Calculator  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
N_NEW = 16


def default_config():
    spec = importlib.util.spec_from_file_location("cfg_grpo", REPO / "configs" / "grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def make_run(workdir: pathlib.Path, config, steps=(3, 5)):
    """A run directory with checkpoints at ``steps`` (different params each) and config.json.

    Returns (task, splits, tokenizer, model config, {step: params})."""
    spec = run_spec(config)
    task = spec.build_task()
    splits = builders.load_splits(task, spec)
    tok = builders.build_tokenizer(spec, task, splits, str(workdir))
    mc = builders.build_model_config(spec, tok)
    mesh = sharding_lib.mesh_from_config(config.mesh)
    rules = sharding_lib.logical_axis_rules(config)
    tx = learner.make_optimizer(learner.OptimizerConfig.from_config(config.optimizer))
    saved = {}
    with ckpt_lib.Checkpointer(workdir / "checkpoints") as ckpt:
        for i, step in enumerate(steps):
            state = learner.create_train_state(mc, tx, seed=config.seed + i, mesh=mesh, rules=rules)
            ckpt.save(step, state, {"rl_step": step}, force=True)
            saved[step] = jax.device_get(state.params)
    log_lib.write_config(workdir, config)
    return task, splits, tok, mc, saved


@pytest.fixture(scope="module")
def calc_run(tmp_path_factory):
    c = default_config()
    assert c.task.name == "calculator" and c.tokenizer.path == "build"
    # a larger init scale than the default 0.02: peaked logits, so greedy has clear argmaxes
    with c.unlocked():
        c.model.overrides.initializer_range = 0.5
    workdir = tmp_path_factory.mktemp("run")
    task, splits, tok, mc, saved = make_run(workdir, c)
    out = tmp_path_factory.mktemp("export")
    summary = export_lib.export(str(workdir), str(out))
    return dict(
        workdir=workdir,
        out=out,
        summary=summary,
        task=task,
        splits=splits,
        tok=tok,
        mc=mc,
        saved=saved,
        config=c,
    )


def _prompts(run, n=3):
    return [
        run["tok"].encode(run["task"].build_prompt(ex, run["tok"])) for ex in run["splits"].test[:n]
    ]


def _mojax_greedy(model, prompts, eos):
    tp = max(len(p) for p in prompts)
    tokens = np.zeros((len(prompts), tp), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = p
    out = ms.generate(
        model,
        tokens,
        key=jax.random.PRNGKey(0),
        max_new_tokens=N_NEW,
        temperature=0.0,
        stop_token_ids=(eos,),
        prompt_lengths=np.array([len(p) for p in prompts], np.int32),
    )
    toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
    return [toks[i, : lens[i]].tolist() for i in range(len(prompts))]


def _hf_greedy(hf, prompt):
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([prompt], dtype=torch.long),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            max_new_tokens=N_NEW,
            do_sample=False,  # greedy, whatever the (copied) generation_config.json suggests
            repetition_penalty=1.0,
        )
    return out[0, len(prompt) :].tolist()


def test_export_files_and_step(calc_run):
    out, summary = calc_run["out"], calc_run["summary"]
    assert summary["step"] == 5
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
    ):
        assert (out / name).is_file(), name
    gen = json.loads((out / "generation_config.json").read_text())
    tok = calc_run["tok"]
    assert gen["eos_token_id"] == tok.eos_token_id and gen["pad_token_id"] == tok.pad_token_id
    assert gen["do_sample"] is False
    # the exported weights are the step-5 params, exactly, without the vocabulary's padding rows
    back = models.from_pretrained(out, dtype="float32")
    mc = calc_run["mc"]
    assert mc.vocab_size % 128 == 0 and mc.real_vocab_size == tok.vocab_size < mc.vocab_size
    assert back.config.vocab_size == tok.vocab_size and back.config.real_vocab_size is None
    want = models.without_padding_rows(models.QwenModel(config=mc, params=calc_run["saved"][5]))
    want = want.params
    assert want["embed_tokens"].shape[0] == tok.vocab_size
    for a, b in zip(jax.tree.leaves(back.params), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_transformers_greedy_equals_mojax_greedy(calc_run):
    out = calc_run["out"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    hf.eval()
    model = models.QwenModel(config=calc_run["mc"], params=calc_run["saved"][5])
    prompts = _prompts(calc_run)
    ours = _mojax_greedy(model, prompts, calc_run["tok"].eos_token_id)
    for prompt, mine in zip(prompts, ours):
        theirs = _hf_greedy(hf, prompt)
        assert theirs == mine, (prompt, theirs, mine)
    assert sum(len(x) for x in ours) >= N_NEW  # something was generated


def test_exported_tokenizer_has_the_same_ids(calc_run):
    tok = calc_run["tok"]
    hf_tok = transformers.AutoTokenizer.from_pretrained(calc_run["out"])
    assert len(hf_tok) == tok.vocab_size
    assert (hf_tok.eos_token_id, hf_tok.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    ex = calc_run["splits"].test[0]
    prompt = calc_run["task"].build_prompt(ex, tok)
    assert (
        hf_tok.apply_chat_template(list(ex.messages), tokenize=False, add_generation_prompt=True)
        == prompt
    )
    ids = hf_tok.encode(prompt, add_special_tokens=False)
    assert ids == tok.encode(prompt)
    assert hf_tok.decode(ids) == prompt  # round trip of a calculator prompt
    rng = random.Random(0)
    texts = [
        prompt + "<calc>37*48</calc><output>1776</output><answer>1776</answer>",
        Calculator().run("1/0").output,
        "literal </s> and <pad> stay text",
        "unknown chars \u00e9\u00e9 fuse like sentencepiece",
    ]
    texts += [
        "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 40))) for _ in range(300)
    ]
    for text in texts:
        assert hf_tok.encode(text, add_special_tokens=False) == tok.encode(text), repr(text)


def test_cli_step_and_config_fallback(calc_run, tmp_path):
    # a copy of the run without config.json: rebuilt from --config (the saved tokenizer.model is
    # reused); --step picks the older checkpoint
    work = tmp_path / "run"
    shutil.copytree(calc_run["workdir"], work)
    (work / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config.json in the run directory"):
        export_lib.export(str(work), str(tmp_path / "x"))
    out = tmp_path / "out"
    rc = export_lib.main(
        [
            "--workdir",
            str(work),
            "--out",
            str(out),
            "--step",
            "3",
            "--config",
            str(REPO / "configs" / "grpo.py"),
        ]
    )
    assert rc == 0
    back = models.from_pretrained(out, dtype="float32")
    want = models.without_padding_rows(
        models.QwenModel(config=calc_run["mc"], params=calc_run["saved"][3])
    )
    for a, b in zip(jax.tree.leaves(back.params), jax.tree.leaves(want.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(
        ckpt_lib.CheckpointError, match=r"--step=4: not a committed step .* \[3, 5\]"
    ):
        export_lib.export(
            str(work), str(tmp_path / "y"), step=4, config=str(REPO / "configs" / "grpo.py")
        )


def workdir_files(workdir):
    """Every file under ``workdir`` with its size and modification time."""
    return sorted(
        (str(p.relative_to(workdir)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in pathlib.Path(workdir).rglob("*")
        if p.is_file()
    )


def test_export_from_a_live_run_leaves_its_files_intact(calc_run, tmp_path):
    """The running job holds the workdir lock and has an async save of step 6 in flight (its tmp
    directory): the export reads committed step 5 and deletes, moves and writes nothing there."""
    from mojax.infra.workdir_lock import WorkdirLock

    work = tmp_path / "run"
    shutil.copytree(calc_run["workdir"], work)
    ck = work / "checkpoints"
    shutil.copytree(ck / "5", ck / "6.orbax-checkpoint-tmp-1700000000")
    with WorkdirLock(work):
        before = workdir_files(work)
        assert "lock" in [f[0] for f in before]
        summary = export_lib.export(str(work), str(tmp_path / "out"))
        assert summary["step"] == 5
        assert workdir_files(work) == before


def test_url_paths_are_refused(tmp_path, capsys):
    rc = export_lib.main(["--workdir", "gs://b/run", "--out", str(tmp_path / "out")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--workdir='gs://b/run' is a URL" in err and "gcloud storage cp" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_export_with_an_hf_tokenizer(qwen2_tokenizer_dir, tmp_path):
    c = default_config()
    c.tokenizer.path = str(qwen2_tokenizer_dir)
    with c.unlocked():
        c.model.overrides = dict(
            vocab_size=151936,
            hidden_size=32,
            intermediate_size=64,
            num_layers=2,
            num_heads=2,
            num_kv_heads=1,
            head_dim=16,
            initializer_range=0.5,
            tie_word_embeddings=True,
        )
    workdir = tmp_path / "run"
    task, splits, tok, mc, saved = make_run(workdir, c, steps=(2,))
    out = tmp_path / "out"
    summary = export_lib.main(["--workdir", str(workdir), "--out", str(out)])
    assert summary == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    prompt = task.build_prompt(splits.test[0], tok)
    ids = tok.encode(prompt)
    assert hf_tok.encode(prompt, add_special_tokens=False) == ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model = models.QwenModel(config=mc, params=saved[2])
    (mine,) = _mojax_greedy(model, [ids], tok.eos_token_id)
    assert _hf_greedy(hf, ids) == mine
