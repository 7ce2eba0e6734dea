"""An exclusive lock on a workdir, so that one training job at a time writes it.

Two jobs in one workdir (a double ``sbatch``; ``srun`` without ``MOJAX_DISTRIBUTED=1``, which
starts N processes that each think they are process 0) would race on checkpoint step directories,
delete each other's unfinished saves and truncate each other's ``metrics.jsonl``. Training takes
the lock before it reads or writes anything in the workdir (``mojax.infra.workdir.lock``); ``mode=eval``
and ``python -m mojax.export`` only read and take no lock.

* **The file.** ``<workdir>/lock``, created with ``O_CREAT | O_EXCL`` (atomic, NFS included), holds
  JSON naming the holder: host, pid, start time, command, SLURM job id and restart count, plus
  what proves it gone (the machine id, the kernel boot id, the pid namespace, the process's start
  tick). The file and its directory entry are fsynced.
* **Refusal.** While the holder lives, :class:`WorkdirLockedError` names it, the lock file, and
  what to do.
* **The machine.** A machine is named by ``/etc/machine-id`` (systemd's, stable across reboots,
  distinct per installation) together with its hostname. A hostname alone does not name one:
  cloned machines share names like ``vm`` and may share an NFS workdir.
* **Stale locks** are taken over (logged) only when the holder is provably gone: on the same
  machine (machine id and hostname) and boot, in the same pid namespace, its pid runs no process
  that started when the holder did (dead, or the pid reused); the same machine id and hostname
  with another boot id (rebooted); the same SLURM job id with a lower ``SLURM_RESTART_COUNT`` (a
  requeued job); or an unreadable lock file older than a minute (a writer killed mid-write).
  Where a machine has no machine id (and for a record of an older mojax, which holds none), only
  the hostname and boot id can identify it: the same hostname and boot id are this machine; the
  same hostname with another boot id may be a reboot or another machine of that name, and is
  refused. A lock of another machine is never taken over: the refusal names its host, machine
  id and pid and says how to clear it by hand once that process is known to be gone.
* **Processes of one job.** Process 0 alone takes and releases the lock; its outcome is
  all-gathered, so every process of a refused job raises the same error and none touches the
  file. The job is one holder: the processes share its fate, and only process 0 writes files.
* **Release.** On exit process 0 removes the file if it still holds its own token.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import secrets
import socket
import sys
import time
from typing import Any

from mojax import distributed
from mojax.infra.jsonl import fsync_dir

LOCK_FILE = "lock"
MACHINE_ID_FILE = "/etc/machine-id"
_UNREADABLE_STALE_S = 60.0
_log = logging.getLogger(__name__)


class WorkdirLockedError(RuntimeError):
    """Another live job holds the workdir's lock (the message names it), or it cannot be taken."""


def _read(path: str) -> str:
    """The stripped text of ``path`` (a byte that is not UTF-8 replaced); "" when it cannot be
    read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _proc_start(pid: int) -> int | None:
    """The start tick of process ``pid`` (``/proc/<pid>/stat`` field 22), None if not running.

    A zombie (state ``Z``; ``X`` dead) is not running: it holds no files and writes nothing,
    and where nobody reaps it (a container whose init does not, a killed launcher's children)
    it keeps its pid and start tick for as long as the host lives.
    """
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _parse(text: str) -> dict[str, Any] | None:
    """The holder record in a lock file's text, None when it is not one."""
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) and "pid" in holder else None


def _pid_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def holder_record(token: str, machine_id_path: str = MACHINE_ID_FILE) -> dict[str, Any]:
    """This process as a lock holder (``machine_id``: the contents of ``machine_id_path``, "" when
    it has none)."""
    return {
        "host": socket.gethostname(),
        "machine_id": _read(machine_id_path),
        "pid": os.getpid(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv)[:500],
        "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
        "slurm_restart": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "pid_ns": _pid_ns(),
        "proc_start": _proc_start(os.getpid()),
        "token": token,
    }


def _same_machine(holder: dict[str, Any], me: dict[str, Any]) -> bool | None:
    """True: ``holder`` ran on this machine; False: on another; None: cannot tell (the same
    hostname, no machine id on one side, another boot id: a reboot or a namesake)."""
    if holder.get("host") != me["host"]:
        return False
    theirs, mine = holder.get("machine_id") or "", me["machine_id"]
    if theirs and mine:
        return theirs == mine
    return True if holder.get("boot_id") == me["boot_id"] else None


def stale_reason(
    holder: dict[str, Any] | None, age_s: float, machine_id_path: str = MACHINE_ID_FILE
) -> str | None:
    """Why the lock of ``holder`` (None: unreadable, ``age_s`` old) is stale, or None."""
    if holder is None:
        return "unreadable and over a minute old" if age_s > _UNREADABLE_STALE_S else None
    me = holder_record("", machine_id_path)
    job, restart = holder.get("slurm_job"), holder.get("slurm_restart", 0)
    if job and job == me["slurm_job"] and restart < me["slurm_restart"]:
        return f"SLURM job {job} was requeued (restart {restart} -> {me['slurm_restart']})"
    if not _same_machine(holder, me):
        return None  # another machine, or one this process cannot tell from a namesake
    if holder.get("boot_id") and holder["boot_id"] != me["boot_id"]:
        return f"host {me['host']} (machine id {me['machine_id']}) rebooted since"
    if holder.get("pid_ns") != me["pid_ns"]:
        return None  # another container on this host: its pids are not ours to check
    start = _proc_start(int(holder["pid"]))
    if start is None:
        return f"process {holder['pid']} is not running"
    if holder.get("proc_start") is not None and start != holder["proc_start"]:
        return f"pid {holder['pid']} now belongs to another process"
    return None


def locked_message(
    workdir: str, path: str, holder: dict[str, Any] | None, machine_id_path: str = MACHINE_ID_FILE
) -> str:
    if holder is None:
        who = "  (the lock file is being written or unreadable)"
    else:
        job = f", SLURM job {holder['slurm_job']}" if holder.get("slurm_job") else ""
        mid = holder.get("machine_id") or "none recorded"
        who = (
            f"  host {holder.get('host')} (machine id {mid}), pid {holder.get('pid')}, started "
            f"{holder.get('started')}{job}\n  command: {holder.get('command')}"
        )
        same = _same_machine(holder, holder_record("", machine_id_path))
        if not same:
            mine = _read(machine_id_path) or "none"
            where = (
                "another machine"
                if same is False
                else "a machine this one cannot tell from itself (same hostname, no machine id, "
                "another boot id)"
            )
            who += (
                f"\n  It runs on {where} (this one: host {socket.gethostname()}, machine id "
                f"{mine}), so mojax cannot see whether it still lives and never takes it over."
            )
    return (
        f"workdir {workdir} is in use by another training run (lock file {path}):\n{who}\n"
        "Two runs in one workdir overwrite each other's checkpoints and metrics. Wait for it to "
        "finish or stop it, or use another --workdir. If that process is gone (e.g. its host "
        f"crashed), remove {path}."
    )


class WorkdirLock:
    """The lock of ``workdir`` (module docstring); a context manager that every process of the
    job enters.

    Raises (on entry, on every process):
      WorkdirLockedError: another live job holds it, or it cannot be created.
    """

    def __init__(self, workdir: str | os.PathLike, machine_id_path: str = MACHINE_ID_FILE):
        self.workdir = os.path.abspath(os.fspath(workdir))
        self.machine_id_path = machine_id_path
        self.path = os.path.join(self.workdir, LOCK_FILE)
        self.token = secrets.token_hex(8)
        self.held = False

    def __enter__(self) -> WorkdirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Process 0 takes the lock; all processes learn the outcome (one all-gather)."""
        error = None
        if distributed.is_leader():
            try:
                self._acquire_here()
            except (WorkdirLockedError, OSError) as e:
                error = f"{e}" if isinstance(e, WorkdirLockedError) else f"cannot lock: {e}"
        error = distributed.allgather_objects(error)[0]
        if error:
            raise WorkdirLockedError(error)

    def _acquire_here(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                self._judge_holder()
                continue
            record = holder_record(self.token, self.machine_id_path)
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.fsync(fd)
            os.close(fd)
            fsync_dir(self.workdir)
            self.held = True
            return
        raise WorkdirLockedError(f"{self.path} changed hands 3 times while being taken; retry")

    def _judge_holder(self) -> None:
        """Raises naming a live holder; takes a stale lock away (the caller retries)."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                text = f.read()  # a damaged byte makes it unreadable JSON, not a traceback
            age = time.time() - os.path.getmtime(self.path)
        except FileNotFoundError:
            return  # released meanwhile
        holder = _parse(text)
        why = stale_reason(holder, age, self.machine_id_path)
        if why is None:
            msg = locked_message(self.workdir, self.path, holder, self.machine_id_path)
            raise WorkdirLockedError(msg)
        aside = f"{self.path}.stale-{self.token}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        if _read(aside) != text.strip():  # another job took it over meanwhile: put theirs back
            if not os.path.exists(self.path):
                os.rename(aside, self.path)
            return
        _log.warning("taking over the stale workdir lock %s (%s): %s", self.path, why, text)
        os.remove(aside)

    def release(self) -> None:
        """Process 0 removes the lock file if it still holds its token."""
        if not self.held:
            return
        self.held = False
        text = _read(self.path)
        if (_parse(text) or {}).get("token") == self.token:
            os.remove(self.path)
        else:
            _log.warning("workdir lock %s is no longer ours; left in place: %s", self.path, text)
