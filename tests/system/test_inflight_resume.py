"""Resuming a copy of the finished golden run with ``staleness = 1`` (``golden_run.py``) from its
checkpoint 2, which holds the rollout of step index 2 generated ahead by the weights after 1
update (``mojax.rl.state``; issue 49), with that record damaged: it is moved aside once and
generated again. (Intact, the record passes every check after a real orbax round trip and the run
ends as the golden run: the interrupt matrix's kill -9 cell at staleness 1,
``test_interrupt_matrix.py``.) And ``mojax.infra.workdir_restore`` puts back a damaged
``config.json`` from the copy in the last checkpoint."""

import base64
import json
import shutil

import numpy as np
import pytest

from mojax.rl import state as inflight

from . import golden_run as g


def _resumable_copy(golden, work):
    """The golden run as it was after its step-2 checkpoint (its step-4 one and ``done`` gone)."""
    shutil.copytree(golden, work)
    shutil.rmtree(work / "checkpoints" / "4")
    (work / "done").unlink()
    return work


@pytest.mark.slow
def test_a_damaged_inflight_rollout_in_a_real_checkpoint_is_generated_again(golden, tmp_path):
    run, want = golden(1, 1)
    work = _resumable_copy(run, tmp_path / "run")
    meta = work / "checkpoints" / "2" / "host" / "metadata"
    saved = json.loads(meta.read_text())
    record = saved["host_state"]["inflight"][0]
    assert (record["step"], record["version"], record["schema"]) == (2, 1, inflight.SCHEMA)
    lengths = np.full(8, 10**6, np.int32)  # decoded silently before the checks
    record["rollout"]["lengths"]["b64"] = base64.b64encode(lengths).decode()
    meta.write_text(json.dumps(saved))
    out = g.run(work, 1, 1)
    assert out.count("in-flight rollout 0 of the restored checkpoint is damaged") == 1
    aside = work / "inflight.corrupt"
    assert (
        f"checksum mismatch: its contents changed after it was written; moved aside to {aside}"
        in out
    )
    assert json.loads(aside.read_text()) == record
    assert (work / "done").read_text() == f"{g.STEPS}\n" and (work / "checkpoints" / "4").is_dir()
    got = g.metrics(work)  # generated again by the restored weights: one update old no more
    assert got[:3] == want["metrics"][:3] and got[3]["async/policy_lag"] == 0.0


@pytest.mark.slow
def test_restore_config_from_a_real_run_checkpoint(golden, tmp_path):
    import os
    import subprocess
    import sys

    from mojax_test_utils import REPO, with_keys

    from mojax.infra import workdir as wd

    run, _ = golden(1, 1)
    work = tmp_path / "run"
    shutil.copytree(run, work)
    original = json.loads((work / "config.json").read_text())
    (work / "config.json").write_text((work / "config.json").read_text()[:100])  # cut
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "mojax.infra.workdir_restore", str(work)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and f"from the copy in checkpoint step {g.STEPS}" in p.stdout, p.stderr
    restored = json.loads((work / "config.json").read_text())
    assert {k: v for k, v in restored.items() if k != "environment"} == {
        k: v for k, v in original.items() if k != "environment"
    }
    config = wd.read_saved_config(str(work))[0]
    assert isinstance(wd.prepare(config, str(work)), wd.Finished)  # the rerun checks as before
    with pytest.raises(wd.WorkdirError, match="config.seed"):
        wd.prepare(with_keys(config, seed=1, steps=3), str(work))
