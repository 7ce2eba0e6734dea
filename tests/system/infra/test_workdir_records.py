"""The workdir's records (issue 49): ``config.json`` and the other records are written durably;
a damaged ``config.json`` (empty, cut, not UTF-8) is one clear refusal naming the file and the
choices, ``resume=new`` works on it, ``python -m mojax.infra.workdir_restore`` rewrites it from the
copy a real checkpoint keeps; a ``resume=force`` whose checkpoint does not restore leaves
``config.json`` and ``done`` as they were; a non-UTF-8 line of ``metrics.jsonl`` is skipped with
a warning.
"""

import json
import logging
import os
import pathlib

import jax.numpy as jnp
import pytest
from mojax_test_utils import with_keys
from test_workdir import _cli, fake_run, load

from mojax.infra import jsonl
from mojax.infra import logbook as log_lib
from mojax.infra import workdir as wd
from mojax.infra.checkpoint import Checkpointer

REPO = pathlib.Path(__file__).resolve().parents[3]
GOOD = '{"estimator": "grpo", "steps": 40'  # the start of a config.json cut by a crash
DAMAGE = {
    "empty": (b"", "is empty (0 bytes; cut by a crash)"),
    "cut": (GOOD.encode(), "is not valid JSON (Expecting"),
    "not UTF-8": (b'{"estimator": "gr\xe9po"}', "is not UTF-8 text (byte offset 17: b'\\xe9')"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_config_json_is_one_refusal_naming_the_file_and_the_choices(tmp_path, case):
    raw, says = DAMAGE[case]
    c = load("grpo")
    fake_run(tmp_path, c, steps_done=20)
    (tmp_path / "config.json").write_bytes(raw)
    with pytest.raises(wd.WorkdirError) as info:
        wd.prepare(c, str(tmp_path))
    msg = str(info.value)
    assert f"workdir {tmp_path}: its {tmp_path / 'config.json'} {says}" in msg
    assert f"python -m mojax.infra.workdir_restore {tmp_path}" in msg
    assert "--config.resume=force" in msg and "--config.resume=new" in msg
    assert (tmp_path / "config.json").read_bytes() == raw  # nothing written


def test_cli_damaged_config_json_exits_2_and_resume_new_starts_over(tmp_path):
    work = tmp_path / "run"
    fake_run(work, load("grpo"), steps_done=20)
    (work / "config.json").write_bytes(GOOD.encode())
    p = _cli(work, "--config=configs/grpo.py")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "mojax: workdir refused" in p.stderr and "is not valid JSON" in p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    forced = wd.prepare(with_keys(load("grpo"), resume="force"), str(work))
    assert isinstance(forced, wd.Deferred)  # force: written only once the checkpoint restored
    assert (work / "config.json").read_bytes() == GOOD.encode()
    assert wd.prepare(with_keys(load("grpo"), resume="new"), str(work)) is None
    assert (tmp_path / "run.old-1" / "config.json").read_bytes() == GOOD.encode()
    assert log_lib.read_config(work).resume == "new" and not (work / "done").exists()


def _checkpoint_with_config(workdir, step, config):
    """A real orbax checkpoint step whose host state holds the run's config, as the trainer
    saves it (``mojax.rl.warm_start.saved_host``)."""
    with Checkpointer(workdir / "checkpoints", async_save=False) as ckpt:
        host = {"step": step, "config": wd.config_tree(config)}
        ckpt.save(step, {"w": jnp.arange(4.0)}, host, force=True)


def test_restore_config_rewrites_it_from_the_checkpoint_copy(tmp_path, capsys):
    c = with_keys(load("grpo"), **{"optimizer.learning_rate": 3e-4})
    fake_run(tmp_path, c)
    (tmp_path / "checkpoints" / "2").rmdir()
    _checkpoint_with_config(tmp_path, 2, c)
    _checkpoint_with_config(tmp_path, 4, c)
    (tmp_path / "config.json").write_bytes(b"")
    from mojax.infra.workdir_restore import (
        _main,  # python -m mojax.infra.workdir_restore, in-process
    )

    capsys.readouterr()
    assert _main(["x", str(tmp_path)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'config.json'} from the copy in checkpoint step 4" in out
    assert (tmp_path / "config.json.damaged").read_bytes() == b""
    assert log_lib.read_config(tmp_path).optimizer.learning_rate == 3e-4
    assert wd.prepare(c, str(tmp_path)) is None  # the rerun resumes
    with pytest.raises(wd.WorkdirError, match="0.0003 -> 0.001"):  # and checks as before
        wd.prepare(with_keys(c, **{"optimizer.learning_rate": 1e-3}), str(tmp_path))
    assert not (tmp_path / "lock").exists()


def test_restore_config_without_a_copy_says_so(tmp_path):
    fake_run(tmp_path, load("grpo"))  # checkpoints/2 holds no items: no copy
    from mojax.infra.workdir_restore import _main

    assert _main(["x", str(tmp_path)]) == 2


def test_saved_host_keeps_a_copy_of_the_config():
    import types

    from mojax.rl import warm_start
    from mojax.rl.state import HostState

    c = load("grpo")
    learner = types.SimpleNamespace(model_config=types.SimpleNamespace(lora=None))
    run = types.SimpleNamespace(spec=types.SimpleNamespace(resolved=c), learner=learner)
    out = warm_start.saved_host(run, HostState())
    assert out["config"] == json.loads(c.to_json_best_effort())
    assert HostState.from_dict(out) == HostState()


def test_cli_failed_force_leaves_config_json_and_done(tmp_path):
    """Issue 49: a ``resume=force`` whose checkpoint does not fit the model (a LoRA workdir
    resumed without LoRA) exits 3; ``config.json`` and ``done`` used to be rewritten first, so
    the original command was then refused as a config change."""
    c = load("grpo")
    fake_run(tmp_path, c, steps_done=20)
    (tmp_path / "checkpoints" / "2").rmdir()
    _checkpoint_with_config(tmp_path, 2, c)  # its tree is not the policy's: restore fails
    before = {f: (tmp_path / f).read_bytes() for f in ("config.json", "done")}
    p = _cli(tmp_path, "--config=configs/grpo.py", "--config.resume=force", "--config.seed=7")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "mojax: checkpoint not restored" in p.stderr
    assert {f: (tmp_path / f).read_bytes() for f in before} == before
    assert not (tmp_path / "inputs.json").exists()
    assert wd.prepare(c, str(tmp_path)) is None  # the original command is not refused


def test_records_are_written_durably(tmp_path, monkeypatch):
    """config.json, inputs.json, done and the metrics lines are fsynced, and so is the directory
    holding a renamed record."""
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(_name(fd)), real(fd))[1])
    c = load("grpo")
    wd.prepare(c, str(tmp_path), inputs={"task.train_path": "sha256:00"})
    assert {"config.json.tmp", "inputs.json.tmp", tmp_path.name} <= set(synced)
    synced.clear()
    jsonl.write_durable(tmp_path / "done", "40\n")
    assert synced == ["done.tmp", tmp_path.name]
    synced.clear()
    with log_lib.MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(1, {"loss": 1.0})
    assert "metrics.jsonl" in synced


def _name(fd):
    return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))


def test_a_non_utf8_metrics_line_is_skipped_with_a_warning(tmp_path, caplog):
    lines = [b'{"step": 1, "loss": 1.0}', b'{"step": 2, "lo\xffss": 2.0}', b'{"step": 3}']
    (tmp_path / "metrics.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING):
        assert jsonl.read_metrics(tmp_path) == [{"step": 1, "loss": 1.0}, {"step": 3}]
    assert f"{tmp_path / 'metrics.jsonl'} line 2 is not UTF-8 text" in caplog.text
    fake = with_keys(load("grpo"), steps=3)
    (tmp_path / "done").write_text("3\n")
    wd.prepare(fake, str(tmp_path / "x"))  # a finished run's summary reads the metrics
    (tmp_path / "config.json").write_text((tmp_path / "x" / "config.json").read_text())
    assert wd.prepare(fake, str(tmp_path)).summary == {"step": 3}
    with log_lib.MetricsWriter(tmp_path, resume_step=3, tensorboard=False):  # truncated on resume
        pass
    assert (tmp_path / "metrics.jsonl").read_bytes() == lines[0] + b"\n" + lines[2] + b"\n"


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_read_config_of_a_damaged_file_names_it_and_the_restore(tmp_path, case):
    """``mojax.infra.logbook.read_config`` (``python -m mojax.export`` reads the run's config with it)."""
    (tmp_path / "config.json").write_bytes(DAMAGE[case][0])
    with pytest.raises(ValueError) as info:
        log_lib.read_config(tmp_path)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 'config.json'} is damaged (")
    assert f"python -m mojax.infra.workdir_restore {tmp_path}" in msg
