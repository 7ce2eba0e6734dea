"""The seccomp program, run through a small classic-BPF interpreter, for every architecture it
supports; its system-call numbers checked against the kernel headers where they are installed.

The filter is an allow-list (issue 49): every system call number that ``_seccomp.ALLOWED`` does not
name is refused, ``socket`` / ``socketpair`` only for AF_UNIX, AF_INET and AF_INET6. The same
decisions are checked in a real sandbox by ``test_tools_sandbox_allowlist.py``.
"""

import os
import re
import struct

import pytest

from mojax.rollout.tools import _seccomp

EPERM, ENOSYS = 0x00050000 | 1, 0x00050000 | 38
ALLOW, KILL = 0x7FFF0000, 0x80000000
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
HEADERS = {
    "x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
    "aarch64": "/usr/include/asm-generic/unistd.h",
}
AF = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}
AF.update({"AF_BLUETOOTH": 31, "AF_ALG": 38, "AF_VSOCK": 40, "AF_XDP": 44})

# The deny-list the filter had before issue 49: each must still be refused.
EARLIER_DENY_LIST = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv",
    "process_vm_writev", "pidfd_getfd", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
    "swapoff", "reboot", "acct", "quotactl", "syslog", "open_by_handle_at", "name_to_handle_at",
    "memfd_create", "shmget", "msgget", "mq_open",
)  # fmt: skip
# What the red-team pass of issue 49 found allowed (modify_ldt exists on x86_64 only).
ISSUE_49 = (
    "memfd_secret", "open_tree_attr", "listmount", "statmount", "personality", "modify_ldt",
    "semget",
)  # fmt: skip
# Further calls that are refused on purpose (the module docstring names them).
ALSO_REFUSED = (
    "shmat", "semop", "msgsnd", "mq_timedsend", "io_setup", "io_submit", "setxattr", "fsetxattr",
    "removexattr", "inotify_init1", "fanotify_init", "mlock", "mlockall", "sync", "syncfs",
    "settimeofday", "clock_settime", "adjtimex", "sethostname", "iopl", "ioperm", "kcmp",
    "process_madvise", "move_pages", "migrate_pages", "seccomp", "uretprobe", "cachestat",
    "lsm_get_self_attr", "setxattrat", "file_setattr", "vmsplice", "capset", "setgroups",
)  # fmt: skip


def run_bpf(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What the filter returns for one system call (the subset of classic BPF it uses)."""
    data = struct.pack("=iIQ6Q", nr - (1 << 32) * (nr >= 1 << 31), arch, 0, arg0, 0, 0, 0, 0, 0)
    ins = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


def _names(arch):
    """The architecture's table, inverted: number -> name."""
    return {nr: name for name, nr in _seccomp.numbers(arch).items()}


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_filter_decisions(arch):
    program = _seccomp.program(arch)
    nr = _seccomp.numbers(arch)
    for name in _seccomp.allowed(arch):
        assert run_bpf(program, nr[name], ARCH[arch]) == ALLOW, name
    assert run_bpf(program, nr["clone3"], ARCH[arch]) == ENOSYS
    assert run_bpf(program, nr["clone"], ARCH[arch], arg0=17) == ALLOW  # fork: SIGCHLD only
    assert run_bpf(program, nr["clone"], ARCH[arch], arg0=0x3D0F00) == ALLOW  # a thread
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000):
        assert run_bpf(program, nr["clone"], ARCH[arch], arg0=flag | 17) == EPERM
    assert run_bpf(program, nr["clone"], ARCH[arch], arg0=0x40000000 | 17) == EPERM
    for allowed in ("read", "write", "close", "fork" if arch == "x86_64" else "openat"):
        assert run_bpf(program, nr[allowed], ARCH[arch]) == ALLOW
    other = ARCH["aarch64" if arch == "x86_64" else "x86_64"]
    assert run_bpf(program, 0, other) == KILL
    assert run_bpf(program, 0, 0x40000003) == KILL  # i386
    assert run_bpf(program, 0, 0x40000028) == KILL  # 32-bit ARM
    if arch == "x86_64":  # x32 system calls carry bit 30
        assert run_bpf(program, 0x40000000 | nr["unshare"], ARCH[arch]) == EPERM
        assert run_bpf(program, 0x40000000 | nr["read"], ARCH[arch]) == EPERM


@pytest.mark.parametrize("arch", sorted(ARCH))
@pytest.mark.parametrize("call", ["socket", "socketpair"])
def test_socket_families(arch, call):
    """AF_UNIX, AF_INET and AF_INET6 only (issue 49: AF_VSOCK reached the hypervisor, AF_NETLINK
    raw sockets were created); only the low 32 bits of the argument are the family (an int)."""
    program, nr = _seccomp.program(arch), _seccomp.numbers(arch)[call]
    for name, family in AF.items():
        want = ALLOW if name in _seccomp.SOCKET_FAMILIES else EPERM
        for arg0 in (family, family | (7 << 32)):
            assert run_bpf(program, nr, ARCH[arch], arg0=arg0) == want, (name, hex(arg0))
    for family in range(0, 64):
        allowed = family in _seccomp.SOCKET_FAMILIES.values()
        assert (run_bpf(program, nr, ARCH[arch], arg0=family) == ALLOW) == allowed, family
    assert _seccomp.SOCKET_FAMILIES == {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_every_number_off_the_allow_list_is_refused(arch):
    """The property issue 49 asks for: a sweep of 0..1023 (and numbers past any table) against the
    program. Allowed exactly: the numbers of ``allowed(arch)``, ``clone`` without namespace flags
    and ``socket`` / ``socketpair`` of an allowed family; ``clone3`` is ENOSYS; all else EPERM,
    whatever the first argument."""
    program, nr = _seccomp.program(arch), _seccomp.numbers(arch)
    allowed = {nr[name] for name in _seccomp.allowed(arch)}
    conditional = {nr["clone"], nr["socket"], nr["socketpair"]}
    names = _names(arch)
    refused = []
    for number in [*range(1024), 0x3FFFFFFF, 0x7FFFFFFF, 0xFFFFFFFF]:
        for arg0 in (0, 1, 2, 10, 17, 40):
            got = run_bpf(program, number, ARCH[arch], arg0=arg0)
            if number in allowed:
                want = ALLOW
            elif number == nr["clone3"]:
                want = ENOSYS
            elif number == nr["clone"]:
                want = ALLOW  # none of these arguments holds a namespace flag
            elif number in (nr["socket"], nr["socketpair"]):
                want = ALLOW if arg0 in (1, 2, 10) else EPERM
            else:
                want = EPERM
            assert got == want, (names.get(number, number), arg0, hex(got))
        if number not in allowed | conditional | {nr["clone3"]}:
            refused.append(number)
    assert len(refused) == 1024 + 3 - len(allowed) - 4  # all but the allowed and the 4 checked


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_earlier_deny_list_and_the_issue_calls_are_refused(arch):
    program, nr = _seccomp.program(arch), _seccomp.numbers(arch)
    for name in EARLIER_DENY_LIST + ISSUE_49 + ALSO_REFUSED:
        if name not in nr:
            assert (name, arch) in (
                ("modify_ldt", "aarch64"),
                ("iopl", "aarch64"),
                ("ioperm", "aarch64"),
                ("uretprobe", "aarch64"),
            ), name
            continue
        assert name not in _seccomp.ALLOWED, name
        assert _seccomp.decision(name) == "EPERM", name
        for arg0 in (0, 1, 2):
            assert run_bpf(program, nr[name], ARCH[arch], arg0=arg0) == EPERM, name
    assert nr["memfd_secret"] == 447 and nr["open_tree_attr"] == 467
    assert (nr["statmount"], nr["listmount"]) == (457, 458)
    if arch == "x86_64":
        assert (nr["personality"], nr["modify_ldt"], nr["semget"]) == (135, 154, 64)


def test_the_allow_list_names_real_calls():
    """Each allowed name exists on at least one architecture (a typo would silently allow
    nothing); the calls whose arguments are checked are not in the unconditional list."""
    both = set(_seccomp.numbers("x86_64")) | set(_seccomp.numbers("aarch64"))
    assert set(_seccomp.ALLOWED) <= both, set(_seccomp.ALLOWED) - both
    assert len(set(_seccomp.ALLOWED)) == len(_seccomp.ALLOWED)
    for name in ("clone", "clone3", "socket", "socketpair"):
        assert name not in _seccomp.ALLOWED
    assert _seccomp.decision("socket") == _seccomp.decision("clone") == "allow if"
    assert _seccomp.decision("clone3") == "ENOSYS" and _seccomp.decision("read") == "allow"


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_program_shape(arch):
    """Within the kernel's 4096 instructions; every jump lands inside the program."""
    program = _seccomp.program(arch)
    ins = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    assert len(program) % 8 == 0 and len(ins) < 4096
    for pc, (code, jt, jf, _) in enumerate(ins):
        if code in (0x15, 0x35, 0x45):
            assert pc + 1 + max(jt, jf) < len(ins), pc
    assert ins[-1] == (0x06, 0, 0, EPERM)  # the default: refused


def test_unknown_machine_is_refused():
    for fn in (_seccomp.program, _seccomp.numbers, _seccomp.allowed):
        with pytest.raises(_seccomp.SeccompUnsupportedError, match="riscv64"):
            fn("riscv64")


def _header_numbers(arch: str) -> dict[str, int]:
    """``__NR_name`` -> number from the installed header (aarch64: the generic table, whose
    64-bit names such as ``fcntl`` are defined through ``__NR3264_fcntl``)."""
    text = open(HEADERS[arch]).read()
    found = {m[0]: int(m[1]) for m in re.findall(r"#define __NR_(\w+)\s+(\d+)\b", text)}
    n3264 = dict(re.findall(r"#define __NR3264_(\w+)\s+(\d+)\b", text))
    for name, alias in re.findall(r"#define __NR_(\w+)\s+__NR3264_(\w+)\b", text):
        if alias in n3264:
            found.setdefault(name, int(n3264[alias]))
    found.pop("syscalls", None)
    return found


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_numbers_match_the_kernel_headers(arch):
    if not os.path.exists(HEADERS[arch]):
        pytest.skip(f"{HEADERS[arch]} is not installed")
    header = _header_numbers(arch)
    newest = max(header.values())
    for name, number in _seccomp.numbers(arch).items():
        if name in header:
            assert header[name] == number, name
        else:  # newer than the installed headers
            assert number > newest or (arch, name) == ("x86_64", "uretprobe"), name
    if arch == "x86_64":  # the header is x86-64's own: every call in it is in the table
        assert set(header) <= set(_seccomp.numbers(arch)), set(header) - set(_seccomp.numbers(arch))
