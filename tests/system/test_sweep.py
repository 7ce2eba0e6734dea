"""``launch/sweep.py`` (issue 12, item 8): every point is validated before anything is launched,
tuple values survive the comma split, a failed point does not stop the others, and a launch script
(``sbatch launch/slurm.sh``) gets its own arguments. Launchers here are fakes that record their
argv; no job is ever submitted."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SWEEP = REPO / "launch" / "sweep.py"

_SWEEP_FLAGS = ("config", "workdir", "sweep", "launcher", "launcher_args", "dry")


@contextlib.contextmanager
def _registered(own: dict):
    """absl's process-wide registry with the flags ``own`` in place of any of the same name
    (``mojax.main``'s ``--config`` and ``--workdir``, which ``mojax_cli`` runs in this process):
    each would otherwise be a ``DuplicateFlagError`` for the other. Put back as it was after."""
    from absl import flags

    held = {n: flags.FLAGS[n] for n in _SWEEP_FLAGS if n in flags.FLAGS}
    for name in held:
        delattr(flags.FLAGS, name)
    for name, flag in own.items():
        flags.FLAGS[name] = flag
    try:
        yield flags.FLAGS
    finally:
        flags.FLAGS.unparse_flags()
        for name in [n for n in _SWEEP_FLAGS if n in flags.FLAGS]:
            delattr(flags.FLAGS, name)
        for name, flag in held.items():
            flags.FLAGS[name] = flag


def _load_sweep():
    """``launch/sweep.py`` as a module, and its absl flags (out of the registry between runs)."""
    from absl import flags

    spec = importlib.util.spec_from_file_location("launch_sweep", SWEEP)
    module = importlib.util.module_from_spec(spec)
    own = {}
    with _registered({}):
        spec.loader.exec_module(module)
        own.update({n: flags.FLAGS[n] for n in _SWEEP_FLAGS})
    return module, own


sweep, _SWEEP_OWN_FLAGS = _load_sweep()

RECORDER = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
sys.exit(3 if any("config.seed=1" in a for a in sys.argv) else 0)
"""


def run_sweep(*args, env=None):
    """``python launch/sweep.py *args`` in this process (from the repository, with ``env`` set):
    ``main`` on the parsed flags, as ``app.run`` calls it. The points it launches (the fake
    launchers of ``recorder``) are real processes."""
    argv = [str(SWEEP), *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as m, _registered(_SWEEP_OWN_FLAGS) as registry:
        for key, value in (env or {}).items():
            m.setenv(key, value)
        m.chdir(REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = sweep.main(registry(argv))
            except SystemExit as e:
                code = e.code
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def commands(stdout: str) -> list[list[str]]:
    return [shlex.split(line) for line in stdout.splitlines() if "mojax.main" in line]


@pytest.fixture
def recorder(tmp_path):
    """A fake launcher (and a fake ``sbatch`` / ``srun`` on PATH) appending its argv to a file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("record", "sbatch", "srun"):
        path = bin_dir / name
        path.write_text(RECORDER.format(python=sys.executable))
        path.chmod(0o755)
    record = tmp_path / "record.jsonl"
    env = {"RECORD": str(record), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def calls():
        if not record.exists():
            return []
        return [json.loads(x) for x in record.read_text().splitlines()]

    return env, calls


def test_split_values_keeps_tuples_and_quotes():
    assert sweep.split_values("0,1,2") == ["0", "1", "2"]
    assert sweep.split_values("(1,2,4),(1,4)") == ["(1,2,4)", "(1,4)"]
    assert sweep.split_values("'a,b',[1,(2,3)],{}") == ["'a,b'", "[1,(2,3)]", "{}"]
    for bad in ("(1,2", "1,2)", "'a,b", "(1,2]"):
        with pytest.raises(ValueError):
            sweep.split_values(bad)


def test_docstring_example_runs_dry(tmp_path):
    text = sweep.__doc__
    example = text[text.index("python launch/sweep.py") : text.index("[--dry]")]
    argv = shlex.split(example.replace("\\\n", " "))[2:]
    argv = [a for a in argv if not a.startswith("--workdir=")] + [f"--workdir={tmp_path}/s"]
    proc = run_sweep(*argv, "--dry")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cmds = commands(proc.stdout)
    assert len(cmds) == 3 * 2 * 2  # seeds x learning rates x eval.ks
    assert len({c[4] for c in cmds}) == 12  # one workdir each
    assert not (tmp_path / "s").exists()  # --dry writes nothing


def test_unknown_key_is_caught_by_dry_before_anything(tmp_path, recorder):
    env, calls = recorder
    proc = run_sweep(
        "--config=configs/grpo.py",
        f"--workdir={tmp_path}/s",
        "--sweep=config.seed=0,1",
        "--sweep=config.optim.lr=1e-6,3e-6",
        "--launcher=record",
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "--config.optim.lr=1e-6: no such config key 'optim'" in proc.stderr
    assert "4 of 4 point(s) invalid; nothing launched" in proc.stderr
    assert calls() == [] and not (tmp_path / "s").exists()
    dry = run_sweep(
        "--config=configs/grpo.py", f"--workdir={tmp_path}/s", "--sweep=config.optim.lr=1", "--dry"
    )
    assert dry.returncode == 2 and "no such config key 'optim'" in dry.stderr


def test_one_invalid_point_stops_the_sweep_before_the_first_launch(tmp_path, recorder):
    env, calls = recorder
    proc = run_sweep(
        "--config=configs/grpo.py",
        f"--workdir={tmp_path}/s",
        "--sweep=config.eval.ks=(1,2,4),(1,64)",  # the eval pool is 4 samples: k=64 is refused
        "--launcher=record",
        env=env,
    )
    assert proc.returncode == 2
    assert "1 of 2 point(s) invalid" in proc.stderr and "config.eval.ks" in proc.stderr
    assert calls() == []


def test_tuple_values_reach_the_run_intact(tmp_path, recorder):
    env, calls = recorder
    proc = run_sweep(
        "--config=configs/grpo.py",
        f"--workdir={tmp_path}/s",
        "--sweep=config.eval.ks=(1,2,4),(1,4)",
        "--launcher=record",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = calls()
    assert [a[-1] for a in got] == ["--config.eval.ks=(1,2,4)", "--config.eval.ks=(1,4)"]
    assert got[0][:3] == [sys.executable, "-m", "mojax.main"]
    workdirs = [a[4].removeprefix("--workdir=") for a in got]
    assert len(set(workdirs)) == 2 and all(
        re.fullmatch(r"[\w.=+-]+", os.path.basename(w)) for w in workdirs
    )
    saved = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert [r["point"]["config.eval.ks"] for r in saved] == ["(1,2,4)", "(1,4)"]


def test_failed_point_does_not_stop_the_others(tmp_path, recorder):
    env, calls = recorder
    os.makedirs(tmp_path / "s" / "seed=3")
    (tmp_path / "s" / "seed=3" / "done").write_text("40\n")
    proc = run_sweep(
        "--config=configs/grpo.py",
        f"--workdir={tmp_path}/s",
        "--sweep=config.seed=0,1,2,3",  # the recorder exits 3 for seed=1
        "--launcher=record",
        env=env,
    )
    assert proc.returncode == 1
    seeds = [a[-1] for a in calls()]
    assert seeds == ["--config.seed=0", "--config.seed=1", "--config.seed=2"]  # 3 was done
    assert "skip (done)" in proc.stdout
    assert "1 of 4 point(s) failed" in proc.stderr and "exit 3" in proc.stderr
    assert f"{tmp_path}/s/seed=1" in proc.stderr


def test_slurm_launcher_gets_config_and_workdir(tmp_path, recorder):
    env, calls = recorder
    proc = run_sweep(
        "--config=configs/grpo.py:steps=4",
        f"--workdir={tmp_path}/s",
        "--sweep=config.seed=0,2",
        "--launcher=sbatch --nodes=2 launch/slurm.sh",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    submitted = calls()
    wd = f"{tmp_path}/s/seed=0"
    assert submitted[0] == [
        "--nodes=2",
        "launch/slurm.sh",
        "configs/grpo.py:steps=4",
        wd,
        "--config.seed=0",
    ]
    # what slurm.sh then runs (with a fake srun): the same run as without a launcher
    script = subprocess.run(
        ["bash", *submitted[0][1:]],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert script.returncode == 0, script.stderr
    srun = calls()[-1]
    assert srun == [
        "--kill-on-bad-exit=1",
        "python",
        "-m",
        "mojax.main",
        "--config=configs/grpo.py:steps=4",
        f"--workdir={wd}",
        "--config.seed=0",
    ]


def test_slurm_script_refuses_a_python_command():
    proc = subprocess.run(
        ["bash", "launch/slurm.sh", sys.executable, "-m", "mojax.main"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "CONFIG must be a config file" in proc.stderr
