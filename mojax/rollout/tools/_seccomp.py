"""The seccomp filter that ``PythonSandbox`` loads before any model code runs.

A classic-BPF program, assembled here with ``struct`` (no libseccomp binding), that the sandbox
bootstrap installs with ``prctl(PR_SET_SECCOMP)`` as its last step before running a cell. It is
loaded by the bootstrap and not by bwrap (``--seccomp FD``, which the bundled bwrap accepts) because
the bootstrap itself must still remount its tmpfs and create a user namespace after bwrap has
started it; a filter loaded by bwrap would forbid those steps too.

What the filter does, for every process of the call (filters are inherited across fork and exec):

* a system call from another architecture's ABI (i386 ``int 0x80`` on x86-64) kills the process;
  x32 system calls fail with EPERM;
* ``clone`` with any namespace flag, and every call in ``BLOCKED``, fail with EPERM;
* ``clone3`` fails with ENOSYS (its flags sit behind a pointer a filter cannot read), so the C
  library falls back to ``clone``, whose flags the filter checks;
* everything else is allowed.
"""

import os
import struct

# System calls that fail with EPERM, grouped by what they would give model code.
BLOCKED = (
    # namespaces: new user namespaces (and with them capabilities), joining others
    "unshare",
    "setns",
    # the mount table
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # other processes' memory
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    # kernel attack surface that model code has no use for
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "syslog",
    "open_by_handle_at",
    "name_to_handle_at",
    # memory that no per-process limit (RLIMIT_AS) counts: memfd, SysV and POSIX IPC objects
    "memfd_create",
    "shmget",
    "msgget",
    "mq_open",
)

# System call numbers: x86-64 (arch/x86/entry/syscalls/syscall_64.tbl) and the generic table that
# aarch64 uses (include/uapi/asm-generic/unistd.h).
# fmt: off
_NUMBERS = {
    "x86_64": {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "keyctl": 250,
        "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "swapon": 167, "swapoff": 168, "reboot": 169,
        "acct": 163, "quotactl": 179, "syslog": 103, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "memfd_create": 319, "shmget": 29, "msgget": 68,
        "mq_open": 240, "clone": 56, "clone3": 435,
    },
    "aarch64": {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "pidfd_getfd": 438, "keyctl": 219, "add_key": 217,
        "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89,
        "quotactl": 60, "syslog": 116, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "memfd_create": 279, "shmget": 194, "msgget": 186, "mq_open": 180, "clone": 220,
        "clone3": 435,
    },
}
# fmt: on
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (CLONE_NEWTIME's bit is part
# of the exit-signal byte in clone(), so it cannot be asked for there).
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NAMESPACE_FLAGS |= 0x20000000 | 0x40000000

_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_KILL_PROCESS, _ALLOW, _ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; args[0]'s low word (little endian)


class SeccompUnsupportedError(RuntimeError):
    """No system-call table for this machine, so no filter can be built."""


def machine() -> str:
    return os.uname().machine


def program(arch: str | None = None) -> bytes:
    """The filter for ``arch`` (default: this machine) as packed ``struct sock_filter`` records.

    Raises:
      SeccompUnsupportedError: ``arch`` is neither x86_64 nor aarch64.
    """
    arch = arch or machine()
    if arch not in _NUMBERS:
        raise SeccompUnsupportedError(
            f"no seccomp system-call table for machine {arch!r} (known: {sorted(_NUMBERS)})"
        )
    nr = _NUMBERS[arch]
    eperm, enosys = _ERRNO | 1, _ERRNO | 38
    ins = [
        (_LD_ABS_W, 0, 0, _OFF_ARCH),
        (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
        (_RET, 0, 0, _KILL_PROCESS),
    ]
    ins.append((_LD_ABS_W, 0, 0, _OFF_NR))
    if arch == "x86_64":
        ins += [(_JGE, 0, 1, _X32_BIT), (_RET, 0, 0, eperm)]
    for name in BLOCKED:
        ins += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eperm)]
    ins += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, enosys)]
    # clone: fail when any namespace flag is set in its first argument, else allow
    ins += [(_JEQ, 0, 3, nr["clone"]), (_LD_ABS_W, 0, 0, _OFF_ARG0)]
    ins += [(_JSET, 0, 1, CLONE_NAMESPACE_FLAGS), (_RET, 0, 0, eperm), (_RET, 0, 0, _ALLOW)]
    return b"".join(struct.pack("=HBBI", *i) for i in ins)
