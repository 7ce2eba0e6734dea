"""Issue 49 in a real sandbox (``PythonSandbox.run``, as the rollout calls it; bwrap on the bundled
binary): the seccomp allow-list refuses what the red-team pass found open, the sandbox cannot read
the host's kernel command line or bwrap's own, and ordinary programs still run under the filter.

- socket families: AF_VSOCK (on a VM, the hypervisor's listeners, which no network namespace
  covers), AF_NETLINK and AF_PACKET are refused with EPERM, in both modes (the fallback runs in the
  host's network namespace, so there the filter is all that keeps determined code off vsock);
  AF_UNIX, AF_INET and AF_INET6 still work. A control run without the filter creates the netlink
  socket, so the filter is what refuses it.
- ``memfd_secret`` (pages outside RLIMIT_AS), ``open_tree_attr``, ``listmount``, ``statmount``,
  ``personality``, ``modify_ldt``, ``semget``: EPERM, with the same control.
- ``/proc/cmdline`` (it names the hypervisor's vsock ports here), PID 1's command line (bwrap's
  argv: every host path it binds) and mount table: covered by ``/dev/null`` (EACCES). A control run
  without the covers shows the host's kernel command line.
- the cells of ``tests/sandbox_workload.py`` (imports, files, threads, processes, shell tools,
  computation, loopback sockets, signals; numpy and sympy where installed) run under the filter.

The BPF program itself is checked number by number in ``test_tools_seccomp.py``.
"""

import errno

import pytest
from sandbox_support import HOST_IS_ROOT, MODES, has_modules, make_sandbox
from sandbox_workload import CELLS, LIBRARIES, LIBRARY_MODULES

from mojax.rollout.tools import _bwrap, _seccomp

FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}
FAMILIES["AF_VSOCK"] = 40
REFUSED_FAMILIES = ("AF_NETLINK", "AF_PACKET", "AF_VSOCK")

_SOCKETS = """
import socket
for name, family in {families!r}.items():
    for kind in ('SOCK_STREAM', 'SOCK_DGRAM', 'SOCK_RAW'):
        try:
            socket.socket(family, getattr(socket, kind)).close()
            print(name, kind, 'created')
        except OSError as e:
            print(name, kind, e.errno)
    try:
        a, b = socket.socketpair(family, socket.SOCK_STREAM)
        a.close(), b.close()
        print(name, 'pair', 'created')
    except OSError as e:
        print(name, 'pair', e.errno)
"""

# The same through libc: the fallback's audit hook refuses Python sockets to every frame, so
# determined code (ctypes, compiled under a library file name) is what the filter must stop there.
_SOCKETS_LIBC = """
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
for name, family in {families!r}.items():
    for kind in ('SOCK_STREAM', 'SOCK_DGRAM', 'SOCK_RAW'):
        fd = libc.socket(family, getattr(socket, kind), 0)
        print(name, kind, 'created' if fd >= 0 else ctypes.get_errno())
        if fd >= 0:
            libc.close(fd)
    pair = (ctypes.c_int * 2)()
    r = libc.socketpair(family, socket.SOCK_STREAM, 0, pair)
    print(name, 'pair', 'created' if r == 0 else ctypes.get_errno())
"""


@pytest.fixture(scope="module")
def sandbox():
    return make_sandbox("bwrap", timeout_s=30.0, cpu_s=60, max_output_bytes=1 << 20)


def _lines(output: str) -> dict[str, str]:
    return {ln.rsplit(" ", 1)[0]: ln.rsplit(" ", 1)[1] for ln in output.splitlines() if ln}


@pytest.mark.parametrize("mode", MODES)
def test_socket_families_outside_the_allow_list_are_refused(mode, monkeypatch):
    if mode != "bwrap" and not HOST_IS_ROOT:
        pytest.skip("the fallback on a non-root host runs as the caller's uid: no boundary here")
    sb = make_sandbox(mode, timeout_s=10.0)
    code = _SOCKETS.format(families=FAMILIES)
    if mode == "bwrap":
        result = sb.run(code)
    else:
        determined = _SOCKETS_LIBC.format(families=FAMILIES)
        result = sb.run(f"exec(compile({determined!r}, __import__('os').__file__, 'exec'))")
    assert result.exit_reason == "ok", result
    got = _lines(result.output)
    for name in REFUSED_FAMILIES:
        for kind in ("SOCK_STREAM", "SOCK_DGRAM", "SOCK_RAW", "pair"):
            assert got[f"{name} {kind}"] == str(errno.EPERM), (name, kind, result.output)
    for name in ("AF_UNIX", "AF_INET", "AF_INET6"):
        assert got[f"{name} SOCK_STREAM"] == "created", result.output
    assert got["AF_UNIX pair"] == "created"
    if mode == "bwrap":  # control: the same sandbox without its filter
        monkeypatch.setattr(sb, "_seccomp", None)
        control = _lines(sb.run(code).output)
        assert control["AF_NETLINK SOCK_RAW"] == control["AF_NETLINK SOCK_DGRAM"] == "created"
        assert control["AF_VSOCK SOCK_STREAM"] != str(errno.EPERM)  # created on a VM with vsock


def _probe_code(calls) -> str:
    lines = ["import ctypes", "libc = ctypes.CDLL(None, use_errno=True)"]
    lines.append("buf = (ctypes.c_char * 64)()")
    for name, args in calls.items():
        lines.append(f"r = libc.syscall({_seccomp.numbers()[name]}, *{args})")
        lines.append(f"print({name!r}, 0 if r >= 0 else ctypes.get_errno())")
    return "\n".join(lines)


# (arguments as source text) for each call of issue 49 that this machine has
_ISSUE_CALLS = {
    "memfd_secret": "(0,)",
    "personality": "(0xFFFFFFFF,)",  # a query: answers the current persona
    "semget": "(0, 1, 0o600)",  # IPC_PRIVATE, in the call's own IPC namespace
    "modify_ldt": "(0, buf, 64)",  # read the LDT (x86_64 only)
    "statmount": "(None, None, 0, 0)",
    "listmount": "(None, None, 0, 0)",
    "open_tree_attr": "(-100, b'/tmp', 0, None, 0)",
}
_ISSUE_CALLS = {k: v for k, v in _ISSUE_CALLS.items() if k in _seccomp.numbers()}


def test_the_issue_system_calls_are_refused(sandbox, monkeypatch):
    result = sandbox.run(_probe_code(_ISSUE_CALLS))
    assert result.exit_reason == "ok", result
    assert _lines(result.output) == {name: str(errno.EPERM) for name in _ISSUE_CALLS}
    monkeypatch.setattr(sandbox, "_seccomp", None)  # control: the same sandbox, no filter
    control = sandbox.run(_probe_code(_ISSUE_CALLS))
    assert control.exit_reason == "ok", control
    unfiltered = _lines(control.output)
    for name in ("memfd_secret", "personality", "semget", "modify_ldt"):
        if name in unfiltered:  # answered (or ENOSYS where the kernel lacks it), never EPERM
            assert unfiltered[name] != str(errno.EPERM), (name, control.output)
    assert unfiltered["personality"] == "0" and unfiltered["semget"] == "0"


_PROC = """
for path in ('/proc/cmdline', '/proc/1/cmdline', '/proc/1/task/1/cmdline', '/proc/1/mountinfo',
             '/proc/1/task/1/mountinfo', '/proc/self/cmdline'):
    try:
        with open(path, 'rb') as f:
            print(path, repr(f.read()))
    except OSError as e:
        print(path, 'refused', e.errno)
"""


def test_host_command_lines_are_unreadable(sandbox, monkeypatch):
    with open("/proc/cmdline") as f:
        host_cmdline = f.read().strip()
    result = sandbox.run(_PROC)
    assert result.exit_reason == "ok", result
    for path in _bwrap.PROC_HIDDEN:
        assert f"{path} refused {errno.EACCES}" in result.output, result.output
    assert "/proc/self/cmdline b'" in result.output  # its own entries stay readable
    for leak in (host_cmdline, sandbox.bwrap_path, "--unshare-pid", "--ro-bind"):
        assert not leak or leak not in result.output, leak
    monkeypatch.setattr(_bwrap, "PROC_HIDDEN", ())  # control: the same sandbox without covers
    control = sandbox.run(_PROC).output
    assert "--unshare-pid" in control and sandbox.bwrap_path in control
    if host_cmdline:
        assert repr(host_cmdline.encode())[2:-1][:40] in control


CELL_NAMES = [*CELLS, "libraries"]


@pytest.mark.parametrize("name", CELL_NAMES)
def test_ordinary_programs_run_under_the_filter(sandbox, name):
    if name == "libraries" and not has_modules(sandbox.python, *LIBRARY_MODULES):
        pytest.skip(f"{sandbox.python} has no {' / '.join(LIBRARY_MODULES)}")
    result = sandbox.run(LIBRARIES if name == "libraries" else CELLS[name])
    assert result.exit_reason == "ok", result
    assert f"ok {name}" in result.output.splitlines(), result.output
