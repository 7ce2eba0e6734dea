"""The seccomp filter that ``PythonSandbox`` loads before any model code runs.

A classic-BPF program, assembled here with ``struct`` (no libseccomp binding), that the sandbox
bootstrap installs with ``prctl(PR_SET_SECCOMP)`` as its last step before running a cell. It is
loaded by the bootstrap and not by bwrap (``--seccomp FD``, which the bundled bwrap accepts) because
the bootstrap itself must still remount its tmpfs and create a user namespace after bwrap has
started it; a filter loaded by bwrap would forbid those steps too.

The filter is an allow-list: ``ALLOWED`` names the system calls that the Python interpreter, its
standard library, numpy / sympy and the shell tools a cell may start need (measured with
``benchmarks/sandbox_syscalls.py`` on the cells of ``tests/sandbox_workload.py``, plus the variants
of each that another C library or program picks, e.g. ``stat`` / ``newfstatat`` / ``statx``).
Every other system call number, including any the kernel adds later, fails with EPERM. What the
filter does, for every process of the call (filters are inherited across fork and exec):

* a system call from another architecture's ABI (i386 ``int 0x80`` on x86-64, 32-bit ARM on
  aarch64) kills the process; x32 system calls fail with EPERM;
* ``socket`` and ``socketpair`` are allowed only for the families in ``SOCKET_FAMILIES`` (their
  first argument): AF_UNIX, AF_INET, AF_INET6. AF_VSOCK (a VM's channel to its hypervisor, which
  no network namespace covers), AF_NETLINK, AF_PACKET and every other family fail with EPERM;
* ``clone`` with any namespace flag fails with EPERM;
* ``clone3`` fails with ENOSYS (its flags sit behind a pointer a filter cannot read), so the C
  library falls back to ``clone``, whose flags the filter checks;
* a call in ``ALLOWED`` is allowed; anything else fails with EPERM. Refused on purpose (not in
  ``ALLOWED``), among others: namespaces and mounts (``unshare``, ``setns``, ``mount``, the new
  mount API, ``open_tree_attr``, ``listmount``, ``statmount``), other processes' memory
  (``ptrace``, ``process_vm_*``, ``pidfd_getfd``), memory that RLIMIT_AS does not count
  (``memfd_create``, ``memfd_secret``, SysV and POSIX IPC: ``shmget``, ``semget``, ``msgget``,
  ``mq_open``; xattr writes, legacy AIO), kernel surfaces (``bpf``, ``perf_event_open``,
  ``io_uring_*``, ``userfaultfd``, ``keyctl``, ``modify_ldt``, ``personality``, module loading,
  ``kexec``, ``inotify``/``fanotify``), ``mlock``, ``sync``, and setting the clock.

Cost: Linux 5.11+ remembers, per system call number, that the filter allows it whatever the
arguments and skips the filter for it from then on; only ``clone``, ``socket``, ``socketpair`` and
refused calls run the program (a linear scan over about 50 runs of allowed numbers).
"""

import os
import struct

# The system calls a sandboxed process may make, whatever their arguments. A name missing from an
# architecture's table (``open`` on aarch64) is simply absent there.
ALLOWED = (
    # reading and writing descriptors
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "flock", "ioctl",
    "fsync", "fdatasync", "sync_file_range", "ftruncate", "fallocate", "fadvise64", "sendfile",
    "copy_file_range", "splice", "tee", "pipe", "pipe2",
    # waiting on descriptors
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4",
    # paths (the sandbox's own read-only view and its private tmpfs)
    "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
    "fstatfs", "access", "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir",
    "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat",
    "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat", "truncate", "chmod",
    "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "umask", "utime",
    "utimes", "futimesat", "utimensat", "mknod", "mknodat", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr",
    # the process's own memory (every mapping counts against RLIMIT_AS) and its NUMA policy
    # (numpy's OpenBLAS asks for one with mbind)
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "mseal",
    "map_shadow_stack", "mbind", "get_mempolicy", "set_mempolicy",
    # processes and threads (clone is allowed below, with its flags checked)
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill",
    "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    "getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid", "getsid", "setsid",
    "set_tid_address", "set_robust_list", "futex", "futex_waitv", "futex_wake", "futex_wait",
    "futex_requeue", "rseq", "arch_prctl", "prctl", "sched_yield", "sched_getaffinity",
    "sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_getattr",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getpriority",
    "setpriority", "getcpu",
    # credentials (no capabilities: the set* calls can only keep the ids the process has)
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "capget",
    # limits and facts about the machine
    "getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "sysinfo", "uname", "getrandom",
    # signals and timers
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
    "rt_sigsuspend", "sigaltstack", "restart_syscall", "pause", "alarm", "getitimer", "setitimer",
    "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    # sockets (socket and socketpair are allowed below, for SOCKET_FAMILIES only)
    "bind", "listen", "accept", "accept4", "connect", "getsockname", "getpeername", "sendto",
    "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "setsockopt", "getsockopt",
    "shutdown",
)  # fmt: skip

# Address families that ``socket`` and ``socketpair`` may create (their first argument).
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
# Calls answered ENOSYS rather than EPERM, so that the C library falls back to an older call.
ENOSYS_CALLS = ("clone3",)

# System call numbers, from the kernel's tables: x86-64 (arch/x86/entry/syscalls/syscall_64.tbl)
# and the generic table that aarch64 uses (include/uapi/asm-generic/unistd.h, 64-bit, with the
# renameat, new-stat, rlimit, clone3 and memfd_secret calls aarch64 wants). A line starting with a
# number N names the calls N, N+1, ...; continuation lines go on counting. Up to Linux 6.17.
# numbers from 424 on are the same on every architecture (the kernel's unified table)
_UNIFIED_TABLE = """
424 pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount fsopen
    fsconfig fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd faccessat2
    process_madvise epoll_pwait2 mount_setattr quotactl_fd landlock_create_ruleset
    landlock_add_rule landlock_restrict_self memfd_secret process_mrelease futex_waitv
    set_mempolicy_home_node cachestat fchmodat2 map_shadow_stack futex_wake futex_wait
    futex_requeue statmount listmount lsm_get_self_attr lsm_set_self_attr lsm_list_modules mseal
    setxattrat getxattrat listxattrat removexattrat open_tree_attr file_getattr file_setattr
"""
_X86_64_TABLE = """
0 read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction
    rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select sched_yield
    mremap msync mincore madvise shmget shmat shmctl dup dup2 pause nanosleep getitimer alarm
    setitimer getpid sendfile socket connect accept sendto recvfrom sendmsg recvmsg shutdown bind
    listen getsockname getpeername socketpair setsockopt getsockopt clone fork vfork execve exit
    wait4 kill uname semget semop semctl shmdt msgget msgsnd msgrcv msgctl fcntl flock fsync
    fdatasync truncate ftruncate getdents getcwd chdir fchdir rename mkdir rmdir creat link unlink
    symlink readlink chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage
    sysinfo times ptrace getuid syslog getgid setuid setgid geteuid getegid setpgid getppid getpgrp
    setsid setreuid setregid getgroups setgroups setresuid getresuid setresgid getresgid getpgid
    setfsuid setfsgid getsid capget capset rt_sigpending rt_sigtimedwait rt_sigqueueinfo
    rt_sigsuspend sigaltstack utime mknod uselib personality ustat statfs fstatfs sysfs getpriority
    setpriority sched_setparam sched_getparam sched_setscheduler sched_getscheduler
    sched_get_priority_max sched_get_priority_min sched_rr_get_interval mlock munlock mlockall
    munlockall vhangup modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot
    sync acct settimeofday mount umount2 swapon swapoff reboot sethostname setdomainname iopl
    ioperm create_module init_module delete_module get_kernel_syms query_module quotactl nfsservctl
    getpmsg putpmsg afs_syscall tuxcall security gettid readahead setxattr lsetxattr fsetxattr
    getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr
    fremovexattr tkill time futex sched_setaffinity sched_getaffinity set_thread_area io_setup
    io_destroy io_getevents io_submit io_cancel get_thread_area lookup_dcookie epoll_create
    epoll_ctl_old epoll_wait_old remap_file_pages getdents64 set_tid_address restart_syscall
    semtimedop fadvise64 timer_create timer_settime timer_gettime timer_getoverrun timer_delete
    clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl tgkill
    utimes vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend mq_timedreceive
    mq_notify mq_getsetattr kexec_load waitid add_key request_key keyctl ioprio_set ioprio_get
    inotify_init inotify_add_watch inotify_rm_watch migrate_pages openat mkdirat mknodat fchownat
    futimesat newfstatat unlinkat renameat linkat symlinkat readlinkat fchmodat faccessat pselect6
    ppoll unshare set_robust_list get_robust_list splice tee sync_file_range vmsplice move_pages
    utimensat epoll_pwait signalfd timerfd_create eventfd fallocate timerfd_settime timerfd_gettime
    accept4 signalfd4 eventfd2 epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev
    rt_tgsigqueueinfo perf_event_open recvmmsg fanotify_init fanotify_mark prlimit64
    name_to_handle_at open_by_handle_at clock_adjtime syncfs sendmmsg setns getcpu process_vm_readv
    process_vm_writev kcmp finit_module sched_setattr sched_getattr renameat2 seccomp getrandom
    memfd_create kexec_file_load bpf execveat userfaultfd membarrier mlock2 copy_file_range preadv2
    pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq uretprobe
"""
_AARCH64_TABLE = """
0 io_setup io_destroy io_submit io_cancel io_getevents setxattr lsetxattr fsetxattr getxattr
    lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr
    getcwd lookup_dcookie eventfd2 epoll_create1 epoll_ctl epoll_pwait dup dup3 fcntl inotify_init1
    inotify_add_watch inotify_rm_watch ioctl ioprio_set ioprio_get flock mknodat mkdirat unlinkat
    symlinkat linkat renameat umount2 mount pivot_root nfsservctl statfs fstatfs truncate ftruncate
    fallocate faccessat chdir fchdir chroot fchmod fchmodat fchownat fchown openat close vhangup
    pipe2 quotactl getdents64 lseek read write readv writev pread64 pwrite64 preadv pwritev
    sendfile pselect6 ppoll signalfd4 vmsplice splice tee readlinkat newfstatat fstat sync fsync
    fdatasync sync_file_range timerfd_create timerfd_settime timerfd_gettime utimensat acct capget
    capset personality exit exit_group waitid set_tid_address unshare futex set_robust_list
    get_robust_list nanosleep getitimer setitimer kexec_load init_module delete_module timer_create
    timer_gettime timer_getoverrun timer_settime timer_delete clock_settime clock_gettime
    clock_getres clock_nanosleep syslog ptrace sched_setparam sched_setscheduler sched_getscheduler
    sched_getparam sched_setaffinity sched_getaffinity sched_yield sched_get_priority_max
    sched_get_priority_min sched_rr_get_interval restart_syscall kill tkill tgkill sigaltstack
    rt_sigsuspend rt_sigaction rt_sigprocmask rt_sigpending rt_sigtimedwait rt_sigqueueinfo
    rt_sigreturn setpriority getpriority reboot setregid setgid setreuid setuid setresuid getresuid
    setresgid getresgid setfsuid setfsgid times setpgid getpgid getsid setsid getgroups setgroups
    uname sethostname setdomainname getrlimit setrlimit getrusage umask prctl getcpu gettimeofday
    settimeofday adjtimex getpid getppid getuid geteuid getgid getegid gettid sysinfo mq_open
    mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr msgget msgctl msgrcv msgsnd
    semget semctl semtimedop semop shmget shmctl shmat shmdt socket socketpair bind listen accept
    connect getsockname getpeername sendto recvfrom setsockopt getsockopt shutdown sendmsg recvmsg
    readahead brk munmap mremap add_key request_key keyctl clone execve mmap fadvise64 swapon
    swapoff mprotect msync mlock munlock mlockall munlockall mincore madvise remap_file_pages mbind
    get_mempolicy set_mempolicy migrate_pages move_pages rt_tgsigqueueinfo perf_event_open accept4
    recvmmsg
260 wait4 prlimit64 fanotify_init fanotify_mark name_to_handle_at open_by_handle_at clock_adjtime
    syncfs setns sendmmsg process_vm_readv process_vm_writev kcmp finit_module sched_setattr
    sched_getattr renameat2 seccomp getrandom memfd_create bpf execveat userfaultfd membarrier
    mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents
    rseq kexec_file_load
"""


def _parse(table: str) -> dict[str, int]:
    numbers, nr = {}, None
    for line in table.strip().splitlines():
        words = line.split()
        if not line.startswith(" "):
            nr, words = int(words[0]), words[1:]
        for name in words:
            numbers[name] = nr
            nr += 1
    return numbers


_NUMBERS = {
    "x86_64": _parse(_X86_64_TABLE.rstrip() + _UNIFIED_TABLE),
    "aarch64": _parse(_AARCH64_TABLE.rstrip() + _UNIFIED_TABLE),
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (CLONE_NEWTIME's bit is part
# of the exit-signal byte in clone(), so it cannot be asked for there).
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NAMESPACE_FLAGS |= 0x20000000 | 0x40000000

_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_KILL_PROCESS, _ALLOW, _ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; args[0]'s low word (little endian)
_EPERM, _ENOSYS = _ERRNO | 1, _ERRNO | 38


class SeccompUnsupportedError(RuntimeError):
    """No system-call table for this machine, so no filter can be built."""


def machine() -> str:
    return os.uname().machine


def _check(arch: str) -> None:
    if arch not in _NUMBERS:
        raise SeccompUnsupportedError(
            f"no seccomp system-call table for machine {arch!r} (known: {sorted(_NUMBERS)})"
        )


def numbers(arch: str | None = None) -> dict[str, int]:
    """Every system call of ``arch`` (default: this machine) by name, with its number."""
    arch = arch or machine()
    _check(arch)
    return dict(_NUMBERS[arch])


def allowed(arch: str | None = None) -> tuple[str, ...]:
    """The names in ``ALLOWED`` that ``arch`` has (the calls allowed whatever their arguments)."""
    arch = arch or machine()
    _check(arch)
    return tuple(name for name in ALLOWED if name in _NUMBERS[arch])


def decision(name: str) -> str:
    """What the filter does with the call ``name``: ``allow``, ``allow if`` (its first argument is
    checked: ``clone``, ``socket``, ``socketpair``), ``ENOSYS`` or ``EPERM``."""
    if name in ("clone", "socket", "socketpair"):
        return "allow if"
    if name in ENOSYS_CALLS:
        return "ENOSYS"
    return "allow" if name in ALLOWED else "EPERM"


def _ranges(values) -> list[tuple[int, int]]:
    """Sorted numbers as inclusive ``(first, last)`` runs."""
    runs: list[tuple[int, int]] = []
    for v in sorted(set(values)):
        if runs and runs[-1][1] == v - 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def program(arch: str | None = None) -> bytes:
    """The filter for ``arch`` (default: this machine) as packed ``struct sock_filter`` records.

    Raises:
      SeccompUnsupportedError: ``arch`` is neither x86_64 nor aarch64.
    """
    arch = arch or machine()
    _check(arch)
    nr = _NUMBERS[arch]
    ins = [
        (_LD_ABS_W, 0, 0, _OFF_ARCH),
        (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
        (_RET, 0, 0, _KILL_PROCESS),
        (_LD_ABS_W, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":
        ins += [(_JGE, 0, 1, _X32_BIT), (_RET, 0, 0, _EPERM)]
    for name in ENOSYS_CALLS:
        ins += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, _ENOSYS)]
    # clone: fail when any namespace flag is set in its first argument, else allow
    ins += [(_JEQ, 0, 4, nr["clone"]), (_LD_ABS_W, 0, 0, _OFF_ARG0)]
    ins += [(_JSET, 0, 1, CLONE_NAMESPACE_FLAGS), (_RET, 0, 0, _EPERM), (_RET, 0, 0, _ALLOW)]
    # socket, socketpair: allow only the families in SOCKET_FAMILIES (the first argument)
    families = sorted(SOCKET_FAMILIES.values())
    block = len(families) + 3  # the load, one test per family, and the two returns
    ins += [(_JEQ, 1, 0, nr["socket"]), (_JEQ, 0, block, nr["socketpair"])]
    ins.append((_LD_ABS_W, 0, 0, _OFF_ARG0))
    for i, family in enumerate(families):
        ins.append((_JEQ, len(families) - i, 0, family))  # to the ALLOW below
    ins += [(_RET, 0, 0, _EPERM), (_RET, 0, 0, _ALLOW)]
    # the rest: one run of consecutive allowed numbers after another (sorted); a number below the
    # next run's first is refused, one up to its last is allowed
    for first, last in _ranges(nr[name] for name in allowed(arch)):
        ins += [(_JGE, 1, 0, first), (_RET, 0, 0, _EPERM)]
        ins += [(_JGE, 1, 0, last + 1), (_RET, 0, 0, _ALLOW)]
    ins.append((_RET, 0, 0, _EPERM))
    return b"".join(struct.pack("=HBBI", *i) for i in ins)
