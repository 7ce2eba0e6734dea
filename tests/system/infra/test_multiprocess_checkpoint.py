"""Two ``jax.distributed`` processes restore a checkpoint whose step is bad on process 1 only.

Each process reads its own half of a sharded array, so a damaged shard file fails on one process
only. ``Checkpointer.restore`` all-gathers every process's verdict and all act on the same
decision: a damaged shard moves the step aside on both (process 0 renames) and both restore the
older step; an I/O error on process 1 alone stops both with the same ``CheckpointError`` and
moves nothing. Every run has a timeout, so a hang fails the test instead of blocking it.
"""

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from mojax_test_utils import cluster_tail, descendants

REPO = pathlib.Path(__file__).resolve().parents[3]
LAUNCHER = [sys.executable, str(REPO / "launch" / "local_cluster.py")]
CHILD = [sys.executable, "tests/_multiprocess_checkpoint_child.py"]


def run_two(tmp_path, scenario) -> dict:
    """Each process's RESULT; a run still going after 120 s is killed (every process) and fails."""
    cmd = [*LAUNCHER, "--num_processes=2", "--", *CHILD, f"--dir={tmp_path / 'ck'}"]
    p = subprocess.Popen(
        [*cmd, f"--scenario={scenario}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        for pid in descendants(p.pid) + [p.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"the processes hung (killed after 120 s):\n{out[-3000:]}")
    assert p.returncode == 0, cluster_tail(out)
    results = {}
    for line in out.splitlines():
        if "RESULT " in line:
            r = json.loads(line.split("RESULT ", 1)[1])
            results[r.pop("process")] = r
    assert sorted(results) == [0, 1], out[-3000:]
    return results


def test_bad_shard_on_process_1_moves_the_step_aside_on_both(tmp_path):
    results = run_two(tmp_path, "bad_shard")
    for r in results.values():
        assert "error" not in r, r
        assert r["step"] == 1 and r["host"] == {"step": 1} and r["equal"]
        assert r["listing"] == ["1", "2.corrupt"]
        # only process 1 found the damage (process 0 read its half of step 2 fine)
        (warning,) = r["warnings"]
        assert warning.startswith(f"process 1: checkpoint step 2 at {tmp_path / 'ck' / '2'}")
        assert "shorter than the checkpoint's index" in warning and "process 0" not in warning


def test_io_error_on_process_1_stops_both_and_moves_nothing(tmp_path):
    results = run_two(tmp_path, "eio_on_1")
    assert results[0]["message"] == results[1]["message"]
    for r in results.values():
        assert r["error"] == "CheckpointError" and r["listing"] == ["1", "2"]
        assert r["message"].startswith(f"process 1: checkpoint step 2 at {tmp_path / 'ck' / '2'}")
        assert "EIO" in r["message"] and "nothing was moved aside" in r["message"]
