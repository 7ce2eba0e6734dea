"""``launch/local_cluster.py``: a process that dies names itself and its signal, the others stop,
and the launcher exits as a shell would report the failure."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCHER = [sys.executable, str(REPO / "launch" / "local_cluster.py")]

# process 1 aborts (as a heap corruption in native code does); process 0 would wait 60 s
_CHILD = """
import os, sys, time
i = int(next(a for a in sys.argv if a.startswith("--process_id=")).split("=")[1])
print("ready", flush=True)
if i == 1:
    time.sleep(0.5)
    os.abort()
time.sleep(60)
"""


def _launch(script: str, n: int = 2) -> subprocess.CompletedProcess:
    cmd = [*LAUNCHER, f"--num_processes={n}", "--", sys.executable, "-c", script]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_killed_process_is_named_with_its_signal_and_the_others_stop():
    start = time.monotonic()
    p = _launch(_CHILD)
    assert time.monotonic() - start < 30, "process 0 was not stopped"
    assert p.returncode == 134, p.stdout + p.stderr  # 128 + SIGABRT, as a shell says it
    lines = p.stdout.splitlines()
    said = [line for line in lines if line.startswith("[launcher]")]
    assert said == ["[launcher] process 1 exited with code 134 (SIGABRT); stopping the others"]
    assert "[1] ready" in lines and lines.index("[1] ready") < lines.index(said[0])


def test_an_exit_code_is_passed_on_and_success_is_quiet():
    p = _launch("import sys; sys.exit(3 if sys.argv[-1] == '--process_id=0' else 0)")
    assert p.returncode == 3
    assert "[launcher] process 0 exited with code 3; stopping the others" in p.stdout
    p = _launch("print('hi')", n=3)
    assert p.returncode == 0 and "[launcher]" not in p.stdout
    assert sorted(p.stdout.splitlines()) == ["[0] hi", "[1] hi", "[2] hi"]


def test_a_failure_message_keeps_every_process_s_last_lines():
    from mojax_test_utils import cluster_tail

    out = "\n".join([f"[0] a{i}" for i in range(50)] + ["[1] died", "[launcher] process 1 ..."])
    tail = cluster_tail(out + "\n" + "\n".join(f"[0] b{i}" for i in range(50)), lines=3)
    assert tail.splitlines() == [
        "[0] b47",
        "[0] b48",
        "[0] b49",
        "[1] died",
        "[launcher] process 1 ...",
    ]
