"""What the RL loop saves when a signal stops it (``mojax.preemption``), and how it resumes.

A signal is acted on at the next poll (``Preemption.check``: between two decode calls of a rollout,
after an SFT step, at a step boundary). Where the loop is then decides what "the last completed
state" is:

* **a step's rollouts** (collect, with DAPO refills): the rollout is abandoned; the state and host
  state of the previous step are saved (unless a checkpoint of that step exists). The resumed run
  redoes the step from its ``(seed, step)`` key, so it collects the same rollouts.
* **after a step's update** (the method's after-step hook, the evaluation): the update is kept; the
  step is saved with ``HostState.pending`` = its metrics and transcript rows so far. The resumed
  run first redoes the after-step phases of that step from the same params and host state, logs
  it, then goes on. ``metrics.jsonl`` is truncated before that step (:func:`resume_step`).
* **the initial evaluation** (step 0): nothing new to save; the resumed run starts it again.
* **a step boundary** (a signal during an update with no rollout after it): the finished step is
  saved, as when the loop polls at its top.

Multi-host: the poll is agreed by every process, so all stop at the same point and save the
same step together; they leave :func:`stop` together, after the save is committed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mojax import distributed
from mojax.preemption import Preempted
from mojax.rl.host_state import HostState


def resume_step(host: HostState, resumed: bool) -> int | None:
    """The last step whose ``metrics.jsonl`` line a resumed run keeps (None: a fresh start). A
    pending step's line is written again when its after-step phases are redone."""
    if not resumed:
        return None
    return host.step - 1 if host.pending else host.step


def with_pending(host: HostState, metrics: dict[str, Any], rows: list | None) -> HostState:
    """``host`` (after a step's update) marked as waiting for that step's after-step phases."""
    return dataclasses.replace(host, pending={"metrics": dict(metrics), "transcripts": rows})


def stop(
    preemption,
    ckpt,
    signum: int,
    state,
    host: HostState,
    *,
    saved: int | None,
    what: str,
    record=HostState.to_dict,
) -> Preempted:
    """Saves ``(state, record(host))`` as step ``host.step`` unless that step is saved already
    (``saved``), waits for the save, and returns the :class:`Preempted` to raise. ``record``
    makes the saved host dict (a LoRA run's names its frozen base: ``mojax.rl.adapters``)."""
    if saved != host.step:
        ckpt.save(host.step, state, record(host), force=True)
    ckpt.wait()
    # every process past the commit before any exits: a launcher that stops the others when one
    # exits (srun --kill-on-bad-exit) must not cut a slower process's part of the save short
    distributed.barrier("mojax_preempted_saved")
    return Preempted(
        signum,
        host.step,
        ckpt.step_path(host.step),
        what,
        saved_after_s=preemption.seconds_since_signal(),
        grace_s=preemption.grace_s,
    )
