"""experiments/: the claim scripts run end to end in --quick mode, write their results page with
per-seed numbers, share the SFT warm start, and a cell's printed command reproduces its numbers."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from experiments import _grid
from mojax.jsonl import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_script(name: str, root, *flags: str) -> str:
    """Runs ``experiments/<name>.py --quick`` under ``root``; returns the page text."""
    out = os.path.join(root, "results")
    cmd = [sys.executable, f"experiments/{name}.py", "--quick", f"--root={root}", f"--out={out}"]
    proc = subprocess.run([*cmd, *flags], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    page = os.path.join(out, f"{name}.md")
    assert os.path.isfile(page)
    return open(page, encoding="utf-8").read()


def _eval_rows(workdir) -> list[dict]:
    return [r for r in read_metrics(workdir) if "eval/accuracy" in r]


@pytest.fixture(scope="module")
def quick_paretopo(tmp_path_factory):
    """The ParetoPO claim in quick mode, one method (GRPO), one seed, one RL step."""
    root = tmp_path_factory.mktemp("paretopo_quick")
    page = _run_script("paretopo_front", root, "--methods=grpo", "--steps=1", "--seeds=0")
    return root, page


def test_quick_page_has_per_seed_numbers_and_plots(quick_paretopo):
    root, page = quick_paretopo
    for section in ("## Verdict: ", "## Mean ± std over seeds", "## Every seed", "## Commands"):
        assert section in page
    rows = _eval_rows(os.path.join(root, "grpo", "s0"))
    assert [r["step"] for r in rows] == [0, 1]
    final = rows[-1]
    # the per-seed table row of grpo seed 0 holds the run's own final accuracy and tool calls
    row = re.search(r"^\| `grpo` \| 0 \| (.*) \|$", page, flags=re.M)
    assert row, page
    cells = [c.strip() for c in row.group(1).split("|")]
    assert cells[1] == f"{final['eval/accuracy']:.4f}"
    assert cells[2] == f"{final['eval/tool_calls']:.4f}"
    for png in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page):
        assert os.path.getsize(os.path.join(root, "results", png)) > 1000


def test_cell_restored_the_shared_sft_warm_start(quick_paretopo):
    root, _ = quick_paretopo
    assert _grid.trained_sft(os.path.join(root, "sft", "s0"))
    assert not _grid.trained_sft(os.path.join(root, "grpo", "s0"))
    # the step-0 evaluation (after SFT) equals the shared SFT run's own evaluation
    sft_eval = _eval_rows(os.path.join(root, "sft", "s0"))[-1]
    cell_eval = _eval_rows(os.path.join(root, "grpo", "s0"))[0]
    for k in ("eval/accuracy", "eval/tool_calls", "eval/r_tool"):
        assert cell_eval[k] == sft_eval[k], k


def test_a_grid_resumes_without_rerunning_done_cells(quick_paretopo):
    root, _ = quick_paretopo
    log = os.path.join(root, "grpo", "s0", "run.log")
    before = os.path.getmtime(log)
    _run_script("paretopo_front", root, "--methods=grpo", "--steps=1", "--seeds=0")
    assert os.path.getmtime(log) == before


@pytest.mark.slow
def test_rerunning_a_cell_command_reproduces_its_numbers(quick_paretopo, tmp_path):
    """The page's printed command of a cell, run in a fresh workdir (which then trains its own SFT
    warm start instead of restoring the shared copy), gives bit-identical eval numbers."""
    root, page = quick_paretopo
    line = next(x for x in page.splitlines() if "--config=configs/grpo.py" in x)
    argv = shlex.split(line)
    fresh = str(tmp_path / "rerun")
    argv = [a if not a.startswith("--workdir=") else f"--workdir={fresh}" for a in argv]
    assert argv[:3] == ["python", "-m", "mojax.main"]
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SFT 20/20" in proc.stdout  # it did train its own warm start
    want, got = _eval_rows(os.path.join(root, "grpo", "s0")), _eval_rows(fresh)
    keys = ("step", "eval/accuracy", "eval/tool_calls", "eval/r_task", "eval/r_tool")
    assert [[r[k] for k in keys] for r in got] == [[r[k] for k in keys] for r in want]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["saw_cv", "awpo_gate", "vpo_bestk"])
def test_other_claims_run_in_quick_mode(name, tmp_path):
    page = _run_script(name, tmp_path)
    assert "## Verdict: " in page and "## Every seed" in page
