"""A run that must equal the golden run (``golden_run.py``) by construction: the asynchronous
pipeline forced on with ``staleness = 0`` (``tests/_pipeline_main.py``) is the synchronous loop
(``mojax.rl.step.rl_step``) bitwise: every non-``time/`` metric, the params and host state of every
kept checkpoint.

That 2 ``jax.distributed`` processes of one device each equal 1 process with 2 forced devices
bitwise is tested by the interrupt matrix's 2-process cells (``test_interrupt_matrix.py``): every
step of an interrupted and resumed 2-process run runs on 2 processes, and the run equals the
1-process golden run bitwise.
"""

import pytest

from . import golden_run as g


@pytest.mark.slow
def test_pipeline_with_staleness_0_is_the_synchronous_loop_bitwise(golden, tmp_path):
    _, want = golden(0, 1)
    g.run(tmp_path / "pipeline", 0, 1, module="_pipeline_main")
    assert g.record(tmp_path / "pipeline") == want
