"""``mojax.infra.preemption``: SIGTERM / SIGINT / SIGHUP become a flag the run polls; the previous
handlers come back on exit; a second signal stops at once; exit codes are 128 + the signal number;
the gaps between polls are measured against the grace period.

The end-to-end behaviour (a rollout abandoned on a signal, the last completed state saved, exit
128 + n, the resumed run equal to an uninterrupted one) is in ``tests/system/rl/test_preemption_e2e.py``
and ``tests/system/rl/test_e2e.py::test_signal_checkpoints_exits_128_plus_n_and_resumes_identical``.
"""

import os
import signal
import threading

import pytest

from mojax.infra.preemption import Interrupted, Preempted, Preemption


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_sets_the_flag_and_handlers_are_restored(sig, capfd):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    with Preemption(grace_s=25) as stop:
        assert stop.requested() == 0
        stop.check()  # no signal: nothing raised
        os.kill(os.getpid(), sig)  # delivered to this (main) thread before the next bytecode
        assert stop.requested() == sig
        assert stop.requested() == sig  # stays set
        with pytest.raises(Interrupted) as e:
            stop.check()
        assert e.value.signum == sig and 0 <= stop.seconds_since_signal() < 60
    assert {s: signal.getsignal(s) for s in before} == before
    err = capfd.readouterr().err
    name = signal.Signals(sig).name
    assert (
        f"mojax: got {name}; abandoning the work under way and saving the last completed state "
        "(grace period 25 s" in err
    )


def test_second_sigint_stops_at_once_with_the_previous_handler():
    # Python's own handler first: a pytest-xdist worker starts with SIGINT ignored
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Preemption() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested() == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # a bytecode boundary for the handler to run at
                    pass
            # the handler put the previous ones back before raising
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_second_sigterm_with_a_custom_previous_handler_calls_it():
    got = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        with Preemption() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.requested() == signal.SIGTERM and got == []
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_install_is_a_noop():
    result = {}

    def body():
        with Preemption() as stop:
            result["installed"] = dict(stop._previous)

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert result["installed"] == {} and signal.getsignal(signal.SIGTERM) is before


def test_preempted_exit_codes_and_message():
    e = Preempted(signal.SIGTERM, 7, "/w/checkpoints/7")
    assert e.exit_code == 143
    assert str(e) == (
        "stopped by SIGTERM after RL step 7; checkpoint saved in /w/checkpoints/7. "
        "Rerun the same command to resume."
    )
    assert Preempted(signal.SIGINT, 0, "/w/checkpoints/0").exit_code == 130
    assert Preempted(signal.SIGHUP, 0, "/w/checkpoints/0").exit_code == 129
    e = Preempted(
        signal.SIGTERM, 3, "/w/c/3", "after RL step 3 (x)", saved_after_s=4.24, grace_s=30
    )
    assert str(e).startswith(
        "stopped by SIGTERM after RL step 3 (x); checkpoint saved in /w/c/3 (4.2 s after the "
        "signal, within the 30 s grace)."
    )
    late = Preempted(signal.SIGTERM, 3, None, "before RL step 1", saved_after_s=41, grace_s=30)
    assert "no new state to save (41.0 s after the signal, PAST the 30 s grace)" in str(late)


def test_gaps_between_polls_are_measured_and_a_long_one_is_warned_about_once(caplog):
    import time

    stop = Preemption(grace_s=0.05)
    stop.requested()
    time.sleep(0.1)
    stop.requested()  # before the first reset (the first step's compilations): no warning
    assert stop.reset_gap() >= 0.1 and stop.max_gap_s == 0.0
    with caplog.at_level("WARNING"):
        for _ in range(2):
            time.sleep(0.1)
            stop.requested()
    assert stop.reset_gap() >= 0.1
    warned = [r for r in caplog.records if "without a point where it can stop" in r.message]
    assert len(warned) == 1 and "rollout.decode_segment" in warned[0].message


_CHILD = """
import os, signal, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"localhost:{sys.argv[2]}", num_processes=2, process_id=int(sys.argv[1]))
from mojax.infra.preemption import Preemption
with Preemption() as stop:
    before = stop.requested()
    if jax.process_index() == 1:  # only process 1 is signalled
        os.kill(os.getpid(), signal.SIGTERM)
    after = stop.requested()
print("RESULT", jax.process_index(), before, after, flush=True)
"""


def test_flag_is_agreed_by_all_processes(tmp_path):
    """Two JAX processes (CPU, gloo collectives): a SIGTERM to process 1 alone stops both."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in (0, 1)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, out[-3000:]
        assert f"RESULT {i} 0 {int(signal.SIGTERM)}" in out, out[-3000:]
