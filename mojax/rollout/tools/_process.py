"""Running one sandbox process: feed it its input, read its output under a cap, kill it on time.

``run_process`` is the host side of every ``PythonSandbox`` call. It starts the command in its own
session (process group), writes the payload to its stdin from a helper thread, reads stdout and
stderr incrementally until the process exits, the output passes ``max_output_bytes`` or the
wall-clock ``timeout_s`` runs out, and then SIGKILLs the whole group. It returns what happened; the
sandbox turns that into a ``ToolResult``.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable

GRACE_S = 0.5  # how long to wait for pipes to close after the main process exited
KILL_WAIT_S = 5.0  # how long to wait for the killed process to be reaped
WRITER_WAIT_S = 1.0  # how long to wait for the stdin writer thread after the kill


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one process run produced: its output, why it stopped early (if it did), its exit."""

    out: bytes
    err: bytes
    reason: str | None  # "timeout", "output_limit" or None (it exited by itself)
    returncode: int | None  # None: not reaped within KILL_WAIT_S of the kill
    duration_s: float
    start_error: str | None = None  # the command could not be started at all


def run_process(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    payload: bytes,
    timeout_s: float,
    max_output_bytes: int,
    on_start: Callable[[int], None] | None = None,
) -> Outcome:
    """Runs ``argv`` once (see the module docstring); ``on_start(pid)`` runs right after the start."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,  # own process group: the timeout kills all of it
            close_fds=True,
        )
    except OSError as e:
        return Outcome(b"", b"", None, None, time.monotonic() - start, start_error=str(e))
    if on_start is not None:
        on_start(proc.pid)
    writer = threading.Thread(target=_write_stdin, args=(proc.stdin, payload), daemon=True)
    writer.start()
    out, err = bytearray(), bytearray()
    reason = _read(proc, out, err, start + timeout_s, max_output_bytes)
    _kill_group(proc)
    try:
        returncode = proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        returncode = None
    writer.join(timeout=WRITER_WAIT_S)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    return Outcome(bytes(out), bytes(err), reason, returncode, time.monotonic() - start)


def _read(proc, out: bytearray, err: bytearray, deadline: float, max_bytes: int) -> str | None:
    """Reads both pipes until they close, the deadline passes or the output passes ``max_bytes``."""
    exited_at = None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if exited_at is None and _exited(proc.pid):
                exited_at = now
            if exited_at is not None and now - exited_at > GRACE_S:
                return None  # a leftover child holds the pipes open; it is killed next
            for key, _ in sel.select(min(deadline - now, 0.1)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                room = max_bytes - len(out) - len(err)
                key.data.extend(chunk[: max(room, 0)])
                if len(chunk) > room:
                    return "output_limit"
    return None


def _write_stdin(stream, payload: bytes) -> None:
    try:
        stream.write(payload)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the sandbox died before reading its input; the result says why


def _exited(pid: int) -> bool:
    """Whether the child exited, *without* reaping it.

    An unreaped zombie keeps its pid (and so its process-group id) reserved, so the ``killpg`` that
    follows cannot hit a recycled pid.
    """
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILLs the sandbox's process group (its session: ``start_new_session=True``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
