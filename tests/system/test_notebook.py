"""notebooks/quickstart.ipynb (issue 16 item 1) executes top to bottom through nbclient (a rollout
with a tool turn and its loss masks, a 2-step in-process run whose metrics it reads with pandas), and
is stored with its outputs stripped."""

import json
import pathlib

import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_notebook_is_stored_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_quickstart_notebook_executes(tmp_path):  # in the README test command (~1 min)
    nbclient = pytest.importorskip(
        "nbclient", reason="nbclient not installed (pip install .[test])"
    )
    nbformat = pytest.importorskip(
        "nbformat", reason="nbformat not installed (pip install .[test])"
    )
    pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install .[test])")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    text = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "hypervolume of the front" in text
    assert "observation tokens" in text and "<output>84</output>" in text  # the rollout's masks
    assert "reward/r_task/mean" in text  # the metrics read back from the 2-step run (pandas)
