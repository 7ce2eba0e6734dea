"""Host-side facts and checks for ``PythonSandbox``: who runs it, the interpreter, its arguments."""

import dataclasses
import json
import os
import pathlib
import re
import subprocess

from mojax.rollout.tools._bwrap import is_under

# Accepted ``mode`` values -> the mode they name ("auto" and "fallback" are older names).
MODES = {
    "bwrap": "bwrap",
    "auto": "bwrap",
    "unsafe_fallback": "unsafe_fallback",
    "fallback": "unsafe_fallback",
}


def world_accessible(path: str) -> bool:
    """Whether every directory on ``path`` is searchable and the leaf readable by "other" users."""
    p = pathlib.Path(os.path.realpath(path))
    for parent in reversed(p.parents):
        if not os.stat(parent).st_mode & 0o001:
            return False
    return bool(os.stat(p).st_mode & 0o004)


def host_is_root() -> bool:
    return os.geteuid() == 0 or os.getuid() == 0


def kernel_version() -> tuple[int, int]:
    """(major, minor) of the running Linux kernel; (0, 0) when the release string is not parsed."""
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def count_processes(uid: int) -> int:
    """Processes (and threads: RLIMIT_NPROC counts them) owned by ``uid`` on the host now."""
    n = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                n += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return n


@dataclasses.dataclass(frozen=True)
class Interpreter:
    executable: str
    roots: tuple[str, ...]  # directories the interpreter reads: prefixes and site-packages


def query_interpreter(python: str) -> Interpreter:
    """Asks the (trusted) interpreter where its prefixes and site-packages are."""
    code = (
        "import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix,"
        " sys.base_exec_prefix] + site.getsitepackages()))"
    )
    out = subprocess.run(
        [python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    paths = [p for p in json.loads(out.stdout) if os.path.isdir(p)]
    paths.append(os.path.dirname(os.path.realpath(python)))
    roots: list[str] = []
    for p in sorted({os.path.realpath(p) for p in paths} | set(paths), key=len):
        if not is_under(p, roots):
            roots.append(p)
    return Interpreter(executable=python, roots=tuple(roots))


def check_args(args: dict) -> None:
    """Raises ``ValueError`` naming the first unusable ``PythonSandbox`` argument."""
    for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "tmpfs_mb"):
        _positive(name, args[name])
    for name in ("max_files", "max_output_bytes", "sandbox_uid"):
        _positive(name, args[name])
    if args["call_memory_mb"] is not None:
        _positive("call_memory_mb", args["call_memory_mb"])
    if args["tmpfs_mb"] < 2 or args["max_files"] < 64:
        raise ValueError("PythonSandbox: tmpfs_mb must be >= 2 and max_files >= 64 (two tmpfs)")
    cpu_s = args["cpu_s"]
    if cpu_s is not None and (not isinstance(cpu_s, int) or isinstance(cpu_s, bool) or cpu_s <= 0):
        raise ValueError(f"PythonSandbox: cpu_s must be a positive int, got {cpu_s!r}")
    cgroup = args["cgroup"]
    if not isinstance(cgroup, (bool, str)) or cgroup == "":
        raise ValueError(f"PythonSandbox: cgroup must be True, False or a path, got {cgroup!r}")
    if args["mode"] not in MODES:
        raise ValueError(
            f"PythonSandbox: mode (rollout.sandbox) must be one of {sorted(MODES)}, "
            f"got {args['mode']!r}"
        )


def _positive(name: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"PythonSandbox: {name} must be a positive number, got {value!r}")
