"""The SFT warm start (``mojax.rl.warm_start``) survives a corrupt checkpoint: the broken step is
moved aside to ``<step>.corrupt`` and SFT runs again to the same params, instead of crashing on
every rerun (issue 14)."""

import importlib.util
import logging
import os
import pathlib

import jax
import numpy as np
import pytest

from mojax import spec as spec_lib
from mojax.rl.builders import build_run
from mojax.rl.warm_start import initial_params
from mojax.rollout.tools import ToolPool

REPO = pathlib.Path(__file__).resolve().parents[3]


def sft_config():
    spec = importlib.util.spec_from_file_location("cfg_grpo", REPO / "configs" / "grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config().copy_and_resolve_references()
    with c.unlocked():
        c.sft.steps, c.sft.batch_size, c.sft.num_examples = 3, 8, 32
        c.task.num_train, c.task.num_eval, c.task.num_validation = 32, 4, 0
    return c


def truncate_array_data(step_dir):
    """Cuts every array data file of a saved step to 3 bytes (as tests/integration/infra/test_checkpoint.py does)."""
    state_dir = os.path.join(step_dir, "state")
    files = [
        os.path.join(r, f)
        for r, _, fs in os.walk(state_dir)
        for f in fs
        if os.path.getsize(os.path.join(r, f)) > 0
        and "d" in os.path.relpath(r, state_dir).split(os.sep)
    ]
    assert files
    for f in files:
        with open(f, "r+b") as fh:
            fh.truncate(3)


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_corrupt_sft_checkpoint_is_moved_aside_and_sft_reruns(tmp_path, caplog):
    c = sft_config()
    spec = spec_lib.validate(c)
    pool = ToolPool(max_workers=1, timeout_s=5.0)
    try:
        run = build_run(spec, str(tmp_path), pool)
        first = jax.device_get(initial_params(run, str(tmp_path)))
        sft_dir = tmp_path / "checkpoints_sft"
        assert sorted(os.listdir(sft_dir)) == ["3"]
        truncate_array_data(sft_dir / "3")
        with caplog.at_level(logging.WARNING):
            again = jax.device_get(initial_params(run, str(tmp_path)))
        assert any("running SFT again" in m for m in caplog.messages), caplog.messages
        assert sorted(os.listdir(sft_dir)) == ["3", "3.corrupt"]
        assert_same(first, again)  # deterministic SFT: the rerun reaches the same params
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            restored = jax.device_get(initial_params(run, str(tmp_path)))
        assert not any("running SFT again" in m for m in caplog.messages)
        assert_same(first, restored)
    finally:
        pool.close()
