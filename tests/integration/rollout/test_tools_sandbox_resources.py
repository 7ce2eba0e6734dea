"""Resource and kernel attacks on the bwrap sandbox: tmpfs, /dev, user namespaces, seccomp, and the
process and memory limits of one call next to another.

bwrap mode on the bundled binary, in the mode of the host running the tests (root in CI; run them
as a normal user for the non-root mode). What contains each attack (docs/reliability.md):

- filling ``/tmp`` or ``/dev/shm``: tmpfs size caps, 7/8 and 1/8 of ``tmpfs_mb``;
- creating many files: tmpfs inode caps, 7/8 and 1/8 of ``max_files`` (bwrap cannot set these;
  the bootstrap remounts both before it drops its capabilities);
- writing ``/dev``: a read-only tmpfs holding five device nodes, no ptys;
- user namespaces (``unshare -U -r``, ``unshare(CLONE_NEWUSER)``, ``clone(CLONE_NEWUSER)``): the
  seccomp filter (EPERM) and, beneath it, ``user.max_user_namespaces = 0`` in the call's own user
  namespace (ENOSPC);
- ptrace, keyctl, bpf, perf_event_open, userfaultfd, io_uring, memfd, SysV IPC: the seccomp filter;
- a fork bomb in one call while another runs: RLIMIT_NPROC counts per user namespace, and every
  call has its own (plus a pids cgroup where there is one);
- memory spread over many processes or put in tmpfs: the call's cgroup (skipped without one: then
  the bound is ``max_processes * memory_mb + tmpfs_mb``, checked by ``test_memory_bound_*``).
"""

import errno
import os
import threading
import time

import pytest
from sandbox_support import HOST_IS_ROOT, assert_none_left, make_sandbox

from mojax.rollout.tools import PythonSandbox, SandboxUnavailableError, _cgroup, _seccomp
from mojax.rollout.tools._bwrap import bundled_bwrap

MB = 1 << 20
# 16 MB of tmpfs: /tmp 14 MB, /dev/shm 2 MB; 256 files: /tmp 224, /dev/shm 32.
TMPFS_MB, MAX_FILES = 16, 256
CAPS = {"/tmp": (14 * MB, 224), "/dev/shm": (2 * MB, 32)}


@pytest.fixture(scope="module")
def sandbox():
    return make_sandbox(
        "bwrap", timeout_s=10.0, memory_mb=256, tmpfs_mb=TMPFS_MB, max_files=MAX_FILES
    )


_FILL = """
import os
st = os.statvfs({path!r})
written, stopped, chunk = 0, None, b'x' * (64 << 10)
try:
    for i in range({limit} // (1 << 20)):  # 1 MB files: each well under RLIMIT_FSIZE
        fd = os.open(f'{path}/fill{{i}}', os.O_WRONLY | os.O_CREAT)
        try:
            for _ in range(16):
                written += os.write(fd, chunk)
        finally:
            os.close(fd)
except OSError as e:
    stopped = e.errno
print(written, stopped, st.f_blocks * st.f_frsize)
"""


@pytest.mark.parametrize("path", ["/tmp", "/dev/shm"])
def test_tmpfs_size_is_capped(sandbox, path):
    cap = CAPS[path][0]
    result = sandbox.run(_FILL.format(path=path, limit=4 * cap))
    assert result.exit_reason == "ok", result
    written, stopped, size = result.output.split()
    assert int(size) == cap  # what the kernel reports for the mount
    assert stopped == str(errno.ENOSPC), result.output  # it ran out of space, not of attempts
    assert cap - MB <= int(written) <= cap


_FILES = """
import os
st = os.statvfs({path!r})
made, stopped = 0, None
try:
    while made < {limit}:
        open(f'{path}/f{{made}}', 'w').close()
        made += 1
except OSError as e:
    stopped = e.errno
print(made, stopped, st.f_files, st.f_ffree)
"""


@pytest.mark.parametrize("path", ["/tmp", "/dev/shm"])
def test_file_count_is_capped(sandbox, path):
    inodes = CAPS[path][1]
    result = sandbox.run(_FILES.format(path=path, limit=20 * inodes))
    assert result.exit_reason == "ok", result
    made, stopped, total, free = map(int, result.output.replace("None", "-1").split())
    assert total == inodes  # the mount's inode cap, as the kernel reports it
    assert stopped == errno.ENOSPC and made == free, result.output


def test_dev_is_read_only_with_only_the_basic_devices(sandbox):
    code = """
import os
for path in ('/dev/pwned', '/dev/pts/0', '/dev/mqueue/x'):
    try:
        open(path, 'w').write('x')
        print('wrote', path)
    except OSError as e:
        print('refused', path, e.errno)
try:
    os.openpty()
    print('pty')
except OSError as e:
    print('no pty', e.errno)
open('/dev/null', 'w').write('fine')
print(sorted(os.listdir('/dev')))
"""
    result = sandbox.run(code)
    assert result.exit_reason == "ok", result
    assert f"refused /dev/pwned {errno.EROFS}" in result.output
    assert "wrote" not in result.output and "\npty\n" not in result.output
    want = ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom", "zero"]
    assert result.output.strip().endswith(repr(want)), result.output


_USERNS = """
import ctypes, os, shutil, subprocess
libc = ctypes.CDLL(None, use_errno=True)
print('unshare', libc.unshare(0x10000000), ctypes.get_errno())  # CLONE_NEWUSER
r = libc.syscall({clone}, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
if r == 0:
    os._exit(0)
print('clone', r, ctypes.get_errno())
if shutil.which('unshare'):
    p = subprocess.run(['unshare', '-U', '-r', 'id', '-u'], capture_output=True, text=True)
    print('cli', p.returncode, p.stdout.strip() or '-', p.stderr.strip())
print('max', open('/proc/sys/user/max_user_namespaces').read().strip())
"""


def _clone_nr():
    return _seccomp._NUMBERS[_seccomp.machine()]["clone"]


@pytest.mark.parametrize("layer", ["seccomp", "sysctl alone"])
def test_user_namespaces_cannot_be_created(sandbox, layer, monkeypatch):
    if layer == "sysctl alone":  # the same sandbox without its filter: the sysctl still holds
        monkeypatch.setattr(sandbox, "_seccomp", None)
    want = errno.EPERM if layer == "seccomp" else errno.ENOSPC
    result = sandbox.run(_USERNS.format(clone=_clone_nr()))
    assert result.exit_reason == "ok", result
    assert f"unshare -1 {want}" in result.output
    assert f"clone -1 {want}" in result.output
    assert "max 0" in result.output
    if "cli" in result.output:
        assert "cli 1 -" in result.output, result.output  # `unshare -U -r` failed, printed no uid


# (name, arguments) for each probe; without the filter the kernel answers the first six otherwise
# than EPERM here (unshare(0), memfd, keyctl and SysV shm succeed, the others fail on their
# arguments), which the control run checks.
_PROBES = {
    "unshare": (0,),
    "setns": (-1, 0),
    "memfd_create": (b"x", 0),
    "keyctl": (0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "shmget": (0, 4096, 0o600),  # IPC_PRIVATE, in the call's own IPC namespace
    "ptrace": (0, 0, 0, 0),  # PTRACE_TRACEME
    "io_uring_setup": (1, 0),
    "perf_event_open": (0, 0, -1, -1, 0),
    "userfaultfd": (0,),
    "bpf": (0, 0, 0),
}


def _probe_code():
    nr = _seccomp._NUMBERS[_seccomp.machine()]
    lines = ["import ctypes", "libc = ctypes.CDLL(None, use_errno=True)"]
    for name, args in _PROBES.items():
        lines.append(f"r = libc.syscall({nr[name]}, *{args!r})")
        lines.append(f"print({name!r}, 0 if r >= 0 else ctypes.get_errno())")
    lines.append(f"r = libc.syscall({nr['clone3']}, 0, 0)")
    lines.append("print('clone3', 0 if r >= 0 else ctypes.get_errno())")
    lines.append("print('status', [ln.split()[1] for ln in open('/proc/self/status')")
    lines.append("      if ln.startswith('Seccomp:')][0])")
    return "\n".join(lines)


def test_seccomp_filter_blocks_what_it_says(sandbox, monkeypatch):
    result = sandbox.run(_probe_code())
    assert result.exit_reason == "ok", result
    got = dict(line.split() for line in result.output.splitlines())
    assert got.pop("status") == "2"  # SECCOMP_MODE_FILTER, as the kernel reports it
    assert got.pop("clone3") == str(errno.ENOSYS)  # so that libc falls back to clone
    assert got == {name: str(errno.EPERM) for name in _PROBES}
    monkeypatch.setattr(sandbox, "_seccomp", None)  # control: the same sandbox, no filter
    control = sandbox.run(_probe_code())
    assert control.exit_reason == "ok", control
    unfiltered = dict(line.split() for line in control.output.splitlines())
    assert unfiltered["status"] == "0"
    for name in ("unshare", "setns", "memfd_create", "keyctl", "shmget", "io_uring_setup"):
        assert unfiltered[name] != str(errno.EPERM), (name, control.output)


def test_ordinary_processes_and_threads_still_work_under_the_filter(sandbox):
    code = """
import os, subprocess, threading
pid = os.fork()
if pid == 0:
    os._exit(7)
print(os.waitpid(pid, 0)[1] >> 8)
t = threading.Thread(target=print, args=('thread',))
t.start()
t.join()
print(subprocess.run(['sh', '-c', 'echo child'], capture_output=True, text=True).stdout.strip())
"""
    result = sandbox.run(code)
    assert (result.exit_reason, result.output) == ("ok", "7\nthread\nchild\n"), result


_BOMB = """
import os, time
n, err = 0, None
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    except OSError as e:
        err = e.errno
print('forked', n, err, flush=True)
time.sleep(30)
"""
_NEIGHBOUR = """
import os
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    kids.append(pid)
print('neighbour forked', [os.waitpid(k, 0)[1] for k in kids])
"""


@pytest.mark.parametrize("cgroup", [False, True], ids=["rlimit", "cgroup"])
def test_a_fork_bomb_does_not_starve_a_concurrent_call(cgroup):
    sb = make_sandbox("bwrap", timeout_s=4.0, memory_mb=256, max_processes=8, cgroup=cgroup)
    if cgroup and sb.cgroup is None:
        pytest.skip("no usable cgroup on this host (see PythonSandbox.cgroup)")
    results = {}
    bomb = threading.Thread(target=lambda: results.setdefault("bomb", sb.run(_BOMB)))
    bomb.start()
    time.sleep(1.5)  # the bomb has used up its processes by now
    results["neighbour"] = sb.run(_NEIGHBOUR)
    bomb.join()
    assert results["neighbour"].output == "neighbour forked [0, 0, 0, 0]\n", results["neighbour"]
    assert results["bomb"].exit_reason == "timeout", results["bomb"]
    forked, err = results["bomb"].output.split()[1:3]
    assert int(forked) < 8 and err == str(errno.EAGAIN), results["bomb"]
    assert_none_left()


_SPREAD = """
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        x = bytearray(150 << 20)
        for i in range(0, len(x), 4096):
            x[i] = 1
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
print(sum(os.waitpid(k, 0)[1] == 0 for k in kids))
"""


@pytest.fixture(scope="module")
def capped():
    """A sandbox with a 320 MB cgroup cap per call, or a skip where the host offers no cgroup."""
    sb = make_sandbox("bwrap", timeout_s=10.0, memory_mb=512, tmpfs_mb=64, call_memory_mb=320)
    if sb.cgroup is None:
        pytest.skip(
            "no usable cgroup here (cgroup v2 with memory+pids delegated, or v1 as root); a call's "
            f"memory is bounded by max_processes * memory_mb + tmpfs_mb = {sb.memory_bound_mb} MB"
        )
    return sb


def test_memory_spread_over_processes_is_capped_per_call(capped):
    """Four children of 150 MB each (under RLIMIT_AS): at most two fit in 320 MB at once."""
    result = capped.run(_SPREAD)
    assert result.exit_reason == "ok", result
    assert int(result.output) <= 2, result.output  # 3 x 150 MB would have passed the cap


def test_tmpfs_pages_count_against_the_call_cap(capped):
    code = """
for i in range(4):
    open(f'/tmp/fill{i}', 'wb').write(b'x' * (12 << 20))
print('tmpfs written', flush=True)
x = bytearray(280 << 20)
for i in range(0, len(x), 4096):
    x[i] = 1
print('allocated')
"""
    result = capped.run(code)  # 280 MB + the interpreter fit in 320 MB; with 48 MB of files not
    assert result.output == "tmpfs written\n", result
    assert result.exit_reason == "memory_limit", result
    assert result.error == "memory limit: the call exceeded 320 MB in total (cgroup)"


def test_memory_bound_without_a_cgroup():
    sb = make_sandbox("bwrap", memory_mb=256, max_processes=8, tmpfs_mb=16, cgroup=False)
    assert sb.cgroup is None and sb.memory_bound_mb == 8 * 256 + 16


def test_no_cgroup_is_left_behind(capped):
    for code in ("print(1)", "while True:\n    pass", "import os\nos.fork()\nos.fork()"):
        capped.run(code)
    prefix = f"mojax-sandbox-{os.getpid()}-"
    for directory in set(capped._cgroup_root.dirs.values()):
        assert [d for d in os.listdir(directory) if d.startswith(prefix)] == []


def test_a_cgroup_or_tmpfs_failure_fails_closed(sandbox, monkeypatch, tmp_path):
    marker = "print('model code ran')"
    broken = _cgroup.CgroupRoot(2, {"memory": str(tmp_path / "gone"), "pids": str(tmp_path)})
    monkeypatch.setattr(sandbox, "_cgroup_root", broken)
    result = sandbox.run(marker)
    assert result.exit_reason == "sandbox_error" and "cgroup" in result.error, result
    monkeypatch.undo()
    monkeypatch.setattr(sandbox, "_tmpfs", lambda: [["/nonexistent", MB, 64], ["/dev/shm", MB, 64]])
    result = sandbox.run(marker)
    assert "model code ran" not in result.output
    assert result.exit_reason == "sandbox_error" and "remount /nonexistent" in result.error


def test_a_configured_cgroup_must_work(tmp_path):
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    with pytest.raises(SandboxUnavailableError, match=r"does not enable \['memory', 'pids'\]"):
        PythonSandbox(bwrap=bundled_bwrap(), cgroup=str(tmp_path))
    with pytest.raises(SandboxUnavailableError, match="is not a cgroup v2 directory"):
        PythonSandbox(bwrap=bundled_bwrap(), cgroup=str(tmp_path / "missing"))


def test_cgroup_v2_limits_are_written(tmp_path):
    """The v2 files (this host may only have v1): limits, the join prefix, removal."""
    root = _cgroup.CgroupRoot(2, {"memory": str(tmp_path), "pids": str(tmp_path)})
    group = _cgroup.CallCgroup(root, 320 * MB, 10)
    (directory,) = group.dirs
    assert (tmp_path / directory / "memory.max").read_text() == str(320 * MB)
    assert (tmp_path / directory / "pids.max").read_text() == "10"
    assert group.procs_files == [os.path.join(directory, "cgroup.procs")]
    argv = _cgroup.join_argv(group.procs_files) + ["true"]
    assert argv[:2] == ["/bin/sh", "-c"] and argv[-2:] == [group.procs_files[0], "true"]
    for name in os.listdir(directory):  # a real cgroupfs removes its files with the directory
        os.remove(os.path.join(directory, name))
    group.close()
    assert not os.path.exists(directory)


@pytest.mark.skipif(not HOST_IS_ROOT, reason="the per-call user namespace is made on a root host")
def test_root_host_runs_model_code_in_its_own_user_namespace(sandbox):
    result = sandbox.run("print(open('/proc/self/uid_map').read().split())")
    assert result.output == "['65534', '65534', '1']\n", result  # only its own uid is mapped
