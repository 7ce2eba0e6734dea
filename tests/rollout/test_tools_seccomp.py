"""The seccomp program, run through a small classic-BPF interpreter, for every architecture it
supports; its system-call numbers checked against the kernel headers where they are installed."""

import os
import re
import struct

import pytest

from mojax.rollout.tools import _seccomp

EPERM, ENOSYS = 1, 38
ALLOW, KILL = 0x7FFF0000, 0x80000000
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
HEADERS = {
    "x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
    "aarch64": "/usr/include/asm-generic/unistd.h",
}


def run_bpf(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What the filter returns for one system call (the subset of classic BPF it uses)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
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


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_filter_decisions(arch):
    program = _seccomp.program(arch)
    nr = _seccomp._NUMBERS[arch]
    for name in _seccomp.BLOCKED:
        assert run_bpf(program, nr[name], ARCH[arch]) == 0x00050000 | EPERM, name
    assert run_bpf(program, nr["clone3"], ARCH[arch]) == 0x00050000 | ENOSYS
    assert run_bpf(program, nr["clone"], ARCH[arch], arg0=17) == ALLOW  # fork: SIGCHLD only
    assert run_bpf(program, nr["clone"], ARCH[arch], arg0=0x3D0F00) == ALLOW  # a thread
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000):
        assert run_bpf(program, nr["clone"], ARCH[arch], arg0=flag | 17) == 0x00050000 | EPERM
    assert run_bpf(program, nr["clone"], ARCH[arch], arg0=0x40000000 | 17) == 0x00050000 | EPERM
    for allowed in (0, 1, 3, 57 if arch == "x86_64" else 63):  # read, write, close, fork/read
        assert run_bpf(program, allowed, ARCH[arch]) == ALLOW
    other = ARCH["aarch64" if arch == "x86_64" else "x86_64"]
    assert run_bpf(program, 0, other) == KILL
    assert run_bpf(program, 0, 0x40000003) == KILL  # i386
    if arch == "x86_64":  # x32 system calls carry bit 30
        assert run_bpf(program, 0x40000000 | nr["unshare"], ARCH[arch]) == 0x00050000 | EPERM


def test_unknown_machine_is_refused():
    with pytest.raises(_seccomp.SeccompUnsupportedError, match="riscv64"):
        _seccomp.program("riscv64")


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_numbers_match_the_kernel_headers(arch):
    if not os.path.exists(HEADERS[arch]):
        pytest.skip(f"{HEADERS[arch]} is not installed")
    text = open(HEADERS[arch]).read()
    for name, number in _seccomp._NUMBERS[arch].items():
        found = re.search(rf"#define __NR_{name}\s+(\d+)\b", text)
        assert found, f"{name} not in {HEADERS[arch]}"
        assert int(found.group(1)) == number, name
