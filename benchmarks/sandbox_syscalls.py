"""Which system calls sandboxed programs make: the measurement behind the seccomp allow-list.

Runs each cell of ``tests/sandbox_workload.py`` (imports, files, threads, processes, shell tools,
computation, loopback sockets, signals and time; numpy and sympy where the interpreter has them) in
a real bwrap ``PythonSandbox`` whose bwrap runs under ``strace -f``, and prints, for every system
call that a sandboxed process made after the bootstrap loaded its filter, how often it was made,
by which cells, and what the filter of this checkout decides for it (``_seccomp.decision``). Calls
that bwrap itself makes (its namespace setup, its init process) and the bootstrap's own setup
before the filter are left out: they run before or outside the filter.

    python benchmarks/sandbox_syscalls.py            # every cell
    python benchmarks/sandbox_syscalls.py --cell files --cell shell

The run of 2026-12-06 (x86_64, Debian 12) is in ``benchmarks/logs/sandbox_syscalls_x86_64.log``.

Needs ``strace`` and a host where it may trace the sandbox (root, or ``ptrace_scope`` 0). A cell
that fails is reported with its output; under the allow-list that names a call the programs need.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import stat
import sys
import tempfile

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_REPO, os.path.join(_REPO, "tests")]  # this checkout's mojax and test workload

from sandbox_workload import CELLS, LIBRARIES, LIBRARY_MODULES  # noqa: E402

from mojax.rollout.tools import PythonSandbox, _seccomp  # noqa: E402
from mojax.rollout.tools._bwrap import bundled_bwrap  # noqa: E402

_LINE = re.compile(r"^(\d+\.\d+) (?:<\.\.\. (\w+) resumed>|(\w+)\()")


def _wrapper(folder: str, bwrap: str) -> str:
    """A bwrap stand-in that runs the real one under ``strace -f``, one trace file per process."""
    path = os.path.join(folder, "bwrap")
    strace = shutil.which("strace")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec {strace} -f -ff -qq -ttt -o {folder}/trace -- {bwrap} "$@"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _filtered_calls(folder: str) -> tuple[collections.Counter, collections.Counter]:
    """System calls made under the filter, and those of them that failed with EPERM (with the
    first argument of a refused ``socket``): in every process except bwrap's own, after the moment
    the bootstrap loaded the filter (every later process descends from it)."""
    files = {}
    for name in os.listdir(folder):
        if name.startswith("trace."):
            with open(os.path.join(folder, name), errors="replace") as f:
                files[name] = f.read().splitlines()
    loaded = min(
        (
            float(ln.split()[0])
            for lines in files.values()
            for ln in lines
            if "PR_SET_SECCOMP" in ln
        ),
        default=None,
    )
    counts, refused = collections.Counter(), collections.Counter()
    if loaded is None:
        return counts, refused
    for lines in files.values():
        if any("pivot_root(" in ln for ln in lines) or (lines and "/bwrap" in lines[0]):
            continue  # bwrap: the outer process and the namespace's init
        for line in lines:
            m = _LINE.match(line)
            if m and float(m.group(1)) > loaded:
                call = m.group(2) or m.group(3)
                counts[call] += 1
                if " = -1 EPERM " in line:
                    first = line.split("(", 1)[1].split(",", 1)[0] if "(" in line else ""
                    refused[f"{call}({first})" if call.startswith("socket") else call] += 1
    return counts, refused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", action="append", help="run only these cells (repeatable)")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("strace is not installed", file=sys.stderr)
        return 2
    cells = dict(CELLS)
    cells["libraries"] = LIBRARIES
    if args.cell:
        cells = {name: cells[name] for name in args.cell}
    arch = _seccomp.machine()
    seen: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    eperm: collections.Counter = collections.Counter()
    failed = []
    for name, code in cells.items():
        with tempfile.TemporaryDirectory(prefix="mojax-strace-") as folder:
            sandbox = PythonSandbox(
                bwrap=_wrapper(folder, bundled_bwrap()), timeout_s=120, max_output_bytes=1 << 20
            )
            if name == "libraries":
                probe = sandbox.run("import " + ", ".join(LIBRARY_MODULES))
                if probe.exit_reason != "ok":
                    print(f"skipped {name}: {probe.error}")
                    continue
            for trace in os.listdir(folder):
                if trace.startswith("trace."):
                    os.remove(os.path.join(folder, trace))
            result = sandbox.run(code)
            if result.exit_reason != "ok" or f"ok {name}" not in result.output:
                failed.append(name)
                print(f"cell {name} failed ({result.exit_reason}): {result.error}")
                print(result.output[-2000:])
            counts, refused = _filtered_calls(folder)
            for call, n in counts.items():
                seen[call][name] += n
            eperm.update(refused)
    numbers = _seccomp.numbers(arch)
    print(f"\n{'system call':24} {'calls':>7}  {'decision':9} cells")
    for call in sorted(seen):
        decision = _seccomp.decision(call) if call in numbers else "unknown"
        total = sum(seen[call].values())
        print(f"{call:24} {total:7d}  {decision:9} {', '.join(sorted(seen[call]))}")
    refused = sorted(c for c in seen if _seccomp.decision(c) in ("EPERM", "ENOSYS"))
    print(f"\n{len(seen)} system calls made; refused by this filter: {refused or 'none'}")
    print(f"EPERM at run time (filter or kernel): {dict(sorted(eperm.items())) or 'none'}")
    unused = sorted(set(_seccomp.allowed(arch)) - set(seen))
    print(f"allowed but not made by these cells ({len(unused)}): {', '.join(unused)}")
    print(f"failed cells: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
