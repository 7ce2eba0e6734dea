"""Bad input is one clear error naming the key or the file, before anything is compiled: optimizer
values that cannot train, a negative seed, a missing or non-UTF-8 data file (or none for a task
that reads files), a model checkpoint without its config.json (training and dry run), and a model
checkpoint fed a vocabulary built for another run. Through ``python -m mojax.main``'s entry where the
behaviour is the command line's (exit code 2, no traceback): in-process (``mojax_cli.run_cli``), plus
one real subprocess of the CLI."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from mojax_cli import run_cli
from mojax_test_utils import load_config

from mojax.config import ConfigError
from mojax.rl import trainer

REPO = pathlib.Path(__file__).resolve().parents[3]


def _cli(workdir, *flags):
    return run_cli(f"--workdir={workdir}", *flags)


def _set(c, key, value):
    node = c
    *path, last = key.split(".")
    for p in path:
        node = node[p]
    with c.unlocked():
        node[last] = value
    return c


@pytest.mark.parametrize(
    "key, value",
    [
        ("optimizer.learning_rate", float("inf")),
        ("optimizer.learning_rate", float("nan")),
        ("optimizer.b1", 1.0),
        ("optimizer.b2", -0.1),
        ("optimizer.eps", 0.0),
        ("optimizer.eps", float("inf")),
        ("optimizer.weight_decay", float("inf")),
        ("optimizer.weight_decay", -0.01),
        ("optimizer.max_grad_norm", float("inf")),
        ("sft.learning_rate", float("inf")),
        ("seed", -1),
    ],
)
def test_values_that_cannot_train_are_refused_before_building(tmp_path, key, value):
    c = _set(load_config("grpo"), key, value)
    with pytest.raises(ConfigError) as e:
        trainer.run(c, str(tmp_path / "w"))
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(f"config.{key}:"), e.value
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    "flag, says",
    [
        ("--config.optimizer.learning_rate=inf", "config.optimizer.learning_rate: inf is not a"),
        ("--config.seed=-3", "config.seed: -3 is out of range [0, 4294967295]"),
    ],
)
def test_cli_infinite_learning_rate_and_negative_seed_exit_2(tmp_path, flag, says):
    p = _cli(tmp_path / "w", "--config=configs/grpo.py", flag)
    assert p.returncode == 2, p.stdout + p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "w").exists()


def test_cli_subprocess_smoke_infinite_learning_rate_exits_2(tmp_path):
    """The one real ``python -m mojax.main`` process of a refusal (the others run the same entry
    in-process, ``mojax_cli.run_cli``): absl's ``app.run``, exit 2, one block, no traceback."""
    p = subprocess.run(
        [sys.executable, "-m", "mojax.main", f"--workdir={tmp_path / 'w'}",
         "--config=configs/grpo.py", "--config.optimizer.learning_rate=inf"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 2, p.stdout + p.stderr
    assert "mojax: invalid config\n" in p.stderr and "Traceback" not in p.stderr
    assert "config.optimizer.learning_rate: inf is not a" in p.stderr
    assert not (tmp_path / "w").exists()


def test_cli_missing_train_path_exits_2_naming_the_key(tmp_path):
    missing = tmp_path / "no" / "train.jsonl"
    p = _cli(tmp_path / "w", f"--config=configs/grpo.py:task=qa,train_path={missing}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"config.task.train_path={str(missing)!r}: no such file" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "w").exists()


def test_cli_file_backed_task_without_train_path_exits_2_naming_the_key(tmp_path):
    p = _cli(tmp_path / "w", "--config=configs/saw.py:task=toolrl")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "config.task.train_path: none given; task 'toolrl'" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "w").exists()


def test_two_processes_stop_together_at_once_on_a_missing_train_path(tmp_path):
    """Both processes of a 2-process job (no launcher that kills the others) exit 2 within seconds
    of each other, each naming the key."""
    from socket import socket

    with socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    missing = tmp_path / "train.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "mojax.main",
        f"--workdir={tmp_path / 'w'}",
        f"--config=configs/grpo.py:task=qa,train_path={missing}",
        f"--coordinator_address=127.0.0.1:{port}",
        "--num_processes=2",
    ]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [
        subprocess.Popen(
            [*cmd, f"--process_id={i}"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    ends = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        ends.append(time.time())
        assert p.returncode == 2, out + err
        assert "config.task.train_path=" in err and "no such file" in err
    assert abs(ends[1] - ends[0]) < 20, ends


def test_cli_checkpoint_with_the_self_built_tokenizer_exits_2_naming_both_keys(tmp_path):
    from mojax import models

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(models.get_variant("tiny-qwen2").to_hf_dict()))
    p = _cli(tmp_path / "w", "--config=configs/grpo.py", f"--config.model.checkpoint={ckpt}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "config.tokenizer.path: 'build'" in p.stderr and "config.model.checkpoint=" in p.stderr
    assert "--config.tokenizer.path=''" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "what, flags",
    [("no such directory", ()), ("no config.json in it", ("--config.dry_run=true",))],
)
def test_cli_checkpoint_without_config_json_exits_2_naming_the_key(tmp_path, what, flags):
    ckpt = tmp_path / "ckpt"
    if what != "no such directory":
        ckpt.mkdir()  # e.g. a parent folder of the HF directory
    p = _cli(
        tmp_path / "w", f"--config=configs/grpo.py:model=qwen2.5-0.5b,checkpoint={ckpt}", *flags
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"config.model.checkpoint={str(ckpt)!r}: {what}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "w").exists()


def test_cli_non_utf8_data_file_names_the_file_and_the_byte_offset(tmp_path):
    good = json.dumps({"id": "0", "question": "who?", "answer": "a"}) + "\n"
    bad = json.dumps({"id": "1", "question": "caf\u00e9?", "answer": "b"}, ensure_ascii=False)
    data = tmp_path / "train.jsonl"
    data.write_bytes((good * 3).encode() + bad.encode("latin-1") + b"\n" + good.encode())
    offset = len((good * 3).encode()) + bad.index("\u00e9")
    p = _cli(tmp_path / "w", f"--config=configs/grpo.py:task=qa,train_path={data}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "mojax: invalid data file" in p.stderr and "Traceback" not in p.stderr
    assert f"{data}: not UTF-8 text: byte offset {offset} (line 4)" in p.stderr, p.stderr
