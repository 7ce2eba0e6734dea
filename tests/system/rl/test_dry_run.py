"""``config.dry_run``'s memory estimate against what a run allocates.

The tiny AWPO run (``configs/awpo.py``: ToolRL prompts, the real Qwen2 vocabulary, 16 rows) with
and without remat, its prompts capped at 1024 tokens (T = 1056) so that the test fits a CI
machine: the dry run compiles the update abstractly and reports XLA's temporaries per device;
a child process runs the same update on real arrays and measures its peak resident set above
the resident set just before the call (the CPU backend allocates an executable's temporaries when
it runs it, so that delta is what the estimate predicts). They agree within 15%. XNNPACK's fusions
are off in the child: that library's packed weight copies are not XLA buffers (with them on, the
process holds about 0.06 GiB more than XLA's temporaries)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.parametrize("remat", ["full", "none"])
def test_dry_run_estimate_matches_allocation(shared, remat):
    # XNNPACK fusions off: the library keeps packed copies of the weights it multiplies (about
    # 60 MB here) outside XLA's buffer assignment; the test measures what XLA allocates
    env = dict(
        os.environ,
        PYTHONPATH=f"{REPO}:{REPO / 'tests'}",
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_cpu_experimental_ynn_fusion_type=",
    )
    p = subprocess.run(
        [sys.executable, str(REPO / "tests" / "_dry_run_child.py"), "",
         f"model.remat={remat}", "rollout.max_prompt_len=1024"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    r = json.loads(line.removeprefix("RESULT "))
    assert r["T"] == 1056
    assert r["measured_gib"] > 0.1, r
    assert abs(r["estimate_gib"] - r["measured_gib"]) <= 0.15 * r["measured_gib"], r


def test_continuous_engine_sizes_the_sampler_by_its_slots():
    """``sampler.engine=continuous``: the KV cache is the N slots' (2 L N T K D bytes), not the B
    rows', and the prompt prefill held while rows enter slots is exactly two
    chunks of ceil(N / G) = 2 prompts' logits and cache, counted from the model's shapes (fp32
    logits [p, V]; k and v [L, p, Tb, K, D] in the cache dtype; the slot mask [p, Tb], ends [p])."""
    import numpy as np
    from mojax_test_utils import load_config, run_spec

    from mojax.rl import dry_run
    from mojax.sampling import bucket_length
    from mojax.spec.model_config import qwen_config

    c = load_config("grpo")
    with c.unlocked():
        c.rollout.max_prompt_len, c.rollout.prompts_per_step, c.rollout.num_samples = 40, 8, 4
        c.rollout.max_response_len = 64
        c.sampler.engine, c.continuous.slots = "continuous", 8
    spec = run_spec(c)
    cont = dry_run.dry_run(spec)
    mc, tb = qwen_config(spec), bucket_length(40)
    item = np.dtype(spec.model.cache_dtype or mc.dtype).itemsize
    kv = (
        2 * mc.num_layers * 8 * (tb + 64) * mc.num_kv_heads * mc.head_dim * item
    )  # 8 slots, 1 device
    assert cont["kv_cache_gib_per_device"] * dry_run.GIB == kv
    p = 2  # prompts per chunk: 8 slots / 4 samples
    held = p * mc.vocab_size * 4 + 2 * mc.num_layers * p * tb * mc.num_kv_heads * mc.head_dim * item
    held = 2 * (held + p * tb + p * 4)  # two chunks
    assert cont["prompt_prefill_gib_per_device"] * dry_run.GIB == pytest.approx(held, rel=1e-3)
