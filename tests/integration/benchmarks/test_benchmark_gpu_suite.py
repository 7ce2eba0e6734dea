"""``benchmarks/gpu_rl_step.py`` (one GRPO step end to end) and ``benchmarks/gpu_suite.sh``'s dry
mode (issue 48 item 4): both run on the CPU at tiny shapes, and what they report adds up."""

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO = os.fspath(pathlib.Path(__file__).resolve().parents[3])
sys.path.append(os.path.join(REPO, "benchmarks"))

import gpu_rl_step  # noqa: E402

TINY = ["--variant", "tiny-qwen3", "--dtype", "float32", "--prompts", "2", "--samples", "2",
        "--prompt_len", "8", "--new_tokens", "16", "--mean_len", "4", "--slots", "4",
        "--micro_rows", "2", "--logprob_chunk", "16", "--steps", "1", "--warmup", "1"]  # fmt: skip


def _env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO, **extra)
    env.pop("XLA_FLAGS", None)  # one CPU device, as the benchmark's CPU mode runs
    return env


def test_work_is_seeded_long_tailed_and_capped():
    args = gpu_rl_step.parse([*TINY, "--prompts", "64", "--samples", "8", "--new_tokens", "64",
                              "--mean_len", "16"])  # fmt: skip
    prompts, drawn = gpu_rl_step.make_work(args, vocab=100)
    again = gpu_rl_step.make_work(args, vocab=100)
    assert np.array_equal(prompts, again[0]) and np.array_equal(drawn, again[1])
    assert prompts.shape == (64, 8) and prompts.min() >= 2 and prompts.max() < 100
    assert drawn.shape == (512,) and drawn.min() >= 1 and drawn.max() == 64  # the cap is hit
    # geometric with mean 16 capped at 64: mean 16 (1 - (15/16)^64) = 15.7, median 11
    assert abs(drawn.mean() - 16 * (1 - (15 / 16) ** 64)) < 1.5
    assert np.median(drawn) < drawn.mean()  # long-tailed


def test_bad_flags_are_refused_before_anything_compiles(capsys):
    with pytest.raises(SystemExit):
        gpu_rl_step.parse([*TINY, "--samples", "1", "--slots", "0"])
    err = capsys.readouterr().err
    assert "--samples must be >= 2 (got 1)" in err and "--slots must be >= 1 (got 0)" in err


@pytest.mark.slow
def test_one_grpo_step_on_the_cpu_adds_up():
    """The worker's step is its four parts (one timed step), its token counts are those of the
    work drawn independently here, and the CPU reports no peak memory."""
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "gpu_rl_step.py"), "--worker", "mojax",
           *TINY, "--jax_cache", ""]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT_JSON ")][-1]
    res = json.loads(line[len("RESULT_JSON ") :])
    parts = res["handover"] + res["generation"] + res["rewards"] + res["update"]
    assert math.isclose(parts, res["step"], rel_tol=1e-9), res
    from mojax.models import get_variant

    rng = np.random.RandomState(0)  # the work, drawn as the docstring says
    rng.randint(2, get_variant("tiny-qwen3").vocab_size, (2, 8))
    want = np.minimum(rng.geometric(1 / 4, 4), 16).sum()
    assert res["response_tokens"] == want and res["prompt_tokens"] == 2 * 2 * 8
    assert res["peak_bytes"] is None and res["device"] == "cpu" and math.isfinite(res["loss"])
    assert res["packed_rows"] % 16 == 0


@pytest.mark.slow
def test_the_suites_dry_mode_runs_every_issue48_part(tmp_path):
    """``DRY=1 PARTS=issue48``: every step passes, the fused-kernel hook decodes a layout that
    exists (``perlayer`` standing in) and the TRL step runs or says why it is skipped."""
    env = _env(OUT=str(tmp_path), PY=sys.executable, KERNEL_LAYOUT="perlayer", DRY="1",
               PARTS="issue48")  # fmt: skip
    proc = subprocess.run(["bash", "benchmarks/gpu_suite.sh"], env=env, capture_output=True,
                          text=True, timeout=3000, cwd=REPO)  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0 and "FAILED" not in out, out[-4000:] + proc.stderr[-2000:]
    for name in ("ceilings", "decode", "mfu_15b_t2048", "mfu_15b_t4096", "mfu_7b_lora",
                 "grpo_05b", "grpo_15b"):  # fmt: skip
        assert f"=== i48_{name} rc=0" in out, out[-4000:]
    decode = (tmp_path / "i48_decode.log").read_text()
    assert "| tiny-qwen3:perlayer | 4 |" in decode and "| tiny-qwen2:gpu | 4 |" in decode, decode
    assert "=== i48_trl_05b rc=0" in out or "TRL step skipped" in out, out[-4000:]
