"""The golden run fixture of the system tests (``tests/system/golden.py``)."""

import pytest


@pytest.fixture(scope="session")
def golden():
    """``golden(staleness, processes) -> (workdir, record)``: the short ParetoPO run of
    ``golden_run.py``, computed once per source tree and shared on disk between pytest workers."""
    from . import golden_run

    return golden_run.golden
