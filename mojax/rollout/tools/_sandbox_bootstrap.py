"""Runs inside the sandbox: confine this process, set rlimits, arm the audit guard, run the cells.

This file is not imported by mojax. ``python_sandbox.PythonSandbox`` reads its source and runs it as
``python -I -c <source>``, because the sandbox cannot see the repository. It is standard library
only.

Protocol: one JSON object on stdin with keys

* ``uid`` (int or null): setuid to it first; used when the host runs as root, so that the kernel's
  root exemption from RLIMIT_NPROC does not apply and root-only files stay closed;
* ``tmpfs`` ([[path, bytes, inodes]]): tmpfs mounts to remount with these size and inode (file
  count) caps; bwrap cannot set an inode cap itself, so it keeps CAP_SYS_ADMIN for this step;
* ``userns`` (bool): after the uid drop, move into a new user namespace of our own (bwrap mode on a
  root host, where bwrap itself runs without one), so that RLIMIT_NPROC counts this call's
  processes only;
* ``confine`` (bool): disable user namespace creation (``user.max_user_namespaces = 0`` in the
  sandbox's user namespace, the setting bwrap's ``--disable-userns`` uses) and drop every
  capability, bounding set included (bwrap mode);
* ``seccomp`` (hex string or null): a packed classic-BPF program (``_seccomp.program``) loaded
  last, after ``PR_SET_NO_NEW_PRIVS``;
* ``limits`` ({name: value} for ``resource.RLIMIT_<name>``), ``guard`` (null or {"workdir": str,
  "read_roots": [str]}), ``history`` (earlier cells of a stateful session, replayed with output
  discarded), ``cell`` (the code to run) and ``print_last_expr``.

With any uid still 0, or any capability left after ``confine``, the bootstrap refuses to run model
code. Exit codes: 0 ok, 1 the cell raised, 3 MemoryError, 70 setup failure.
"""

import json
import os
import sys

EXIT_ERROR = 1
EXIT_MEMORY = 3
EXIT_SETUP = 70

# Modules whose import would let code sidestep the guard: raw process spawning, raw C calls.
_BLOCKED_IMPORTS = frozenset({"_xxsubinterpreters", "cffi"})
# Raw C access: refused when the nearest non-library frame is model code (numpy uses ctypes).
# (sympy imports subprocess, so _posixsubprocess too; its fork_exec raises no audit event.)
_CELL_ONLY_IMPORTS = frozenset({"ctypes", "_ctypes", "_posixsubprocess"})
_CELL_ONLY_EVENTS = frozenset(
    {"ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function"}
)
# Directory listings outside the readable roots.
_LIST_EVENTS = frozenset({"os.listdir", "os.scandir"})
# Audit events that start processes, send signals or open sockets (PEP 578 event names).
_BLOCKED_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.startfile",
        "subprocess.Popen",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
    }
)
# Path-taking events that modify the file system: allowed only under the work dir.
_WRITE_EVENTS = frozenset(
    {
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
    }
)


def _called_from_cell(library_roots):
    """Whether the code that triggered the current audit event is model code (not a library).

    Walks out of the audit hook, importlib, ctypes and ``<string>`` frames; the first other frame
    decides: a library frame is one whose file lies under ``library_roots`` (the interpreter's own
    trees). Any other name -- ``<cell>``, or one model code made up with ``compile(...,
    "fake_stdlib.py", ...)`` -- counts as model code. (Code can still name a real library file;
    audit hooks are no security boundary.)
    """
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<cell"):
            return True
        if not (name.startswith("<frozen") or "/ctypes/" in name or name == "<string>"):
            return not (os.path.isabs(name) and _under(name, library_roots))
        frame = frame.f_back
    return False


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _install_guard(workdir, read_roots):
    """Best-effort audit hook for the fallback mode (PEP 578 hooks are no security boundary).

    Blocks process creation, signals, sockets and ctypes; allows file writes only under ``workdir``
    and reads only under ``read_roots`` (the interpreter's own trees) or ``workdir``. ``/proc`` is
    limited to this process's own entries so that ``/proc/<parent>/environ`` stays closed.
    """
    own_proc = f"/proc/{os.getpid()}"
    realpath = os.path.realpath
    workdir = realpath(workdir)
    library_roots = tuple(read_roots) + tuple(realpath(r) for r in read_roots)
    read_roots = tuple(realpath(r) for r in read_roots) + (workdir, own_proc)
    read_files = ("/dev/null", "/dev/urandom", "/dev/zero", "/etc/localtime")

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int) or path is None:
                return
            path = realpath(os.fsdecode(path))
            writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            if writing:
                if not _under(path, (workdir,)) and path != "/dev/null":
                    raise PermissionError(f"sandbox: writing {path} is not allowed")
            elif path not in read_files and not _under(path, read_roots):
                raise PermissionError(f"sandbox: reading {path} is not allowed")
        elif event == "import":
            top = args[0].split(".")[0]
            if top in _BLOCKED_IMPORTS or (
                top in _CELL_ONLY_IMPORTS and _called_from_cell(library_roots)
            ):
                raise ImportError(f"sandbox: import of {args[0]} is not allowed")
        elif event in _CELL_ONLY_EVENTS:
            if _called_from_cell(library_roots):
                raise PermissionError(f"sandbox: {event} is not allowed")
        elif event in _LIST_EVENTS:
            path = args[0]
            if isinstance(path, (str, bytes)) and not _under(
                realpath(os.fsdecode(path)), read_roots
            ):
                raise PermissionError(f"sandbox: listing {os.fsdecode(path)} is not allowed")
        elif event in _BLOCKED_EVENTS:
            if event in ("os.kill", "os.killpg") and args[0] in (0, os.getpid()):
                return
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event in _WRITE_EVENTS:
            for p in args:
                if isinstance(p, (str, bytes)) and not _under(realpath(os.fsdecode(p)), (workdir,)):
                    raise PermissionError(f"sandbox: {event} on {os.fsdecode(p)} is not allowed")

    sys.addaudithook(hook)


_MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 2, 4, 32
_CLONE_NEWUSER = 0x10000000
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE, _PR_SET_SECCOMP, _PR_CAPBSET_DROP = 3, 4, 22, 24
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
_SECCOMP_MODE_FILTER = 2
_CAPABILITY_VERSION_3 = 0x20080522


class _Libc:
    """The few libc calls the setup needs (``ctypes``; dropped from ``sys.modules`` afterwards)."""

    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        self.lib = ctypes.CDLL(None, use_errno=True)

    def call(self, what, name, *args):
        """``libc.name(*args)``; a non-zero return raises ``OSError`` naming ``what``."""
        if getattr(self.lib, name)(*args) != 0:
            err = self.ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def forget(self):
        """A cell's ``import ctypes`` must reach the guard's import check, not a cached module."""
        for name in [
            m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))
        ]:
            del sys.modules[name]


def _limit_tmpfs(libc, mounts):
    """Remounts each ``[path, bytes, inodes]`` tmpfs with that size and inode (file count) cap."""
    for path, size, inodes in mounts:
        opts = f"size={int(size)},nr_inodes={int(inodes)}".encode()
        flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV
        libc.call(f"remount {path}", "mount", None, path.encode(), None, flags, opts)


def _drop_uid(uid):
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if 0 in os.getresgid() or os.getgroups():
        raise RuntimeError("still in group 0 after setgid")


def _own_user_namespace(libc):
    """Moves into a new user namespace that maps only our own uid and gid (to themselves).

    The uid drop made this process non-dumpable, which closes its own ``/proc/self/*_map`` files
    to it; it is dumpable only while it writes them.
    """
    uid, gid = os.geteuid(), os.getegid()
    dumpable = libc.lib.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    libc.call("set dumpable", "prctl", _PR_SET_DUMPABLE, 1, 0, 0, 0)
    libc.call("unshare(CLONE_NEWUSER)", "unshare", _CLONE_NEWUSER)
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    libc.call("restore dumpable", "prctl", _PR_SET_DUMPABLE, dumpable, 0, 0, 0)


def _confine(libc):
    """No new user namespaces from this one on, and no capabilities; both checked afterwards."""
    path = "/proc/sys/user/max_user_namespaces"
    with open(path, "w") as f:
        f.write("0")
    with open(path) as f:
        if f.read().strip() != "0":
            raise RuntimeError(f"{path} is not 0")
    for cap in range(64):
        if libc.lib.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if libc.ctypes.get_errno() == 22:  # EINVAL: past the last capability
                break
            raise OSError(
                libc.ctypes.get_errno(), f"dropping capability {cap} from the bounding set"
            )
    libc.call(
        "clear ambient capabilities", "prctl", _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0
    )
    header = (libc.ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    libc.call("capset", "capset", header, (libc.ctypes.c_uint32 * 6)())
    with open("/proc/self/status") as f:
        caps = {k: v.strip() for k, v in (ln.split(":", 1) for ln in f if ln.startswith("Cap"))}
    if any(int(v, 16) for v in caps.values()):
        raise RuntimeError(f"capabilities left after dropping them: {caps}")


def _load_seccomp(libc, program):
    """Installs the classic-BPF ``program`` (packed ``struct sock_filter`` records) as a filter."""
    ctypes = libc.ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc.call(
        "seccomp filter", "prctl", _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0
    )


def _setup(spec):
    """Everything between reading the spec and the first cell; any failure raises."""
    libc = _Libc()
    libc.call("prctl(PR_SET_NO_NEW_PRIVS)", "prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _limit_tmpfs(libc, spec["tmpfs"])
    if spec["uid"] is not None:
        _drop_uid(spec["uid"])
    if spec["userns"]:
        _own_user_namespace(libc)
    if spec["confine"]:
        _confine(libc)
    if 0 in os.getresuid():  # every mode: model code never runs as uid 0
        raise RuntimeError(f"refusing to run model code as uid 0 (uids {os.getresuid()})")
    import resource

    for name, value in spec["limits"].items():
        soft, hard = (value, value) if not isinstance(value, list) else value
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (soft, hard))
    if spec["seccomp"] is not None:
        _load_seccomp(libc, bytes.fromhex(spec["seccomp"]))
    libc.forget()
    quiet = open(os.devnull, "w")  # opened before the guard closes the file system
    if spec["guard"] is not None:
        _install_guard(spec["guard"]["workdir"], spec["guard"]["read_roots"])
    return quiet


def _run_cell(source, namespace, print_last_expr, filename="<cell>"):
    import ast
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = ast.parse(source, filename=filename, mode="exec")
    last = None
    if print_last_expr and tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, filename, "eval"), namespace)
        if value is not None:
            print(repr(value))


def _print_exception(e):
    """The traceback from the first cell frame on, as a REPL shows it (no bootstrap frames)."""
    import traceback

    tb = None if isinstance(e, SyntaxError) else e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def main():
    spec = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    sys.stdin = open(devnull, closefd=False)
    try:
        quiet = _setup(spec)
    except Exception as e:  # noqa: BLE001 - any setup failure must stop before user code runs
        print(f"sandbox setup failed: {type(e).__name__}: {e}", file=sys.stderr)
        os._exit(EXIT_SETUP)

    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    real_out, real_err = sys.stdout, sys.stderr
    for i, cell in enumerate(spec["history"]):  # stateful session: earlier cells, output discarded
        sys.stdout = sys.stderr = quiet
        try:
            _run_cell(cell, namespace, False, f"<cell-{i}>")
        except BaseException:  # noqa: B036 - an earlier cell's failure is part of its recorded past
            pass
        finally:
            sys.stdout, sys.stderr = real_out, real_err
    code = 0
    try:
        _run_cell(spec["cell"], namespace, spec["print_last_expr"])
    except MemoryError:
        sys.stdout.flush()
        sys.stderr.write("MemoryError\n")
        code = EXIT_MEMORY
    except SystemExit as e:
        if e.code not in (None, 0):
            sys.stdout.flush()
            sys.stderr.write(f"SystemExit: {e.code}\n")
            code = EXIT_ERROR
    except BaseException as e:  # noqa: B036 - report everything the cell raised, like a REPL
        sys.stdout.flush()
        _print_exception(e)
        code = EXIT_ERROR
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: B036 - a closed stream must not hide the exit code
        pass
    os._exit(code)


if __name__ == "__main__":
    main()
