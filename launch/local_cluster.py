"""Runs one mojax command as N processes on this machine, the way SLURM runs it on N hosts.

    python launch/local_cluster.py --num_processes=2 [--devices_per_process=1] [--port=0] -- \
        python -m mojax.main --config=configs/grpo.py --workdir=/tmp/w --config.mesh.data=2

Each process gets ``--coordinator_address=localhost:PORT --num_processes=N --process_id=i`` appended
(``mojax.main`` hands them to ``jax.distributed.initialize``), ``devices_per_process`` forced CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count``) and gloo CPU collectives, so the
global mesh has ``N * devices_per_process`` devices exactly as on a cluster. Output lines are
prefixed with ``[i]``. When one process fails, the launcher says which and how (``[launcher]
process 0 exited with code 134 (SIGABRT)``), the others are stopped (like ``srun
--kill-on-bad-exit``), and the exit code is the first failure's (0 when all succeed; ``128 + n`` for
a process killed by signal ``n``, as a shell reports it).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def process_env(devices: int, env=None) -> dict:
    """The environment of one process: ``devices`` forced CPU devices (other XLA flags kept)."""
    env = dict(os.environ if env is None else env)
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    env.pop("MOJAX_DISTRIBUTED", None)  # the explicit flags below win over auto-detection
    return env


def commands(command: list[str], num_processes: int, port: int) -> list[list[str]]:
    address = f"localhost:{port}"
    return [
        command
        + [
            f"--coordinator_address={address}",
            f"--num_processes={num_processes}",
            f"--process_id={i}",
        ]
        for i in range(num_processes)
    ]


def _pump(i: int, proc: subprocess.Popen, out) -> None:
    for line in proc.stdout:
        out.write(f"[{i}] {line}")
        out.flush()


def run(command: list[str], num_processes: int, devices: int = 1, port: int = 0, out=None) -> int:
    """Starts the processes, waits for all, stops the rest when one fails; the first failure's
    exit code (0 when all succeed)."""
    out = sys.stdout if out is None else out
    port = port or free_port()
    env = process_env(devices)
    procs = [
        subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for cmd in commands(command, num_processes, port)
    ]
    pumps = [
        threading.Thread(target=_pump, args=(i, p, out), daemon=True) for i, p in enumerate(procs)
    ]
    for t in pumps:
        t.start()
    code = 0
    try:
        while True:  # poll every process, every time
            polled = [p.poll() for p in procs]
            failed = [i for i, r in enumerate(polled) if r not in (None, 0)]
            if failed and not code:
                i = failed[0]
                code = exit_code(polled[i])
                pumps[i].join(timeout=2)  # its last lines come before the launcher's
                out.write(f"[launcher] {describe(i, polled[i])}; stopping the others\n")
                out.flush()
                _stop(procs, signal.SIGTERM)
            if None not in polled:
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        _stop(procs, signal.SIGINT)
        raise
    finally:
        for t in pumps:
            t.join(timeout=5)
    return code


def exit_code(returncode: int) -> int:
    """A process's exit status as a shell reports it: ``128 + n`` when signal ``n`` killed it."""
    return 128 - returncode if returncode < 0 else returncode


def describe(i: int, returncode: int) -> str:
    """``process i exited with code c`` (and the signal's name when a signal killed it)."""
    text = f"process {i} exited with code {exit_code(returncode)}"
    if returncode < 0:
        try:
            text += f" ({signal.Signals(-returncode).name})"
        except ValueError:
            text += f" (signal {-returncode})"
    return text


def _stop(procs, sig) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_processes", type=int, required=True)
    parser.add_argument("--devices_per_process", type=int, default=1)
    parser.add_argument("--port", type=int, default=0, help="coordinator port (0: a free one)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python -m mojax.main ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    if args.num_processes < 1 or args.devices_per_process < 1:
        parser.error("--num_processes and --devices_per_process must be >= 1")
    return run(command, args.num_processes, args.devices_per_process, args.port)


if __name__ == "__main__":
    sys.exit(main())
