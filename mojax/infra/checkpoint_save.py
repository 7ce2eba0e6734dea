"""A checkpoint save that fails: one message, the previous steps intact.

``mojax.infra.checkpoint.Checkpointer`` turns a failed write (a full disk: Python's ``OSError``
ENOSPC / EDQUOT, or TensorStore's ``ValueError: RESOURCE_EXHAUSTED ... No space left on device
[os_error_code='28']``; any other ``OSError``) into one ``CheckpointSaveError`` whose message
(:func:`save_failed_message`) names the workdir, the free space and the last committed step, which
is intact: orbax writes a step into ``<step>.orbax-checkpoint-tmp`` and commits it by a rename,
and deletes old steps only after a commit.

Orbax's background threads log each failure with a traceback (``_SignalingThread.run() raised
an exception``, ``Failed to run ... Handler Commit operations``) and keep running after the first
error surfaced. :class:`QuietSaveFailures` drops those records of a full disk from the ``absl``
logger while a writing ``Checkpointer`` is open (the message says it all), and
:func:`join_save_threads` waits for orbax's remaining save threads, so none is still writing into
the unfinished step (or cut short at interpreter exit, with another traceback) once the error is
raised. Every process raises for its own write; the message is its own.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading

from mojax.infra.checkpoint_damage import _chain, describe

#: What the OS / TensorStore say when a write finds no room (ENOSPC, EDQUOT).
_NO_SPACE = ("No space left on device", "Disk quota exceeded", "os_error_code='28'")


def no_space(err: BaseException) -> bool:
    """Whether a failed save ran out of disk space: an ``OSError`` ENOSPC / EDQUOT in the chain,
    or TensorStore's ``RESOURCE_EXHAUSTED`` naming one (``ValueError: RESOURCE_EXHAUSTED: Error
    writing local file ...: No space left on device [os_error_code='28']``)."""
    for e in _chain(err):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(s in str(e) for s in _NO_SPACE):
            return True
    return False


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def save_failed_message(directory: str, step: int | None, err: BaseException) -> str:
    """The one message of a save that failed: the workdir, the free space (disk full) or the
    error, and the steps that are intact."""
    steps = sorted(int(n) for n in os.listdir(directory) if n.isdigit())
    try:
        usage = shutil.disk_usage(directory)
        space = f"{_gib(usage.free)} free of {_gib(usage.total)}"
    except OSError as e:
        space = f"free space unknown ({e})"
    what = f"checkpoint step {step}" if step is not None else "a checkpoint step"
    workdir = os.path.dirname(os.path.abspath(directory))
    why = (
        f"the disk is full ({space} on the file system of {directory})"
        if no_space(err)
        else f"{describe(err)} ({space})"
    )
    kept = (
        f"the previous checkpoint step {steps[-1]} is intact ({os.path.join(directory, str(steps[-1]))})"
        if steps
        else "no earlier checkpoint step exists"
    )
    return (
        f"workdir {workdir}: {what} could not be saved: {why}.\n"
        f"  Nothing committed was lost: {kept}; the unfinished step is never committed, and the "
        "next run deletes its temporary directory.\n"
        "  Free some space (or lower --config.keep_checkpoints) and rerun the same command: it "
        "resumes from the last committed step."
    )


class QuietSaveFailures(logging.Filter):
    """Drops orbax's ERROR records of a full disk (and the ones that follow it) from the logger
    it is added to; the ``CheckpointSaveError`` message reports it once."""

    def __init__(self):
        super().__init__()
        self.no_space_seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or "orbax" not in record.pathname:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if (exc is not None and no_space(exc)) or any(s in record.getMessage() for s in _NO_SPACE):
            self.no_space_seen = True
        return not self.no_space_seen


def join_save_threads(timeout_s: float = 120.0) -> None:
    """Waits (up to ``timeout_s`` in all) for orbax's background save threads to end."""
    try:
        from orbax.checkpoint._src.futures import future as future_lib
    except ImportError:  # another orbax layout: nothing to wait for by name
        return
    kind = getattr(future_lib, "_SignalingThread", None)
    if kind is None:
        return
    for t in threading.enumerate():
        if isinstance(t, kind) and t is not threading.current_thread():
            threading.Thread.join(t, timeout_s)  # orbax's own join re-raises the thread's error
