"""The workdir contract (``mojax.infra.workdir``, issue 14): the default name carries the config argument,
``config.json`` is saved, a changed config is refused (listing old -> new) unless
``--config.resume=force|new``, and a finished run says how to extend it. The CLI tests check that
the refusal happens before anything is built (exit 2, no traceback) and that a finished run exits 0
(``python -m mojax.main``'s entry run in-process, ``mojax_cli.run_cli``).
"""

import json
import os
import pathlib
import subprocess

import pytest
from mojax_cli import run_cli
from mojax_test_utils import with_keys

from mojax.config import ConfigError
from mojax.infra import logbook as log_lib
from mojax.infra import workdir as wd

REPO = pathlib.Path(__file__).resolve().parents[3]


def load(name, arg=None):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"cfg_{name}", REPO / "configs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("configs/saw.py", "workdir/saw"),
        ("configs/saw.py:mode=gdpo", "workdir/saw_mode=gdpo"),
        (
            "/abs/configs/grpo.py:model=qwen2.5-1.5b,task=math",
            "workdir/grpo_model=qwen2.5-1.5b_task=math",
        ),
        ("configs/grpo.py:checkpoint=/ckpt/Qwen 2.5/", "workdir/grpo_checkpoint=_ckpt_Qwen_2.5"),
        ("configs/grpo.py:", "workdir/grpo"),
    ],
)
def test_default_workdir_carries_the_config_arg(spec, expected):
    assert wd.default_workdir(spec) == expected


def test_default_workdir_of_a_long_arg_is_short_and_distinct():
    arg = "task=toolrl,train_path=/data/" + "x" * 300
    a = wd.default_workdir(f"configs/saw.py:{arg}a")
    b = wd.default_workdir(f"configs/saw.py:{arg}b")
    assert a != b and len(os.path.basename(a)) <= 100 and a.startswith("workdir/saw_task=toolrl")


def test_config_diff_ignores_only_the_resumable_and_logging_keys():
    old = load("grpo")
    new = with_keys(
        old,
        steps=99,
        eval_every=3,
        checkpoint_every=7,
        keep_checkpoints=9,
        transcripts_per_step=0,
        resume="force",
        **{"wandb.project": "another", "wandb.mode": "offline"},
    )
    assert wd.config_diff(old, new) == {}
    changed = with_keys(new, **{"optimizer.learning_rate": 3e-4, "advantage.weights": (0.5, 0.5)})
    assert wd.config_diff(old, changed) == {
        "advantage.weights": ([0.6, 0.4], [0.5, 0.5]),
        "optimizer.learning_rate": (1e-4, 3e-4),
    }
    # grpo vs saw:mode=gdpo: the estimator and its keywords differ
    diff = wd.config_diff(old, load("saw", "mode=gdpo"))
    assert diff["estimator"] == ("grpo", "saw_gdpo")
    assert diff["advantage.fallback"] == ("<absent>", True)


def test_saved_config_round_trips_without_a_diff(tmp_path):
    c = load("paretopo")
    assert wd.prepare(c, str(tmp_path)) is None
    saved = log_lib.read_config(tmp_path)
    assert wd.config_diff(saved, c) == {}
    assert saved.estimator == c.estimator and list(saved.eval.ks) == list(c.eval.ks)


def fake_run(workdir, config, steps_done=None):
    """A workdir as a training run leaves it: config.json, a checkpoint dir, metrics, ``done``."""
    assert wd.prepare(config, str(workdir)) is None
    (workdir / "checkpoints" / "2").mkdir(parents=True)
    (workdir / "metrics.jsonl").write_text(json.dumps({"step": 2, "eval/accuracy": 0.5}) + "\n")
    if steps_done is not None:
        (workdir / "done").write_text(f"{steps_done}\n")


def test_changed_config_is_refused_listing_old_and_new(tmp_path):
    fake_run(tmp_path, load("grpo"))
    new = with_keys(load("saw", "mode=gdpo"), steps=80)
    with pytest.raises(wd.WorkdirError) as info:
        wd.prepare(new, str(tmp_path))
    msg = str(info.value)
    assert f"workdir {tmp_path} holds a run of a different config" in msg
    assert "config.estimator" in msg and '"grpo" -> "saw_gdpo"' in msg
    assert "config.steps" not in msg  # resumable
    assert "--config.resume=force" in msg and "--config.resume=new" in msg
    assert json.loads((tmp_path / "config.json").read_text())["estimator"] == "grpo"  # untouched


def test_force_continues_and_overwrites_config_json(tmp_path):
    fake_run(tmp_path, load("grpo"))
    new = with_keys(load("grpo"), resume="force", **{"optimizer.learning_rate": 5e-4})
    records = wd.prepare(new, str(tmp_path))  # written once the checkpoint restored (issue 49)
    assert isinstance(records, wd.Deferred)
    assert log_lib.read_config(tmp_path).optimizer.learning_rate != 5e-4
    records.write()
    assert log_lib.read_config(tmp_path).optimizer.learning_rate == 5e-4
    assert (tmp_path / "checkpoints" / "2").is_dir()  # kept: the run resumes from it
    # the next plain rerun of the forced config is accepted
    assert wd.prepare(with_keys(new, resume=""), str(tmp_path)) is None


def test_new_moves_the_old_workdir_aside(tmp_path):
    work = tmp_path / "run"
    fake_run(work, load("grpo"), steps_done=40)
    new = with_keys(load("saw"), resume="new")
    assert wd.prepare(new, str(work)) is None
    assert (tmp_path / "run.old-1" / "checkpoints" / "2").is_dir()
    assert sorted(os.listdir(work)) == ["config.json"]
    assert log_lib.read_config(work).estimator == "saw_grpo"
    assert wd.prepare(new, str(work)) is None  # again: the next free name
    assert (tmp_path / "run.old-2" / "config.json").is_file()


def test_a_run_that_left_no_outputs_is_not_a_run_to_protect(tmp_path):
    # it failed before its first checkpoint (e.g. a bad data path): the fixed config just runs
    assert wd.prepare(load("grpo"), str(tmp_path)) is None
    (tmp_path / "checkpoints").mkdir()  # the Checkpointer creates its directory at once
    (tmp_path / "tokenizer.model").write_bytes(b"x")
    assert wd.prepare(load("saw"), str(tmp_path)) is None
    assert log_lib.read_config(tmp_path).estimator == "saw_grpo"
    (tmp_path / "checkpoints_sft" / "20").mkdir(parents=True)  # now there is something to protect
    with pytest.raises(wd.WorkdirError, match='"saw_grpo" -> "grpo"'):
        wd.prepare(load("grpo"), str(tmp_path))


def test_outputs_without_config_json_are_refused(tmp_path):
    (tmp_path / "checkpoints" / "3").mkdir(parents=True)
    with pytest.raises(wd.WorkdirError, match="no config.json"):
        wd.prepare(load("grpo"), str(tmp_path))
    forced = wd.prepare(with_keys(load("grpo"), resume="force"), str(tmp_path))
    assert isinstance(forced, wd.Deferred)  # config.json written once the checkpoint restored
    forced.write()
    assert (tmp_path / "config.json").is_file()


def test_finished_run_says_how_to_extend(tmp_path):
    c = with_keys(load("grpo"), steps=40)
    fake_run(tmp_path, c, steps_done=40)
    finished = wd.prepare(c, str(tmp_path))
    assert isinstance(finished, wd.Finished)
    assert "already finished its 40 RL steps" in finished.message
    assert "--config.steps=80" in finished.message
    assert finished.summary == {"step": 2, "eval/accuracy": 0.5}
    # a larger steps resumes: not finished, and the stale done file is gone
    assert wd.prepare(with_keys(c, steps=50), str(tmp_path)) is None
    assert not (tmp_path / "done").exists()
    # a changed config is refused even when finished (the "new learning rate" case)
    (tmp_path / "done").write_text("40\n")
    with pytest.raises(wd.WorkdirError, match="optimizer.learning_rate"):
        wd.prepare(with_keys(c, **{"optimizer.learning_rate": 1.0}), str(tmp_path))


def test_bad_resume_value_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"config.resume: 'again' is not allowed; allowed"):
        wd.prepare(with_keys(load("grpo"), resume="again"), str(tmp_path))


def _cli(workdir, *flags, cwd=REPO):
    """``python -m mojax.main`` in-process (``mojax_cli.run_cli``)."""
    return run_cli(*([f"--workdir={workdir}"] if workdir else []), *flags, cwd=cwd)


def test_cli_refuses_a_changed_config_before_building(tmp_path):
    fake_run(tmp_path, load("grpo"))
    p = _cli(tmp_path, "--config=configs/saw.py:mode=gdpo")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "mojax: workdir refused" in p.stderr and '"grpo" -> "saw_gdpo"' in p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert not (tmp_path / "tokenizer.model").exists()  # nothing was built


def test_cli_finished_run_exits_0_without_training(tmp_path):
    fake_run(tmp_path, load("grpo"), steps_done=40)
    p = _cli(tmp_path, "--config=configs/grpo.py")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "already finished its 40 RL steps" in p.stdout and "--config.steps=80" in p.stdout
    assert "mojax: done" in p.stdout and not (tmp_path / "tokenizer.model").exists()


def test_cli_default_workdir_has_the_config_arg(tmp_path):
    # a finished run in the default workdir of saw.py:mode=gdpo, run from tmp_path as cwd
    c = load("saw", "mode=gdpo")
    fake_run(tmp_path / "workdir" / "saw_mode=gdpo", c, steps_done=c.steps)
    env_cfg = str(REPO / "configs" / "saw.py")
    p = _cli(None, f"--config={env_cfg}:mode=gdpo", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"workdir {tmp_path / 'workdir' / 'saw_mode=gdpo'}" in p.stdout
    assert "already finished" in p.stdout


def test_rerun_of_a_resume_new_command_resumes_it(tmp_path, capsys):
    work = tmp_path / "run"
    fake_run(work, load("grpo"))
    new = with_keys(load("saw"), resume="new", steps=40)
    assert wd.prepare(new, str(work)) is None  # the old run moved aside, a fresh start
    assert (tmp_path / "run.old-1" / "checkpoints" / "2").is_dir()
    # the new run checkpointed step 4, then was preempted; the same command runs again
    (work / "checkpoints" / "4").mkdir(parents=True)
    (work / "metrics.jsonl").write_text(json.dumps({"step": 4}) + "\n")
    capsys.readouterr()
    assert wd.prepare(new, str(work)) is None
    assert "holds the run this command started" in capsys.readouterr().out
    assert not (tmp_path / "run.old-2").exists()
    assert (work / "checkpoints" / "4").is_dir()
    assert (work / "metrics.jsonl").read_text() == json.dumps({"step": 4}) + "\n"
    (work / "done").write_text("40\n")  # and once it finished, the same command reports it
    assert isinstance(wd.prepare(new, str(work)), wd.Finished)
    # resume=new with another config still starts over
    assert wd.prepare(with_keys(new, **{"optimizer.learning_rate": 1.0}), str(work)) is None
    assert (tmp_path / "run.old-2" / "checkpoints" / "4").is_dir()


def test_only_damaged_checkpoints_refuse_a_fresh_start(tmp_path):
    work = tmp_path / "run"
    c = load("grpo")
    fake_run(work, c)
    ck = work / "checkpoints"
    os.rename(ck / "2", ck / "2.corrupt")
    (ck / "1.corrupt").mkdir()
    before = {f: (work / f).read_text() for f in ("config.json", "metrics.jsonl")}
    for mode in ("", "force"):
        with pytest.raises(wd.WorkdirError) as info:
            wd.prepare(with_keys(c, resume=mode), str(work))
        msg = str(info.value)
        assert f"workdir {work} holds no readable RL checkpoint" in msg
        assert "(1.corrupt, 2.corrupt)" in msg and "empty metrics.jsonl" in msg
        assert "--config.resume=new" in msg and f"mv {ck}/<step>.corrupt {ck}/<step>" in msg
    assert {f: (work / f).read_text() for f in before} == before
    (ck / "1").mkdir()  # a committed step beside the damaged ones: resumed from
    assert wd.prepare(c, str(work)) is None
    (ck / "1").rmdir()
    assert wd.prepare(with_keys(c, resume="new"), str(work)) is None  # starts over, keeps all
    assert (tmp_path / "run.old-1" / "checkpoints" / "2.corrupt").is_dir()


def test_cli_damaged_checkpoints_stop_the_run_and_a_rerun_is_refused(tmp_path):
    """The only step's files are damaged: the run moves it aside and stops (exit 3, nothing
    trained); the rerun is refused (exit 2) instead of training from step 0 and emptying the
    metrics."""
    fake_run(tmp_path, load("grpo"))  # checkpoints/2 holds no items: damaged
    metrics = (tmp_path / "metrics.jsonl").read_text()
    p = _cli(tmp_path, "--config=configs/grpo.py")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "mojax: checkpoint not restored" in p.stderr and "'state' is missing" in p.stderr
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2.corrupt"]
    p = _cli(tmp_path, "--config=configs/grpo.py")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "holds no readable RL checkpoint" in p.stderr and "--config.resume=new" in p.stderr
    assert (tmp_path / "metrics.jsonl").read_text() == metrics
    assert not (tmp_path / "lock").exists()  # released by both runs


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--workdir=gs://b/run"], "--workdir='gs://b/run' is a URL"),
        (["--config.model.checkpoint=gs://b/qwen"], "config.model.checkpoint: 'gs://b/qwen' is a"),
        (["--config.mode=eval", "--workdir=s3://b/run"], "--workdir='s3://b/run' is a URL"),
    ],
)
def test_cli_url_paths_are_refused_before_anything_is_built(tmp_path, flags, says):
    p = _cli(None, f"--config={REPO / 'configs' / 'grpo.py'}", *flags, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "mojax: invalid config" in p.stderr and says in p.stderr
    assert "gcloud storage cp" in p.stderr and "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []  # no local gs:/... or workdir folder


def test_tpu_vm_launcher_refuses_url_paths():
    p = subprocess.run(
        ["bash", str(REPO / "launch" / "tpu_vm.sh"), "tpu", "zone", "configs/grpo.py", "gs://b/r"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "gs://b/r" in p.stderr and "not a URL" in p.stderr
