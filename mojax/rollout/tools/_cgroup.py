"""Per-call cgroups for ``PythonSandbox``: one memory cap and one process cap per tool call.

A per-process limit (RLIMIT_AS) lets ``max_processes`` processes each use ``memory_mb``, and tmpfs
pages count against no process at all. A cgroup counts every page the call's processes charge --
their memory, the tmpfs files they write, kernel objects such as inodes -- against one limit, and
every task against one process cap.

Where the cgroup lives (``find_root``):

* cgroup v2: a configured directory (``PythonSandbox(cgroup="/sys/fs/cgroup/...")``), or else this
  process's own cgroup, when its ``cgroup.subtree_control`` enables ``memory`` and ``pids`` and it
  is writable (a delegated subtree, or the root of the hierarchy);
* cgroup v1 (a root host with the ``memory`` and ``pids`` hierarchies mounted): a child of this
  process's own cgroup in each of them;
* else none, and the sandbox falls back to the rlimit bound that its docstring states.

Each call gets a fresh child (``CallCgroup``); the sandbox command is started through ``/bin/sh``,
which writes its own pid into the child's ``cgroup.procs`` before it ``exec``s bwrap, so no process
of the call ever runs outside it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import time

from absl import logging

_counter = itertools.count()
RMDIR_WAIT_S = 2.0  # how long ``close`` waits for the call's processes to leave the cgroup


@dataclasses.dataclass(frozen=True)
class CgroupRoot:
    """Where per-call cgroups are made: ``dirs`` maps a controller to its parent directory."""

    version: int  # 1 or 2
    dirs: dict[str, str]  # {"memory": dir, "pids": dir}; the same directory twice for v2

    def describe(self) -> str:
        return f"cgroup v{self.version} under {sorted(set(self.dirs.values()))}"


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount, from mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                out.append((tail[0], fields[3], fields[4], set(tail[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller name, and under ``""`` for v2."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _join(mount_root: str, mount_point: str, path: str) -> str | None:
    """The directory of cgroup ``path`` under a mount of ``mount_root`` (None: not visible)."""
    rel = os.path.relpath(path, mount_root)
    if rel.startswith(".."):
        return None
    return os.path.normpath(os.path.join(mount_point, rel))


def _v2_usable(directory: str) -> str | None:
    """None when per-call children with memory and pids limits can be made under ``directory``."""
    try:
        with open(os.path.join(directory, "cgroup.subtree_control")) as f:
            enabled = set(f.read().split())
    except OSError as e:
        return f"{directory} is not a cgroup v2 directory ({e})"
    missing = {"memory", "pids"} - enabled
    if missing:
        return f"{directory}/cgroup.subtree_control does not enable {sorted(missing)}"
    if not os.access(directory, os.W_OK):
        return f"{directory} is not writable by this user"
    return None


def find_root(configured: str | None = None) -> tuple[CgroupRoot | None, str]:
    """Where this host lets the sandbox make per-call cgroups, and a one-line reason.

    Args:
      configured: a cgroup v2 directory to use; when given it is the only candidate.

    Returns:
      ``(root, why)``: ``root`` is None when no usable cgroup was found; ``why`` says what was
      found or why none was usable.
    """
    if configured is not None:
        why = _v2_usable(configured)
        return (
            (None, why) if why else (CgroupRoot(2, {"memory": configured, "pids": configured}), "")
        )
    try:
        mounts, own = _mounts(), _own_paths()
    except (OSError, ValueError) as e:
        return None, f"cannot read this process's cgroups: {e}"
    reasons = []
    for fstype, root, point, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            directory = _join(root, point, own[""])
            why = _v2_usable(directory) if directory else "own cgroup not visible"
            if why is None:
                return CgroupRoot(2, {"memory": directory, "pids": directory}), ""
            reasons.append(f"v2: {why}")
    dirs = {}
    for name in ("memory", "pids"):
        for fstype, root, point, opts in mounts:
            if fstype == "cgroup" and name in opts and name in own:
                directory = _join(root, point, own[name])
                if directory and os.access(directory, os.W_OK):
                    dirs[name] = directory
    if len(dirs) == 2:
        return CgroupRoot(1, dirs), ""
    reasons.append(f"v1: no writable memory and pids hierarchies (found {sorted(dirs)})")
    return None, "; ".join(reasons)


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


class CallCgroup:
    """One call's cgroup: ``memory_bytes`` for all its memory, ``max_tasks`` tasks in all.

    ``procs_files`` are the files the start-up shell writes its pid into; ``close`` kills whatever
    is left in the cgroup and removes it.

    Raises:
      OSError: the cgroup could not be made or limited (the caller fails the call closed).
    """

    def __init__(self, root: CgroupRoot, memory_bytes: int, max_tasks: int):
        self.root = root
        self.name = name = f"mojax-sandbox-{os.getpid()}-{next(_counter)}"
        self.dirs: list[str] = []
        try:
            for directory in dict.fromkeys(root.dirs.values()):
                os.mkdir(os.path.join(directory, name))
                self.dirs.append(os.path.join(directory, name))
            self._limit(name, memory_bytes, max_tasks)
        except OSError:
            self.close()
            raise

    def _limit(self, name: str, memory_bytes: int, max_tasks: int) -> None:
        memory = os.path.join(self.root.dirs["memory"], name)
        _write(os.path.join(self.root.dirs["pids"], name, "pids.max"), max_tasks)
        if self.root.version == 2:
            _write(os.path.join(memory, "memory.max"), memory_bytes)
            optional = {"memory.swap.max": 0, "memory.oom.group": 1}
        else:
            _write(os.path.join(memory, "memory.limit_in_bytes"), memory_bytes)
            optional = {"memory.memsw.limit_in_bytes": memory_bytes}  # with swap accounting only
        for file, value in optional.items():
            if os.path.exists(os.path.join(memory, file)):
                _write(os.path.join(memory, file), value)

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this cgroup (memory limit hit)."""
        memory = os.path.join(self.root.dirs["memory"], self.name)
        file = "memory.events" if self.root.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(memory, file)) as f:
                fields = dict(line.split() for line in f if len(line.split()) == 2)
        except OSError:
            return 0
        return int(fields.get("oom_kill", 0))

    def _pids(self) -> list[int]:
        pids = set()
        for file in self.procs_files:
            try:
                with open(file) as f:
                    pids.update(int(p) for p in f.read().split())
            except OSError:
                pass
        return sorted(pids)

    def close(self) -> None:
        """SIGKILLs what is left in the cgroup and removes it (logged if it cannot be removed)."""
        deadline = time.monotonic() + RMDIR_WAIT_S
        for directory in reversed(self.dirs):
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        logging.warning(
                            "PythonSandbox: could not remove cgroup %s: %s", directory, e
                        )
                        break
                    self._kill_all(directory)
                    time.sleep(0.01)
        self.dirs = []

    def _kill_all(self, directory: str) -> None:
        try:
            _write(os.path.join(directory, "cgroup.kill"), 1)  # cgroup v2, Linux 5.14+
            return
        except OSError:
            pass
        for pid in self._pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def join_argv(procs_files: list[str]) -> list[str]:
    """A ``/bin/sh`` prefix that moves itself into each of ``procs_files``, then runs the rest.

    A failed write exits non-zero before anything else runs (the call fails, closed).
    """
    script = "set -e; " + 'echo 0 > "$1"; shift; ' * len(procs_files) + 'exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *procs_files]
