"""What a resumed run reads again: the config keys an older ``config.json`` lacks, the input files
(moved or changed; ``mojax.spec.input_files``), example ids that repeat across data files, and the per-step
logs it redoes (``transcripts.jsonl``)."""

import json
import shutil
import types

import pytest
from mojax_test_utils import load_config as load
from mojax_test_utils import run_spec as _spec
from mojax_test_utils import with_keys

from mojax import spec as spec_lib
from mojax.infra import logbook as log_lib
from mojax.infra import workdir as wd
from mojax.spec import input_files as inputs_lib


def _outputs(workdir):
    (workdir / "metrics.jsonl").write_text('{"step": 0}\n')


def test_a_key_an_older_config_json_lacks_counts_as_its_default(tmp_path):
    """A key added by a newer mojax (here ``ppo.num_seqs``, declared with default None) is absent
    from an older workdir's config.json: at its default the run resumes; set to another value the
    difference is listed against that default."""
    c = load("grpo")
    defaults = spec_lib.key_defaults()
    assert defaults["ppo.num_seqs"] is None and "optimizer.b1" in defaults
    assert wd.prepare(c, str(tmp_path), defaults=defaults) is None
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["ppo"]["num_seqs"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    _outputs(tmp_path)
    with pytest.raises(wd.WorkdirError, match=r"config.ppo.num_seqs\s+\"<absent>\" -> null"):
        wd.prepare(c, str(tmp_path))  # without the defaults: the old behaviour
    assert wd.prepare(c, str(tmp_path), defaults=defaults) is None
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(wd.WorkdirError, match=r"config.ppo.num_seqs\s+null -> 4"):
        wd.prepare(with_keys(c, **{"ppo.num_seqs": 4}), str(tmp_path), defaults=defaults)


def _awpo(shared_root, data):
    """configs/awpo.py with its tokenizer and training file under ``shared_root``."""
    c = load("awpo")
    return with_keys(
        c,
        **{
            "tokenizer.path": str(shared_root / "assets" / "qwen2-tokenizer"),
            "task.train_path": str(data),
        },
    )


def _shared_copy(src, dst):
    (dst / "assets").mkdir(parents=True)
    shutil.copytree(src / "assets" / "qwen2-tokenizer", dst / "assets" / "qwen2-tokenizer")


def test_same_inputs_under_another_shared_dir_resume_and_a_changed_file_is_refused(
    tmp_path, shared
):
    a, b = tmp_path / "a", tmp_path / "b"
    _shared_copy(shared, a)
    _shared_copy(shared, b)
    rows = (shared / "data" / "toolrl" / "test.parquet").read_bytes()
    for root in (a, b):
        (root / "train.parquet").write_bytes(rows)
    work = tmp_path / "run"
    first = _awpo(a, a / "train.parquet")
    fp = inputs_lib.fingerprints(_spec(first))
    assert set(fp) == {"tokenizer.path", "task.train_path"}
    assert wd.prepare(first, str(work), inputs=fp) is None
    assert json.loads((work / "inputs.json").read_text()) == fp
    _outputs(work)
    # the shared folder moved: other paths, the same contents -> resumes
    moved = _awpo(b, b / "train.parquet")
    assert wd.prepare(moved, str(work), inputs=inputs_lib.fingerprints(_spec(moved))) is None
    # another tokenizer at the moved path is a difference (the path is listed)
    tok_config = b / "assets" / "qwen2-tokenizer" / "tokenizer_config.json"
    original = tok_config.read_bytes()
    tok_config.write_text("{}")
    with pytest.raises(wd.WorkdirError, match="config.tokenizer.path"):
        wd.prepare(moved, str(work), inputs=inputs_lib.fingerprints(_spec(moved)))
    tok_config.write_bytes(original)
    # the training file changed in place: refused, naming the key and the file
    data = b / "train.parquet"
    data.write_bytes(rows[: len(rows) // 2] + rows[len(rows) // 2 :][::-1])
    changed = inputs_lib.fingerprints(_spec(moved))
    with pytest.raises(wd.WorkdirError) as e:
        wd.prepare(moved, str(work), inputs=changed)
    msg = str(e.value)
    assert "input files changed" in msg and f"config.task.train_path={str(data)!r}" in msg
    assert "tokenizer" not in msg and "--config.resume=force" in msg
    # resume=force continues on the new file and records its fingerprint
    assert wd.prepare(with_keys(moved, resume="force"), str(work), inputs=changed) is None
    assert json.loads((work / "inputs.json").read_text()) == changed
    assert wd.prepare(moved, str(work), inputs=changed) is None


def test_a_missing_data_file_is_a_config_error_naming_the_key(tmp_path):
    from mojax.config import ConfigError

    c = with_keys(load("grpo"), **{"task.train_path": str(tmp_path / "nope.jsonl")})
    with pytest.raises(ConfigError, match=r"config.task.train_path=.*nope.jsonl.*no such file"):
        inputs_lib.check_files(_spec(c))


def _qa_file(path, questions):
    path.write_text(
        "".join(
            json.dumps({"id": str(i), "question": q, "answer": f"a{i}"}) + "\n"
            for i, q in enumerate(questions)
        )
    )
    return str(path)


def test_example_ids_that_repeat_across_files_get_their_own_prompts(tmp_path, qwen2_tokenizer_dir):
    """qa takes ids from the file: train, eval and validation files all numbered 0..3, and a repeat
    inside the training file. Each example keeps its own prompt and a distinct id."""
    from mojax.models import load_tokenizer
    from mojax.rl.episodes import EpisodeRunner
    from mojax.tasks.framework.splits import file_splits
    from mojax.tasks.qa import QATask

    train = _qa_file(tmp_path / "train.jsonl", ["who?", "what?", "where?", "when?"])
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    (tmp_path / "train.jsonl").write_text("\n".join(lines + [lines[0].replace("who?", "why?")]))
    held = _qa_file(tmp_path / "eval.jsonl", ["how?", "which?", "whose?", "whom?"])
    val = _qa_file(tmp_path / "val.jsonl", ["whence?", "whither?", "how many?", "how much?"])
    task = QATask()
    spec = types.SimpleNamespace(train_path=train, eval_path=held, val_path=val, num_eval=4)
    splits = file_splits(task, spec)
    assert [ex.id for ex in splits.train] == ["0", "1", "2", "3", "0#2"]
    assert [ex.id for ex in splits.test] == ["eval:0", "eval:1", "eval:2", "eval:3"]
    assert [ex.id for ex in splits.validation] == ["val:0", "val:1", "val:2", "val:3"]
    runner = EpisodeRunner(
        types.SimpleNamespace(task=types.SimpleNamespace(num_answers=0)),
        task,
        load_tokenizer(qwen2_tokenizer_dir),
        sampler=None,
    )
    tok = runner.tokenizer
    for ex in splits.train + splits.test + splits.validation:  # train first: it fills the cache
        text = tok.decode(runner.prompt_ids(ex))
        assert ex.messages[0]["content"].split("Question: ")[-1][:6] in text
    first, again = splits.train[0], splits.train[4]
    assert runner.prompt_ids(first) != runner.prompt_ids(again)
    assert runner.prompt_ids(splits.train[0]) != runner.prompt_ids(splits.test[0])
    # the same id with the same record still hits the cache
    assert runner.prompt_ids(first) is runner.prompt_ids(first)


def test_resumed_steps_do_not_repeat_in_transcripts(tmp_path):
    """The run logged steps 1-3 (transcripts included) after its step-2 checkpoint was the last:
    the resumed writer drops step 3 from both files."""
    for step in (0, 1, 2, 3):
        with log_lib.MetricsWriter(tmp_path, resume_step=step - 1 if step else None) as w:
            w.write(step, {"loss": float(step)})
        if step:
            log_lib.write_transcripts(tmp_path, step, [{"prompt_id": "p", "rewards": [step]}])
    assert [r["step"] for r in log_lib.read_transcripts(tmp_path)] == [1, 2, 3]
    with log_lib.MetricsWriter(tmp_path, resume_step=2):
        pass
    assert [r["step"] for r in log_lib.read_metrics(tmp_path)] == [0, 1, 2]
    assert [r["step"] for r in log_lib.read_transcripts(tmp_path)] == [1, 2]
    with log_lib.MetricsWriter(tmp_path, resume_step=None):  # a fresh start empties both
        pass
    assert log_lib.read_transcripts(tmp_path) == []
