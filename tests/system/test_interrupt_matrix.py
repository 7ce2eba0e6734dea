"""The interrupt matrix: {kill -9, SIGTERM} x {staleness 0, 1} x {1, 2 processes}. Each cell
interrupts the golden config (``golden_run.py``) mid-run, resumes it in the same workdir, and
compares the finished run with the 1-process golden run of its staleness: every non-``time/``
metric, the params sha256 and the host state of every kept checkpoint, bitwise. 2 processes of
one device run the 1-process program on 2 devices (the same global program on the same shards of
the ``data = 2`` mesh, and a sum over 2 shards has one order, a + b == b + a), so a 2-process cell
is also the test that 2 processes equal 1 process: every step of it, before and after the
interruption, runs on 2 processes, with one writer (no metrics line twice). (With more shards the
summation order may differ: ``test_multiprocess.py`` compares 2 processes of 2 devices each within
1e-5.)

* kill -9 (the whole process group: the launcher and every process) once checkpoint 2 is on disk:
  nothing is saved on the way out; the resume restores step 2 (with staleness 1, the rollout of
  step index 2 generated ahead by the weights after 1 update is in that checkpoint: its record
  passes every check after a real orbax round trip and is consumed as the uninterrupted run did;
  ``test_inflight_resume.py`` damages it).
* SIGTERM once step 1 is logged (on 2 processes to process 1 only, as a scheduler may do: both
  agree at their next poll and save the same step): exit 143 and the last completed step saved,
  a step the periodic saves (every 2) would not have saved when it is odd. With staleness 1 a
  rollout generated ahead may be abandoned: the resume generates it again with the resumed
  weights (policy lag 0 where the golden run has 1), so the run equals the golden run up to the
  saved step and from there differs in that rollout only (``test_preemption_e2e.py`` pins the
  same case in-process at an exact moment).
* SIGINT after the SFT warm start (1 process): nothing new to save, the SFT checkpoint is the state.

CI runs the cells that replaced CI tests (kill -9 with staleness 1 and SIGTERM with staleness 0
on 1 process, SIGTERM to one of 2 processes); the other cells are ``full`` (docs/development.md).
"""

import json
import os
import pathlib
import re
import signal
import time

import pytest
from mojax_test_utils import descendants

from . import golden_run as g

FULL = pytest.mark.full

CELLS = [
    pytest.param("kill9", 0, 1, marks=FULL, id="kill9-s0-p1"),
    pytest.param("kill9", 1, 1, id="kill9-s1-p1"),
    pytest.param("kill9", 0, 2, marks=FULL, id="kill9-s0-p2"),
    pytest.param("kill9", 1, 2, marks=FULL, id="kill9-s1-p2"),
    pytest.param("sigterm", 0, 1, id="sigterm-s0-p1"),
    pytest.param("sigterm", 1, 1, marks=FULL, id="sigterm-s1-p1"),
    pytest.param("sigterm", 0, 2, id="sigterm-s0-p2"),
    pytest.param("sigterm", 1, 2, marks=FULL, id="sigterm-s1-p2"),
]


def _cmdline(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for(p, ready, what):
    deadline = time.time() + 1500
    while not ready():
        assert p.poll() is None and time.time() < deadline, f"run ended before {what}"
        time.sleep(0.2)


def _logged(workdir, step):
    path = pathlib.Path(workdir) / "metrics.jsonl"
    return path.exists() and len(path.read_text().splitlines()) > step


def _kill9(work, staleness, processes):
    p = g.start(work, staleness, processes)
    _wait_for(p, lambda: (work / "checkpoints" / "2").is_dir(), "its checkpoint 2")
    everyone = [p.pid, *descendants(p.pid)]  # the launcher and both processes
    for pid in everyone:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.communicate()
    assert p.returncode == -signal.SIGKILL and not (work / "done").exists()
    if staleness:  # checkpoint 2 holds the rollout of step index 2, made by the weights after 1
        saved = json.loads((work / "checkpoints" / "2" / "host" / "metadata").read_text())
        assert [(x["step"], x["version"]) for x in saved["host_state"]["inflight"]] == [(2, 1)]
    return None, False


def _sigterm(work, staleness, processes):
    """SIGTERM once step 1 is logged; the step saved and whether a rollout was dropped."""
    from mojax_test_utils import cluster_tail

    p = g.start(work, staleness, processes)
    _wait_for(p, lambda: _logged(work, 1), "step 1")
    if processes == 1:
        target = p.pid
    else:
        (target,) = [x for x in descendants(p.pid) if "--process_id=1" in _cmdline(x)]
    os.kill(target, signal.SIGTERM)
    out, _ = p.communicate(timeout=1500)
    assert p.returncode == 143, cluster_tail(out)
    assert "Traceback" not in out, cluster_tail(out)
    if processes == 1:  # 2 processes on a loaded 2-core machine may take longer
        assert "within the 30 s grace" in out, out[-3000:]
    tag = r"\[1\] " if processes == 2 else ""
    m = re.search(
        rf"{tag}mojax: stopped by SIGTERM after (?:the update of )?RL step (\d+)([^\n]*?); "
        r"checkpoint saved in (\S+) \(",
        out,
    )
    assert m, cluster_tail(out)
    step = int(m.group(1))
    assert step in (1, 2, 3) and m.group(3) == str(work / "checkpoints" / str(step))
    assert str(step) in os.listdir(work / "checkpoints") and not (work / "done").exists()
    if processes == 2:  # process 0 says the same, unless the launcher stopped it first
        zero = re.search(r"\[0\] mojax: stopped by SIGTERM after[^;]*?step (\d+)", out)
        assert zero is None or int(zero.group(1)) == step, cluster_tail(out)
    return step, ("generated ahead was dropped" in m.group(2))


@pytest.mark.slow
@pytest.mark.parametrize("how, staleness, processes", CELLS)
def test_interrupted_run_resumes_to_the_golden_run(golden, tmp_path, how, staleness, processes):
    _, want = golden(staleness, 1)  # 2 processes are the 1-process run bitwise (see below)
    work = tmp_path / "run"
    saved, dropped = (_kill9 if how == "kill9" else _sigterm)(work, staleness, processes)
    out = g.run(work, staleness, processes)
    assert "is damaged" not in out and not (work / "inflight.corrupt").exists()
    got = g.record(work)
    assert [r["step"] for r in got["metrics"]] == list(range(g.STEPS + 1))  # one writer
    assert (work / "done").read_text() == f"{g.STEPS}\n"
    if saved in got["host"] and got["host"][saved] != want["host"][saved]:
        # saved by the signal after the step's update, its after-step phases pending (redone on
        # resume): a periodic step the resumed run does not save again
        assert "pending" in json.dumps(got["host"][saved]), got["host"][saved]
        got["host"][saved] = want["host"][saved]
    if not dropped:
        assert got == want
        return
    # the rollout generated ahead of step ``saved + 1`` was generated again after the resume
    assert got["metrics"][: saved + 1] == want["metrics"][: saved + 1]
    assert got["metrics"][saved + 1]["async/policy_lag"] == 0.0
    assert want["metrics"][saved + 1]["async/policy_lag"] == 1.0


@pytest.mark.slow
def test_sigint_after_the_warm_start_resumes_to_the_golden_run(golden, tmp_path):
    """SIGINT as the SFT warm start ends: nothing new to save (the SFT checkpoint is the state),
    exit 130; the rerun evaluates step 0 and ends as the golden run."""
    _, want = golden(0, 1)
    work = tmp_path / "run"
    p = g.start(work, 0, 1)
    out = []
    for line in p.stdout:
        out.append(line)
        if line.startswith("SFT 80/80"):
            p.send_signal(signal.SIGINT)
            break
    out = "".join(out + p.stdout.readlines())
    p.wait(timeout=900)
    assert p.returncode == 130, out[-3000:]
    assert "got SIGINT; abandoning the work under way" in out and "Traceback" not in out
    assert "mojax: stopped by SIGINT before RL step 1 (the initial evaluation was " in out
    assert not (work / "checkpoints").exists() or not os.listdir(work / "checkpoints")
    assert sorted(os.listdir(work / "checkpoints_sft")) == ["80"]
    g.run(work, 0, 1)
    assert g.record(work) == want


@pytest.mark.slow
def test_the_golden_runs_train(golden):
    """The references are not vacuous: RL moved the params away from the SFT warm start, rows with
    loss tokens reached an update, Stage 1 ran, and with staleness 1 every rollout after the
    first is one update old (with staleness 0 none is)."""
    for staleness in (0, 1):
        _, rec = golden(staleness, 1)
        m = rec["metrics"]
        assert [r["step"] for r in m] == list(range(g.STEPS + 1))
        (sft,) = rec["sft_params"].values()
        assert sorted(rec["params"]) == [2, 4] and sft not in rec["params"].values()
        assert rec["params"][2] != rec["params"][4]
        assert any(r.get("tokens", 0) > 0 and r.get("update_norm", 0) > 0 for r in m[1:])
        assert {"pareto/hv", "pareto/archive_size"} <= set().union(*m)
        assert all("eval/accuracy" in m[s] for s in (0, 2, 4))
        assert [r.get("async/policy_lag", 0.0) for r in m[1:]] == [0.0] + [float(staleness)] * 3
        assert rec["host"][4]["host_state"].get("inflight", []) == []  # none past the run
