"""Runs that must equal the golden run (``golden_run.py``) by construction:

* the asynchronous pipeline forced on with ``staleness = 0`` (``tests/_pipeline_main.py``) is the
  synchronous loop (``mojax.rl.step.rl_step``) bitwise: every non-``time/`` metric, the params and
  host state of every kept checkpoint;
* 2 ``jax.distributed`` processes of one device each equal 1 process with 2 forced devices on the
  same ``data = 2`` mesh bitwise (the same global program on the same shards, and a sum over 2
  shards has one order, a + b == b + a): every non-``time/`` metric, params and host state; one
  writer (no line twice), the same number of transcripts; with ``staleness = 0`` and ``1``.
  (With more shards the collectives' summation order may differ: ``tests/system/test_multiprocess.py``
  compares its 2-process runs of 2 devices each within 1e-5.)
"""

import numpy as np
import pytest

from . import golden_run as g


@pytest.mark.slow
def test_pipeline_with_staleness_0_is_the_synchronous_loop_bitwise(golden, tmp_path):
    _, want = golden(0, 1)
    g.run(tmp_path / "pipeline", 0, 1, module="_pipeline_main")
    assert g.record(tmp_path / "pipeline") == want


@pytest.mark.slow
@pytest.mark.parametrize(
    "staleness", [0, pytest.param(1, marks=pytest.mark.full)], ids=["s0", "s1"]
)
def test_two_processes_equal_one_process_with_two_devices(golden, staleness):
    """ParetoPO (Stage 1's HV-guided weights, validation vector and archive for 2 steps, then
    Stage 2, the GRPO loop with another advantage): the 3 held-out rows do not divide into the 2
    shards (worked on whole)."""
    _, a = golden(staleness, 1)
    two, b = golden(staleness, 2)
    assert b == a
    assert [r["step"] for r in b["metrics"]] == list(range(g.STEPS + 1))  # one writer
    assert {"pareto/hv", "pareto/archive_size"} <= set().union(*b["metrics"])
    assert np.isfinite(b["metrics"][-1]["loss"])
    assert b["transcripts"] > 0
    assert (two / "done").exists() and sorted(b["params"]) == [2, 4]
