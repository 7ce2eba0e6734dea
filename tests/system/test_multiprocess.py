"""Multi-controller runs on this machine: N real ``jax.distributed`` processes with gloo CPU
collectives, started by ``launch/local_cluster.py`` (or by SLURM's environment, auto-detected).

The reference for a 2-process run (1 CPU device each) is a 1-process run with 2 forced devices and
the same mesh: the same global program on the same shards, so every logged loss and reward agrees
(within 1e-5). A kill -9 of both processes after a checkpoint, then a 2-process restart, ends equal
to the uninterrupted 2-process run.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from mojax_test_utils import cluster_tail, compile_cache_env

REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCHER = [sys.executable, str(REPO / "launch" / "local_cluster.py")]

# a short run of each config: SFT warm start, a few RL steps with a held-out evaluation
_SFT = ["--config.sft.steps=20", "--config.sft.batch_size=16"]
_SHORT = [
    "--config.task.num_eval=4",
    "--config.task.num_validation=0",
    "--config.rollout.prompts_per_step=2",
    "--config.rollout.num_samples=4",
    "--config.eval.ks=(1,)",
    "--config.eval.num_samples=1",
    "--config.mesh.data=2",
    "--config.checkpoint_every=1",
]
CASES = {
    # 3 held-out problems: the evaluation's rows do not divide into the 2 shards (worked on whole)
    "grpo": [
        "--config=configs/grpo.py",
        "--config.steps=3",
        *_SFT,
        "--config.task.num_eval=3",
        "--config.task.num_validation=0",
    ],
    "vpo": ["--config=configs/vpo.py", "--config.steps=2"],  # set rewards [P, G, S, M], no SFT
    # ToolRL with the offline overlap judge: (R_out, R_reason), a scalar clip_eps in the PPO
    # batch, the judge split by groups; DAPO refills (the judge's rewards decide them). A small
    # self-built vocabulary and a short warm start on the gold answers, so that the policy writes
    # <think> blocks the judge scores (a random policy's rewards are all 0)
    "awpo": [
        "--config=configs/awpo.py",
        "--config.steps=2",
        "--config.dapo.dynamic_sampling=true",
        "--config.dapo.max_refill_rounds=1",
        "--config.tokenizer.path=build",
        "--config.tokenizer.vocab_size=320",
        "--config.model.overrides.vocab_size=512",
        "--config.sft.steps=40",
        "--config.sft.batch_size=8",
        "--config.rollout.max_new_tokens=48",
        "--config.rollout.max_response_len=48",
        # every group whose judge scores vary mixes them in (Eq. 25 with eps_mix > 1), so the clip
        # radius (Eq. 29) depends on the rewards even before the tiny policy solves a task
        "--config.advantage.eps_mix=1.01",
    ],
}


def toolrl_subset(tmp_path, n=12) -> str:
    """The ``n`` ToolRL test records of the shortest prompts (real data, a small model
    context), as JSONL in ``tmp_path``."""
    import pyarrow.parquet as pq

    from mojax.tasks.framework.data import shared_dir

    rows = pq.read_table(os.path.join(shared_dir(), "data", "toolrl", "test.parquet")).to_pylist()
    rows.sort(key=lambda r: sum(len(m["content"]) for m in r["prompt"]))
    path = tmp_path / "toolrl_short.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
    return str(path)


def _env(tmp_path, **extra):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env.update(
        **compile_cache_env(tmp_path.parent / "mp_jax_cache"),
        MOJAX_DEBUG_HOST_STATE="1",  # every step: host state identical on every process
        **extra,
    )
    return env


def _main(workdir, flags):
    return [sys.executable, "-m", "mojax.main", f"--workdir={workdir}", *flags]


def one_process(tmp_path, workdir, flags, devices=2):
    env = _env(tmp_path, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    p = subprocess.run(
        _main(workdir, flags), cwd=REPO, env=env, capture_output=True, text=True, timeout=1200
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]  # one process: no [i] prefixes
    return p.stdout


def two_processes(tmp_path, workdir, flags, *, wait=True):
    cmd = [*LAUNCHER, "--num_processes=2", "--", *_main(workdir, flags)]
    p = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if not wait:
        return p
    out, _ = p.communicate(timeout=1200)
    assert p.returncode == 0, cluster_tail(out)
    return out


def metrics(workdir) -> list[dict]:
    lines = (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")} for x in lines]


def assert_same_metrics(a: list[dict], b: list[dict], atol=1e-5):
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert set(ra) == set(rb), set(ra) ^ set(rb)
        for k, va in ra.items():
            if isinstance(va, int | float) and not isinstance(va, bool):
                np.testing.assert_allclose(rb[k], va, rtol=1e-5, atol=atol, err_msg=k)
            else:
                assert rb[k] == va, k


def test_distributed_helpers_on_two_processes(tmp_path):
    """All-gathers, reading a global array, and tools run by the process owning the row's group."""
    cmd = [*LAUNCHER, "--num_processes=2", "--", sys.executable, "tests/_multiprocess_child.py"]
    p = subprocess.run(
        cmd, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, cluster_tail(p.stdout + p.stderr)
    results = {}
    for line in p.stdout.splitlines():
        if "RESULT " in line:
            r = json.loads(line.split("RESULT ", 1)[1])
            results[r["process"]] = r
    assert sorted(results) == [0, 1], p.stdout[-3000:]
    for r in results.values():
        assert r["count"] == 2 and r["gathered"] == [[0, 10], [1, 1010]]
        assert r["read_equal"] and r["owners"] == [0, 0, 1, 1]
        # rows 0-3 are groups 0-1 (process 0), rows 4-7 groups 2-3 (process 1); everyone sees all
        assert r["results"] == {str(i): f"process {i // 4} ran call {i}" for i in range(8)}
        assert "differs between processes: process(es) [1]" in r["assert_same"]
        # rows sharded over the processes: each holds and owns its half, nothing is shared;
        # rows held by both: split between them by blocks, results all-gathered, 0 sends them
        me, lay = r["process"], r["layout"]
        half = [i // 4 == me for i in range(8)]
        assert lay["split"] == [half, [0] * 4 + [1] * 4, False, True]
        assert lay["every"] == [[True] * 8, [0] * 4 + [1] * 4, True, me == 0]
        # 3 rows do not divide into 2 shards: worked on whole by both, split for the tools
        assert lay["uneven"] == [[True] * 3, [0, 0, 1], True, True]
        assert lay["read_local"] and lay["put_rows"] and lay["gather_rows"]
        assert lay["shard_batch_scalar"]  # AWPO's scalar clip_eps in a 2-process PPO batch
        assert lay["gather_objects"] and lay["global_max"] == [1, 10]
        sc = r["scores"]  # each process scored its own 4 rows; everyone has all 8
        assert sc["scored_here"] == [f"r{i}" for i in range(4 * r["process"], 4 * r["process"] + 4)]
        assert sc["rewards"] == [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 6.0, 7.0]
        assert sc["valid"] == [True] * 5 + [False] + [True] * 2
        assert (sc["invalid"], sc["scored"]) == (1, 8)
        jd = r["judge"]  # AWPO's judge: each process called it for its own 4 rows only
        assert jd["judged_here"] == [f"r{i}" for i in range(4 * r["process"], 4 * r["process"] + 4)]
        assert jd["scores"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, None, 0.7]  # the same everywhere
        assert jd["counts"] == {"failures": 1, "skipped": 0}


@pytest.mark.slow  # ~3 min: 2 processes compile the static and the continuous engines
def test_rollout_on_two_processes_reads_only_its_rows(tmp_path):
    """A calculator rollout on a 2-process mesh (data = 2) equals the unsharded rollout; each
    process ran exactly its own rows' tool calls; per round only a few ints crossed processes (the
    rows cross once, at the end), and no whole global array was all-gathered. The same on the
    continuous engine, one per process over its own prompts, where nothing crosses processes
    until the rows are gathered at the end."""
    child = [sys.executable, "tests/_multiprocess_rollout_child.py", f"--tmp={tmp_path}"]
    cmd = [*LAUNCHER, "--num_processes=2", "--", *child]
    p = subprocess.run(
        cmd, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, cluster_tail(p.stdout + p.stderr)
    results = [
        json.loads(x.split("RESULT ", 1)[1]) for x in p.stdout.splitlines() if "RESULT " in x
    ]
    assert sorted(r["process"] for r in results) == [0, 1], p.stdout[-3000:]
    for r in results:
        me = r["process"]
        for name, run in r["runs"].items():
            assert run["equal"] and run["logprob_diff"] <= 1e-5, (name, run["logprob_diff"])
            assert run["tool_calls"] >= 4 and run["host_values"] == 0, (name, run)
            if name == "serial":  # the same schedule, so every counter is the same
                assert run["counters"] == run["ref_counters"]
            half = run["rows"] // 2
            mine = [c for row in run["calls_by_row"][half * me : half * (me + 1)] for c in row]
            assert sorted(t for _, t in run["ran"]) == sorted(mine) and mine, (name, run["ran"])
            big = [n for n in run["gathers"] if n > 2]
            if name == "continuous":  # nothing crosses while the engines decode: at the end,
                # the counters and the rows (pickled), each one size and one payload
                assert len(run["gathers"]) == 4 and len(big) == 2, run["gathers"]
                assert run["counters"]["decode_calls"] == 1 and run["counters"]["segments"] > 2
                continue
            # the pickled rows (uint8) once at the end, around them only small int vectors
            assert len(big) <= 2 and len(run["gathers"]) - len(big) >= 4, run["gathers"]


def test_partial_distributed_flags_are_refused(tmp_path):
    p = subprocess.run(
        _main(tmp_path, ["--config=configs/grpo.py", "--num_processes=2"]),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "--coordinator_address, --num_processes and --process_id go together" in p.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    # VPO's set rewards on 2 processes are also the staleness-1 test's run: not in CI. AWPO's judge
    # (~290 s) runs in the full set only since stop 43, to keep .ci/run under 60 minutes; on one
    # process it runs end to end in CI (tests/system/rl/test_e2e.py). ParetoPO's case is the
    # interrupt matrix's 2-process cells (tests/system/test_interrupt_matrix.py)
    [pytest.param("awpo", marks=pytest.mark.full), pytest.param("vpo", marks=pytest.mark.full)],
)
def test_two_processes_equal_one_process_with_two_devices(name, tmp_path, request):
    """VPO's set rewards and AWPO's judge on 2 processes equal 1 process with 2 devices (ParetoPO,
    whose Stage 2 is the GRPO loop with another advantage, is the interrupt matrix's 2-process
    cells: a 2-process run, interrupted and resumed, equals the 1-process golden run bitwise)."""
    flags = CASES[name] + _SHORT
    two = tmp_path / "two"
    if name == "awpo":
        request.getfixturevalue("shared")  # skips with a reason when ../shared is absent
        data = toolrl_subset(tmp_path)
        flags += [
            f"--config.task.train_path={data}",
            f"--config.sft.data_path={data}",
            # validation from the file itself, so training keeps every example but the 2 of test
            f"--config.task.val_path={data}",
            "--config.task.num_eval=2",
            "--config.task.num_validation=0",
        ]
    two_processes(tmp_path, two, flags)
    one_process(tmp_path, tmp_path / "one", flags)
    a, b = metrics(tmp_path / "one"), metrics(two)
    assert_same_metrics(a, b)
    steps = int(CASES[name][1].split("=")[1])
    assert [r["step"] for r in b] == list(range(steps + 1))  # one writer: no line twice
    assert any("reward/scalar/mean" in r for r in b) and np.isfinite(b[-1]["loss"])
    if name == "awpo":  # the judge scored every row, and the clip radius reached the update
        assert all(r["judge/failures"] == 0 and "awpo/clip_eps" in r for r in b[1:])
        lo, hi = np.float32(0.1), np.float32(0.2)  # clip_min, clip_max (float32 in the batch)
        assert all(lo <= r["awpo/clip_eps"] <= hi for r in b[1:])
        assert len({r["awpo/clip_eps"] for r in b[1:]}) > 1  # the radius moved with the rewards
        # not a comparison of zeros: the judge rewarded some reasoning, the update moved
        assert max(r["reward/r_reason/mean"] for r in b[1:]) > 0
        assert max(r["advantage/abs_mean"] for r in b[1:]) > 0
    lines = (two / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == len((tmp_path / "one" / "transcripts.jsonl").read_text().splitlines())
    assert (two / "done").exists()
    assert (two / "checkpoints" / str(steps)).is_dir()


# staleness 1 with the sampler on its own devices, π_old recomputed and token TIS: VPO's set rows
# train without a warm start (a long SFT drifts apart between 1 and 2 processes by all-reduce order),
# and the entropy bonus moves the policy every step, so every rollout after the first is stale
_ASYNC = [
    "--config=configs/vpo.py",
    "--config.steps=3",
    *_SHORT,
    "--config.rollout.staleness=1",
    "--config.mesh.sampler=2",
    "--config.ppo.entropy_coef=0.01",
    "--config.ppo.old_logprobs=recompute",
    "--config.rollout_correction.is_level=token",
]


@pytest.mark.slow
def test_two_processes_with_staleness_1_equal_one_process(tmp_path):
    """``rollout.staleness = 1``, ``mesh.sampler = 2``: 2 processes of 2 devices (each gives one to
    the learner's mesh, one to the sampler's; ``mojax.sharding.split_devices``) equal 1 process of 4
    devices with the same two meshes (the weights cross from the learner's devices to the
    sampler's inside each process); the host state, in-flight rollouts included, is identical on
    both processes after every step (``MOJAX_DEBUG_HOST_STATE``), and the steps after the first
    train on rollouts one update old, their mismatch measured and corrected."""
    cmd = [*LAUNCHER, "--num_processes=2", "--devices_per_process=2", "--"]
    p = subprocess.run(
        cmd + _main(tmp_path / "two", _ASYNC),
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert p.returncode == 0, cluster_tail(p.stdout + p.stderr)
    one_process(tmp_path, tmp_path / "one", _ASYNC, devices=4)
    a, b = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    assert_same_metrics(a, b)
    assert [r["async/policy_lag"] for r in b[1:]] == [0.0, 1.0, 1.0]
    assert all(r["update_norm"] > 0 for r in b[1:])
    assert b[1]["mismatch/kl_k3"] < 1e-9 < b[2]["mismatch/kl_k3"]  # fp32 numerics, then staleness


def _slurm_env(tmp_path, i: int, n: int, **extra) -> dict[str, str]:
    """Process ``i`` of ``n`` as ``srun`` starts it: SLURM's variables and MOJAX_DISTRIBUTED=1."""
    job = str(1000 + os.getpid() % 3000)  # jax derives the coordinator port from the job id
    slurm = dict(
        SLURM_JOB_ID=job,
        SLURM_NTASKS=str(n),
        SLURM_PROCID=str(i),
        SLURM_LOCALID=str(i),
        SLURM_STEP_NODELIST="localhost",
        MOJAX_DISTRIBUTED="1",
    )
    return _env(tmp_path, **slurm, **extra)


@pytest.mark.slow
def test_paper_scale_dry_run_on_two_processes_found_from_slurm(tmp_path, qwen2_tokenizer_dir):
    """The continuous engine's paper-scale dry run (one per engine, issue 46; the static engine's
    is ``tests/system/rl/test_e2e.py``'s) on 2 processes of 4 devices, started with the issue's own
    command: SLURM's variables and MOJAX_DISTRIBUTED=1, no explicit flags (every other test here
    starts its processes with ``launch/local_cluster.py``'s flags)."""
    flags = [
        "--config=configs/paretopo.py:paper=true,model=qwen2.5-math-1.5b,task=math,data=2,fsdp=4",
        f"--config.tokenizer.path={qwen2_tokenizer_dir}",
        "--config.dry_run=true",
        # one engine per process: its own bf16 copy of the weights on each device
        "--config.sampler.engine=continuous",
        "--config.continuous.slots=64",
    ]
    devices = "--xla_force_host_platform_device_count=4"
    procs = [
        subprocess.Popen(
            _main(tmp_path / "w", flags),
            cwd=REPO,
            env=_slurm_env(tmp_path, i, 2, XLA_FLAGS=devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, cluster_tail(out)
    assert "(8 devices, 2 processes)" in outs[0] and "1.544B params" in outs[0]
    assert [o.count("lowered with explicit shardings: OK") for o in outs] == [1, 0]  # process 0
    copy = float(re.search(r"engine_weights\s+([0-9.]+)", outs[0]).group(1))
    params = float(re.search(r"\(([0-9.]+)B params", outs[0]).group(1)) * 1e9
    assert abs(copy - params * 2 / 1024**3) < 0.01, copy  # bf16, whole, on every device
    assert not (tmp_path / "w").exists()  # a dry run writes nothing


def test_local_cluster_stops_the_others_when_one_fails(tmp_path):
    """Like ``srun --kill-on-bad-exit``: process 1 fails at once, process 0 (sleeping) is stopped,
    and the launcher exits with process 1's code."""
    child = "import sys, time\nif '--process_id=1' in sys.argv: sys.exit(3)\ntime.sleep(120)\n"
    t0 = time.time()
    p = subprocess.run(
        [*LAUNCHER, "--num_processes=2", "--", sys.executable, "-c", child],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 3, p.stdout + p.stderr
    assert time.time() - t0 < 30
