"""``mojax.infra.workdir_lock``: one training job per workdir.

A second job on a live workdir is refused (naming the holder's host, pid and start time), also
from the CLI within seconds while a real training runs; a lock whose holder is provably gone
(dead pid, pid reused, host rebooted, SLURM job requeued, unreadable and old) is taken over, any
other is not; ``resume=new`` keeps the lock in the new workdir; the two processes of one job take
one lock (process 0) and are refused together.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from mojax.infra import workdir as wd
from mojax.infra.workdir_lock import LOCK_FILE, WorkdirLock, WorkdirLockedError, holder_record

REPO = pathlib.Path(__file__).resolve().parents[3]
_HOLD = (
    "import sys, time\n"
    "from mojax.infra.workdir_lock import WorkdirLock\n"
    "WorkdirLock(sys.argv[1]).acquire()\n"
    "print('LOCKED', flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def holder(tmp_path):
    """Starts a process that takes the lock of ``tmp_path / 'w'`` and keeps it; yields it."""
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / "w")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert p.stdout.readline().strip() == "LOCKED"
    yield p
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def test_second_job_is_refused_naming_the_holder_then_takes_over_once_it_died(tmp_path, holder):
    work = tmp_path / "w"
    held = (work / LOCK_FILE).read_text()
    record = json.loads(held)
    assert record["pid"] == holder.pid and record["host"] == socket.gethostname()
    with pytest.raises(WorkdirLockedError) as info:
        WorkdirLock(work).acquire()
    msg = str(info.value)
    assert f"workdir {work} is in use by another training run (lock file {work / LOCK_FILE})" in msg
    mid = record["machine_id"] or "none recorded"
    assert f"host {socket.gethostname()} (machine id {mid}), pid {holder.pid}, started" in msg
    assert f"started {record['started']}" in msg
    assert f"remove {work / LOCK_FILE}" in msg
    assert (work / LOCK_FILE).read_text() == held
    os.killpg(holder.pid, signal.SIGKILL)  # kill -9: the lock file stays behind
    holder.wait()
    with WorkdirLock(work) as lock:
        assert json.loads((work / LOCK_FILE).read_text())["pid"] == os.getpid()
        assert lock.held
    assert not (work / LOCK_FILE).exists()
    assert sorted(os.listdir(work)) == []  # nothing else left behind (no .stale-* file)


def test_a_killed_holder_that_is_a_zombie_is_taken_over(tmp_path, holder):
    """kill -9 of a launcher leaves its children as zombies where nothing reaps them (a
    container's init): the pid keeps its /proc entry and start tick, but holds nothing."""
    work = tmp_path / "w"
    os.killpg(holder.pid, signal.SIGKILL)
    deadline = time.time() + 30
    while pathlib.Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.time() < deadline, "the killed holder never became a zombie"
        time.sleep(0.05)
    with WorkdirLock(work) as lock:  # not reaped yet (holder.wait() runs in the fixture)
        assert lock.held and json.loads((work / LOCK_FILE).read_text())["pid"] == os.getpid()


def _record(**changes):
    return {**holder_record("someone-else"), **changes}


STALE = {
    "pid reused": _record(proc_start=-1),
    "host rebooted": _record(boot_id="another-boot"),
    "dead pid": _record(pid=2**22 + 1),
    "SLURM job requeued": _record(host="node-7", slurm_job="77", slurm_restart=0),
}
LIVE = {
    "this live process": _record(),
    "another host": _record(host="node-7"),
    "another pid namespace": _record(pid=2**22 + 1, pid_ns="pid:[1]"),
    "same SLURM job, same restart": _record(host="node-7", slurm_job="77", slurm_restart=1),
}


@pytest.mark.parametrize("case", sorted(STALE) + ["unreadable and old", "not UTF-8 and old"])
def test_a_provably_gone_holder_is_taken_over(tmp_path, monkeypatch, case):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    path = tmp_path / LOCK_FILE
    if case in ("unreadable and old", "not UTF-8 and old"):
        path.write_bytes(b"{" if case == "unreadable and old" else b'{"pid": 1\xff, "host": "x"}')
        os.utime(path, (time.time() - 120, time.time() - 120))
    else:
        path.write_text(json.dumps(STALE[case]))
    with WorkdirLock(tmp_path):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", sorted(LIVE) + ["unreadable and new", "not UTF-8 and new"])
def test_a_possibly_live_holder_is_not_taken_over(tmp_path, monkeypatch, case):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    path = tmp_path / LOCK_FILE
    raw = {"unreadable and new": b"{", "not UTF-8 and new": b'{"pid": 1, "host": "\xff'}
    text = raw.get(case) or json.dumps(LIVE[case]).encode()
    path.write_bytes(text)
    with pytest.raises(WorkdirLockedError, match="is in use by another training run"):
        WorkdirLock(tmp_path).acquire()
    assert path.read_bytes() == text and os.listdir(tmp_path) == [LOCK_FILE]


OTHER_MACHINE = "f" * 32


@pytest.mark.skipif(not os.path.isfile("/etc/machine-id"), reason="no /etc/machine-id here")
@pytest.mark.parametrize("boot", ["another boot id", "this boot id"])
def test_a_run_on_another_machine_of_the_same_name_is_never_taken_over(tmp_path, boot):
    """Issue 49: cloned machines share hostnames (``vm``); one of them holding a workdir on NFS
    read as "this host rebooted" (another boot id) or "dead pid" (its pid is not ours)."""
    rec = _record(machine_id=OTHER_MACHINE, pid=2**22 + 1)
    if boot == "another boot id":
        rec["boot_id"] = "another-boot"
    path = tmp_path / LOCK_FILE
    path.write_text(json.dumps(rec))
    with pytest.raises(WorkdirLockedError) as info:
        WorkdirLock(tmp_path).acquire()
    msg = str(info.value)
    assert f"host {socket.gethostname()} (machine id {OTHER_MACHINE}), pid {2**22 + 1}" in msg
    assert "It runs on another machine" in msg and f"remove {path}" in msg
    assert json.loads(path.read_text()) == rec and os.listdir(tmp_path) == [LOCK_FILE]


MINE = "0123456789abcdef0123456789abcdef"
MACHINE_CASES = {  # (record changes, this machine's id ("" = no machine-id file), taken over)
    "same machine id, another boot (rebooted)": ({"boot_id": "b2"}, MINE, True),
    "same machine id, same boot, dead pid": ({"pid": 2**22 + 1}, MINE, True),
    "other machine id, another boot": ({"machine_id": "f" * 32, "boot_id": "b2"}, MINE, False),
    "older record (no machine id), another boot": (
        {"machine_id": None, "boot_id": "b2"},
        MINE,
        False,
    ),
    "older record (no machine id), same boot, dead pid": (
        {"machine_id": None, "pid": 2**22 + 1},
        MINE,
        True,
    ),
    "no machine id here, same boot, dead pid": ({"machine_id": "", "pid": 2**22 + 1}, "", True),
    "no machine id here, another boot": ({"machine_id": "", "boot_id": "b2"}, "", False),
}


@pytest.mark.parametrize("case", sorted(MACHINE_CASES))
def test_the_machine_id_decides_what_a_same_named_holder_is(tmp_path, case):
    changes, mine, taken = MACHINE_CASES[case]
    mid_file = tmp_path / "machine-id"
    if mine:
        mid_file.write_text(mine + "\n")
    work = tmp_path / "w"
    work.mkdir()
    rec = {**holder_record("someone-else", str(mid_file)), **changes}
    if rec["machine_id"] is None:
        del rec["machine_id"]  # written by a mojax before issue 49
    (work / LOCK_FILE).write_text(json.dumps(rec))
    lock = WorkdirLock(work, machine_id_path=str(mid_file))
    if taken:
        with lock:
            held = json.loads((work / LOCK_FILE).read_text())
            assert held["pid"] == os.getpid() and held["machine_id"] == mine
        return
    with pytest.raises(WorkdirLockedError, match="never takes it over"):
        lock.acquire()
    assert json.loads((work / LOCK_FILE).read_text()) == rec


def test_resume_new_keeps_the_lock_in_the_new_workdir(tmp_path):
    from mojax_test_utils import with_keys
    from test_workdir import fake_run, load

    work = tmp_path / "run"
    with wd.lock(str(work)) as lock:
        fake_run(work, load("grpo"))
        assert wd.prepare(with_keys(load("grpo"), resume="new"), str(work)) is None
        assert (tmp_path / "run.old-1" / "checkpoints" / "2").is_dir()
        assert not (tmp_path / "run.old-1" / LOCK_FILE).exists()
        assert json.loads((work / LOCK_FILE).read_text())["token"] == lock.token
        with pytest.raises(WorkdirLockedError):  # still held: a second job is refused
            WorkdirLock(work).acquire()
    assert sorted(os.listdir(work)) == ["config.json"]


def test_two_processes_of_one_job_take_one_lock(tmp_path):
    from test_multiprocess_checkpoint import run_two

    results = run_two(tmp_path, "lock")
    for r in results.values():
        assert "error" not in r, r
        assert r["holder_pid"] == results[0]["pid"]  # process 0 holds it for the job
        assert not r["lock_left"]


def test_two_processes_are_refused_together(tmp_path):
    from test_multiprocess_checkpoint import run_two

    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / LOCK_FILE).write_text(json.dumps(_record(host="node-7")))
    results = run_two(tmp_path, "lock")
    assert results[0]["error"] == results[1]["error"]
    assert "host node-7" in results[1]["error"] and results[1]["lock_left"]


def test_cli_second_training_on_a_live_workdir_is_refused_within_seconds(tmp_path):
    """A real training runs (it holds the lock while it builds and compiles); the same command
    started again (``mojax.main``'s entry in this process) is refused, exit 2, naming the running
    job; the first is unaffected."""
    from mojax_cli import run_cli

    work = tmp_path / "w"
    cmd = [sys.executable, "-m", "mojax.main", "--config=configs/grpo.py", f"--workdir={work}"]
    first = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.time() + 120
        while not (work / LOCK_FILE).exists():
            assert first.poll() is None, first.stderr.read()[-3000:]
            assert time.time() < deadline, "the first run never took the lock"
            time.sleep(0.1)
        held = (work / LOCK_FILE).read_text()
        t0 = time.time()
        second = run_cli(*cmd[3:])  # the same command in this process (mojax_cli)
        took = time.time() - t0
        assert second.returncode == 2, second.stdout + second.stderr
        assert "mojax: workdir refused" in second.stderr
        assert f"pid {first.pid}," in second.stderr and "Traceback" not in second.stderr
        assert took < 60, took
        print(f"second training refused after {took:.1f} s")
        assert first.poll() is None  # still training, its lock untouched
        assert (work / LOCK_FILE).read_text() == held
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
