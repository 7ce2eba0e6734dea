"""Preemption: SIGTERM / SIGINT / SIGHUP stop a run within its grace period, with a checkpoint.

SLURM, Kubernetes and spot TPUs send SIGTERM and, a grace period later (often ~30 s), SIGKILL;
Ctrl-C sends SIGINT; a closed terminal or ssh session sends SIGHUP. While a :class:`Preemption` is
installed, the first such signal only sets a flag (and writes one line to stderr). The run polls
the flag wherever it can stop without losing work (:meth:`Preemption.requested`): between the
decode calls of every rollout, after every SFT step and at every step boundary. A rollout under way
is abandoned, not finished (:class:`Interrupted`); the run saves its last completed state (the
last RL step; after an update, the updated step with its evaluation still to do; the SFT step
reached) and raises :class:`Preempted`. ``mojax.main`` prints one message and exits with
``128 + signal number`` (143 SIGTERM, 130 SIGINT, 129 SIGHUP). Rerunning the same command resumes
and ends identical to an uninterrupted run (each step's randomness derives from ``(seed, step)``).
A second signal while the first is pending stops at once, with the handler that was installed
before (SIGINT: ``KeyboardInterrupt``; SIGTERM / SIGHUP: the default, termination).

**Grace period** (``preemption_grace_s``): the time the scheduler leaves between its signal and
SIGKILL. The longest stretch the run cannot act on a signal is one decode call plus one round of
tool calls, one SFT step, or one PPO update (plus its compilation the first time).
:meth:`Preemption.requested` measures the gaps between its calls (``max_gap_s``, logged per step
as ``time/signal_gap_s``); a gap longer than the grace period is warned about once, naming what to
shorten (``rollout.decode_segment`` bounds a decode call). :class:`Preempted` says how long after
the signal the checkpoint was saved.

Multi-host: every process must stop at the same point, or the others hang in the next collective.
The scheduler usually signals every process, but not at the same instant, so ``requested()``
all-reduces the flag (``jax.experimental.multihost_utils.process_allgather``, one tiny collective
per call) when ``jax.process_count() > 1``: if any process got a signal, all stop there. Every
process calls ``requested()`` at the same points (the rollout's rounds are agreed by all processes;
SFT and RL steps are the same everywhere). Single-process runs make no collective.

Handlers can only be installed from the main thread; elsewhere (e.g. a run started from a worker
thread) installing is a no-op with a warning, and the run is not preemption-safe.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from absl import logging

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DEFAULT_GRACE_S = 30.0


class Interrupted(Exception):
    """A signal stopped a rollout (or an SFT warm start) between two of its steps.

    Attributes: signum; signal_time: ``time.monotonic()`` of the signal on this process (None when
    only another process got it); grace_s: the grace period.
    """

    def __init__(self, signum: int, signal_time: float | None = None, grace_s: float | None = None):
        self.signum, self.signal_time, self.grace_s = int(signum), signal_time, grace_s
        super().__init__(f"abandoned on {signal.Signals(self.signum).name}")

    def seconds_since_signal(self) -> float | None:
        return None if self.signal_time is None else time.monotonic() - self.signal_time


class Preempted(Exception):
    """A run stopped on a signal after saving its last completed state.

    Attributes:
      signum: the signal; step: the last completed RL (or SFT) step; checkpoint: where it was
      saved (None: nothing new to save); what: how the run stopped, e.g. ``"after RL step 3"``.
    """

    def __init__(
        self,
        signum: int,
        step: int,
        checkpoint: str | None,
        what: str = "",
        *,
        saved_after_s: float | None = None,
        grace_s: float | None = None,
    ):
        self.signum, self.step, self.checkpoint = int(signum), int(step), checkpoint
        what = what or f"after RL step {self.step}"
        name = signal.Signals(self.signum).name
        where = (
            f"checkpoint saved in {checkpoint}"
            if checkpoint is not None
            else "no new state to save"
        )
        timing = ""
        if saved_after_s is not None and grace_s is not None:
            within = "within" if saved_after_s <= grace_s else "PAST"
            timing = f" ({saved_after_s:.1f} s after the signal, {within} the {grace_s:g} s grace)"
        super().__init__(
            f"stopped by {name} {what}; {where}{timing}. Rerun the same command to resume."
        )

    @property
    def exit_code(self) -> int:
        """The shell's convention for death by a signal: 128 + the signal number."""
        return 128 + self.signum


class Preemption:
    """Turns SIGTERM / SIGINT / SIGHUP into a flag the run polls (see the module docstring).

    Use as a context manager around the run; leaving it restores the previous handlers::

        with Preemption(grace_s=30) as stop:
            while step < steps and not stop.requested():
                ...
    """

    def __init__(self, signals: tuple[int, ...] = SIGNALS, grace_s: float = DEFAULT_GRACE_S):
        self.signals = tuple(signals)
        self.grace_s = float(grace_s)
        self.signum: int | None = None  # the first signal received on this process
        self.signal_time: float | None = None  # time.monotonic() of that signal
        self.max_gap_s = 0.0  # the longest gap between two calls of requested() since reset_gap
        self._last_poll: float | None = None
        self._armed = False  # warn about long gaps only once the first step (compiling) is done
        self._warned = False
        self._previous: dict[int, object] = {}

    def install(self) -> Preemption:
        if threading.current_thread() is not threading.main_thread():
            logging.warning("not in the main thread: a signal will not checkpoint first")
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
            self.signum, self.signal_time = signum, time.monotonic()
            # os.write: print() is not safe while the interrupted code may be printing
            os.write(
                2,
                f"\nmojax: got {name}; abandoning the work under way and saving the last "
                f"completed state (grace period {self.grace_s:g} s; send {name} again to stop at "
                "once)\n".encode(),
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
        self._note_gap()
        local = int(self.signum or 0)
        import jax

        if jax.process_count() == 1:
            return local
        import numpy as np
        from jax.experimental import multihost_utils

        return int(np.max(multihost_utils.process_allgather(np.int32(local))))

    def check(self) -> None:
        """Raises :class:`Interrupted` when :meth:`requested` is set (the rollout's and SFT's
        poll)."""
        signum = self.requested()
        if signum:
            raise Interrupted(signum, self.signal_time, self.grace_s)

    def seconds_since_signal(self) -> float | None:
        return None if self.signal_time is None else time.monotonic() - self.signal_time

    def reset_gap(self, *, arm: bool = True) -> float:
        """The longest gap between polls since the last reset (then starts a new window). From the
        first reset with ``arm`` on, a gap longer than the grace period is warned about (once);
        before it, the first step's compilations would be."""
        gap, self.max_gap_s = self.max_gap_s, 0.0
        self._armed = self._armed or arm
        return gap

    def _note_gap(self) -> None:
        now = time.monotonic()
        if self._last_poll is not None:
            gap = now - self._last_poll
            self.max_gap_s = max(self.max_gap_s, gap)
            if gap > self.grace_s and self._armed and not self._warned and self.signum is None:
                self._warned = True
                logging.warning(
                    "mojax went %.0f s without a point where it can stop on a signal, longer "
                    "than the %g s preemption grace period (preemption_grace_s): a preempted "
                    "run may be killed before it saves. The longest stretches are one decode "
                    "call plus its tool round (set rollout.decode_segment), one PPO update, "
                    "and compilations.",
                    gap,
                    self.grace_s,
                )
        self._last_poll = now
