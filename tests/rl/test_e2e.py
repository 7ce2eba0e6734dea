"""End to end: every method config's tiny default runs (a few steps), the CLI validates configs before
compiling, a kill -9 mid-run resumes to a bitwise-identical end, and the paper-scale dry run fits an
8-device mesh."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from mojax_test_utils import compile_cache_env, load_config, persistent_compilation_cache, shrink

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.stem for p in (REPO / "configs").glob("*.py"))
PUBLIC_KEYS = ("step", "reward/scalar/mean", "loss", "time/step_s")


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """A persistent compilation cache for this module's runs only (the setting is process-wide:
    it is put back, and the cache closed, when the module ends)."""
    with persistent_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_config_runs_end_to_end(name, tmp_path, request):
    if name == "awpo":
        request.getfixturevalue("shared")  # skips with a reason when ../shared is absent
    from mojax.rl import trainer
    from mojax.tasks import build_task

    c = shrink(load_config(name))
    summary = trainer.run(c, str(tmp_path))
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(c.steps + 1))
    for r in records[1:]:
        for key in PUBLIC_KEYS:
            assert key in r, (name, key)
        for obj in build_task(c.task).objective_names:
            assert f"reward/{obj}/mean" in r
        assert np.isfinite(r["loss"])
    assert "eval/accuracy" in records[-1] and "eval/tool_calls" in records[-1]
    if c.paretopo.enabled:
        assert {"pareto/hv", "pareto/r_pareto", "pareto/archive_size"} <= set(records[-1])
    assert (tmp_path / "done").exists() and (tmp_path / "plots" / "rewards.png").exists()
    assert "eval/accuracy" in summary
    if c.steps:
        assert (tmp_path / "checkpoints" / str(c.steps)).is_dir()


def _cli(workdir, *flags, env=None, **kw):
    cmd = [sys.executable, "-m", "mojax.main", f"--workdir={workdir}", *flags]
    kw.setdefault("stderr", subprocess.STDOUT)
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_cli_rejects_bad_configs_before_compiling(tmp_path):
    p = _cli(tmp_path, "--config=configs/paretopo.py", "--config.ppo.clip_hihg=0.3")
    out, _ = p.communicate(timeout=120)
    assert p.returncode != 0 and "clip_hihg" in out
    p = _cli(
        tmp_path,
        "--config=configs/paretopo.py",
        "--config.estimator=ppo_rank",
        "--config.ppo.agg=token-meen",
    )
    out, _ = p.communicate(timeout=120)
    assert p.returncode != 0
    assert "config.estimator: 'ppo_rank' is not allowed" in out
    assert (
        "config.ppo.agg: 'token-meen' is not allowed" in out and "did you mean 'token-mean'" in out
    )
    p = _cli(tmp_path, "--config=configs/paretopo.py:modle=tiny")
    out, _ = p.communicate(timeout=120)
    assert p.returncode != 0 and "'modle' is unknown" in out
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    "flags, says",
    [
        (
            ["--config=configs/paretopo.py:modle=tiny"],
            "config argument 'modle' is unknown; allowed:",
        ),
        (
            ["--config=configs/paretopo.py", "--config.ppo.clip_hihg=0.3"],
            "did you mean 'clip_high'",
        ),
        (["--config=configs/paretopo.py", "--config.steps=abc"], "--config.steps=abc"),
        (
            ["--config=configs/grpo.py", "--config.ppo.agg=token-meen"],
            "config.ppo.agg: 'token-meen' is not allowed; allowed values: ['token-mean',",
        ),
    ],
)
def test_cli_config_errors_exit_2_without_traceback(tmp_path, flags, says):
    p = _cli(tmp_path, *flags, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 2, out + err
    assert err.startswith("mojax: invalid config\n") and says in err, err
    assert "Traceback" not in out + err and "add --verbosity=1 for the traceback" in err
    assert not (tmp_path / "config.json").exists()
    p = _cli(tmp_path, *flags, "--verbosity=1", stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=300)
    assert p.returncode not in (0, 2) and "Traceback" in err


def _final_params(workdir):
    import orbax.checkpoint as ocp

    from mojax.infra.checkpoint import Checkpointer

    steps = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    with ocp.StandardCheckpointer() as ck:
        state = ck.restore(workdir / "checkpoints" / str(steps[-1]) / "state")
    host = json.loads((workdir / "checkpoints" / str(steps[-1]) / "host" / "metadata").read_text())
    del Checkpointer
    return state, host


def _metrics_without_time(workdir):
    out = []
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.append({k: v for k, v in r.items() if not k.startswith("time/")})
    return out


@pytest.mark.slow
@pytest.mark.full  # not in CI: the staleness-1 kill -9 (test_async_loop) is bitwise too
def test_kill_9_then_resume_ends_bitwise_identical(tmp_path):
    flags = [
        "--config=configs/paretopo.py",
        "--config.steps=4",
        "--config.checkpoint_every=1",
        "--config.sft.steps=20",
        "--config.task.num_eval=4",
        "--config.rollout.prompts_per_step=2",
        "--config.rollout.num_samples=4",
        "--config.eval_every=2",
        "--config.paretopo.stage1_steps=2",
        "--config.paretopo.validate_every=1",
        "--config.sft.batch_size=16",
    ]
    env = compile_cache_env(tmp_path / "cache")
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    p = _cli(straight, *flags, env=env)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    p = _cli(killed, *flags, env=env, start_new_session=True)
    deadline = time.time() + 900
    while not (killed / "checkpoints" / "2").is_dir():
        assert p.poll() is None and time.time() < deadline, "run ended before its step-2 checkpoint"
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not (killed / "done").exists()
    p = _cli(killed, *flags, env=env)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    a, ha = _final_params(straight)
    b, hb = _final_params(killed)
    import jax

    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ha == hb
    assert _metrics_without_time(straight) == _metrics_without_time(killed)


_STOP_FLAGS = [
    "--config=configs/grpo.py",
    "--config.steps=4",
    "--config.checkpoint_every=100",  # only the final save: a mid-run checkpoint is the signal's
    "--config.eval_every=2",
    "--config.sft.steps=80",
    "--config.sft.batch_size=16",
    "--config.sft.num_examples=64",
    "--config.task.num_train=64",
    "--config.task.num_eval=4",
    "--config.rollout.prompts_per_step=2",
    "--config.rollout.num_samples=4",
    "--config.eval.ks=(1,)",
    "--config.eval.num_samples=1",
    "--config.ppo.kl_coef=0.01",  # a resumed run must rebuild the initial policy as its reference
]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """The uninterrupted run the interrupted ones are compared with (and its compilation cache)."""
    root = tmp_path_factory.mktemp("straight")
    env = compile_cache_env(root / "cache")
    p = _cli(root / "run", *_STOP_FLAGS, env=env)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    return root / "run", env


def _signal_when(workdir, env, sig, trigger):
    """Runs ``_STOP_FLAGS`` and sends ``sig`` when a stdout line starts with ``trigger``."""
    p = _cli(workdir, *_STOP_FLAGS, env=env)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith(trigger):
            p.send_signal(sig)
            break
    lines += p.stdout.readlines()
    p.wait(timeout=900)
    return p.returncode, "".join(lines)


def _state_params(step_dir):
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ck:
        return ck.restore(step_dir / "state")["params"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, trigger, steps",
    [
        (signal.SIGTERM, "[1/4", (1, 2, 3)),  # mid-run: the next rollout is abandoned
        (signal.SIGINT, "SFT 80/80", ()),  # after the warm start: the initial evaluation
    ],
    ids=["sigterm_mid_run", "sigint_after_sft"],
)
def test_signal_checkpoints_exits_128_plus_n_and_resumes_identical(
    straight_run, tmp_path, sig, trigger, steps
):
    """A signal abandons the work under way and saves the last completed state (a finished RL
    step, saved on the signal: checkpoint_every is too large to have saved it otherwise; after the
    warm start, nothing new: the SFT checkpoint is the state) and exits 128 + n; the rerun ends
    with the params, host state and metrics of the uninterrupted run."""
    import re

    import jax

    straight, env = straight_run
    stopped = tmp_path / "stopped"
    rc, out = _signal_when(stopped, env, sig, trigger)
    name = signal.Signals(sig).name
    assert rc == 128 + sig, out[-3000:]
    assert f"got {name}; abandoning the work under way" in out and "Traceback" not in out
    assert "within the 30 s grace" in out or not steps, out[-3000:]
    if steps:
        pattern = (
            rf"mojax: stopped by {name} after (?:the update of )?RL step (\d+)[^;]*; "
            r"checkpoint saved in (\S+) \("
        )
        m = re.search(pattern, out)
        assert m, out[-3000:]
        step = int(m.group(1))
        assert step in steps and m.group(2) == str(stopped / "checkpoints" / str(step))
        assert sorted(os.listdir(stopped / "checkpoints")) == [str(step)]
    else:
        assert f"mojax: stopped by {name} before RL step 1 (the initial evaluation was " in out
        rl = stopped / "checkpoints"
        assert not rl.exists() or not os.listdir(rl)
        assert sorted(os.listdir(stopped / "checkpoints_sft")) == ["80"]
    assert not (stopped / "done").exists()
    p = _cli(stopped, *_STOP_FLAGS, env=env)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    a, ha = _final_params(straight)
    b, hb = _final_params(stopped)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ha == hb
    assert _metrics_without_time(straight) == _metrics_without_time(stopped)
    # not a vacuous comparison: RL moved the params away from the SFT warm start
    sft = _state_params(straight / "checkpoints_sft" / "80")
    final = _state_params(straight / "checkpoints" / "4")
    assert any(
        not np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(sft), jax.tree.leaves(final), strict=True)
    )


@pytest.mark.slow
def test_paper_scale_dry_run_on_8_devices(tmp_path, qwen2_tokenizer_dir):
    # the paper-scale run uses the Qwen tokenizer (its checkpoint's); with a self-built one the dry
    # run sizes the resized vocabulary, as the run would (builders.build_model_config)
    p = _cli(
        tmp_path,
        "--config=configs/paretopo.py:paper=true,model=qwen2.5-math-1.5b,task=math,data=2,fsdp=4",
        f"--config.tokenizer.path={qwen2_tokenizer_dir}",
        "--config.dry_run=true",
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
    )
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out[-3000:]
    assert (
        "(8 devices)" in out
        and "1.544B params" in out
        and "lowered with explicit shardings: OK" in out
    )
