"""Preemption: SIGTERM / SIGINT stop a run at the next step boundary, with a checkpoint.

SLURM, Kubernetes and TPU preemption send SIGTERM (then SIGKILL after a grace period); Ctrl-C sends
SIGINT. While a :class:`Preemption` is installed, the first such signal only sets a flag (and writes
one line to stderr); the training loop polls :meth:`Preemption.requested` once per step, and when it
is set the loop finishes the step, saves a checkpoint with its ``HostState`` and raises
:class:`Preempted`. ``mojax.main`` prints one message and exits with the conventional code
``128 + signal number`` (143 for SIGTERM, 130 for SIGINT). Rerunning the same command resumes from
that checkpoint and ends identical to an uninterrupted run (each step's randomness derives from
``(seed, step)``). A second signal while the first is pending stops at once, with the handler that
was installed before (SIGINT: ``KeyboardInterrupt``; SIGTERM: the default, termination).

Multi-host: every process must stop after the same step, or the others hang in the next step's
collectives. The scheduler usually signals every process, but not at the same instant, so
``requested()`` all-reduces the flag (``jax.experimental.multihost_utils.process_allgather``, one
tiny collective per step) when ``jax.process_count() > 1``: if any process got a signal, all stop
after this step. Every process must therefore call ``requested()`` the same number of times (once
per step, as the loop does). Single-process runs make no collective.

Handlers can only be installed from the main thread; elsewhere (e.g. a run started from a worker
thread) installing is a no-op with a warning, and the run is not preemption-safe.
"""

from __future__ import annotations

import os
import signal
import threading

from absl import logging

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """A run stopped on a signal after saving the checkpoint of ``step``."""

    def __init__(self, signum: int, step: int, checkpoint: str):
        self.signum, self.step, self.checkpoint = int(signum), int(step), checkpoint
        super().__init__(
            f"stopped by {signal.Signals(self.signum).name} after RL step {self.step}; "
            f"checkpoint saved in {checkpoint}. Rerun the same command to resume."
        )

    @property
    def exit_code(self) -> int:
        """The shell's convention for death by a signal: 128 + the signal number."""
        return 128 + self.signum


class Preemption:
    """Turns SIGTERM / SIGINT into a flag the loop polls (see the module docstring).

    Use as a context manager around the loop; leaving it restores the previous handlers::

        with Preemption() as stop:
            while step < steps and not stop.requested():
                ...
    """

    def __init__(self, signals: tuple[int, ...] = SIGNALS):
        self.signals = tuple(signals)
        self.signum: int | None = None  # the first signal received on this process
        self._previous: dict[int, object] = {}

    def install(self) -> Preemption:
        if threading.current_thread() is not threading.main_thread():
            logging.warning("not in the main thread: SIGTERM / SIGINT will not checkpoint first")
            return self
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def restore(self) -> None:
        """Puts back the handlers that were installed before :meth:`install`."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def __enter__(self) -> Preemption:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            # os.write: print() is not safe while the interrupted code may be printing
            os.write(
                2,
                f"\nmojax: got {name}; finishing the current step, then saving a checkpoint "
                f"(send {name} again to stop at once)\n".encode(),
            )
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.restore()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
            os.kill(os.getpid(), signum)

    def requested(self) -> int:
        """The signal number to stop on (0 = keep going), agreed by every process."""
        local = int(self.signum or 0)
        import jax

        if jax.process_count() == 1:
            return local
        import numpy as np
        from jax.experimental import multihost_utils

        return int(np.max(multihost_utils.process_allgather(np.int32(local))))
