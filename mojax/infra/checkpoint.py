"""Orbax checkpoints of the train state plus the host-side state of a multi-objective run.

A run is resumable exactly only if everything that shapes the next step is saved: the device
``TrainState`` (params, optimizer state, step, RNG) *and* the plain-Python host state — ParetoPO's
hypervolume archive and smoothed ΔHV, the N_optimal table, AWPO's running values, the data iterator
position. ``Checkpointer`` saves both under one step with orbax's ``CheckpointManager``::

    ckpt = Checkpointer(workdir / "checkpoints", max_to_keep=3)      # async by default
    ckpt.save(step, state, host_state={"data": {"position": 123}, "pareto": {...}})
    ...
    target = mojax.learner.abstract_train_state(model_config, tx, mesh, rules)   # any mesh shape
    state, host_state, step = ckpt.restore(target, fallback=True)        # latest good step
    ckpt.close()                                                           # waits for saves

Guarantees:

* atomic: orbax writes a step into ``<step>.orbax-checkpoint-tmp-*`` and renames it when complete,
  so a process killed mid-save leaves the previous steps usable (unfinished tmp dirs are ignored);
* a writing ``Checkpointer`` deletes unfinished tmp dirs when it opens the directory (in the
  background, finished before its first save), so only the job that holds the workdir lock
  (``mojax.infra.workdir_lock``) opens one; readers (``mode=eval``,
  ``python -m mojax.export``) open it with ``read_only=True``, which creates, deletes, renames and
  writes nothing;
* restore onto a different mesh: arrays are read slice-wise into the shardings of ``target``;
* a step is called corrupt only on positive evidence that its files are damaged (a missing, short,
  empty or unparsable file; ``mojax.infra.checkpoint_damage``): ``CorruptCheckpointError`` names its
  path and the evidence. With ``fallback=True`` it is moved aside to ``<step>.corrupt`` (renamed,
  never deleted; logged) and the next older step is tried, so the run can later save that step
  number again instead of crash-looping on ``StepAlreadyExistsError``;
* any other read failure -- an I/O error, a stale file handle, too many open files, out of memory,
  a saved tree that does not fit the target (a renamed parameter, a changed optimizer) -- raises a
  plain ``CheckpointError`` that says so: nothing is moved and no older step is tried;
* multi-host: every process reads its own shards and forms a verdict (read, damaged, failed);
  the verdicts are all-gathered and every process acts on the same decision: any failure stops
  all of them, else any damage moves the step aside on all of them (process 0 renames, then a
  barrier), else all return the step.

Host state is any JSON-like tree of dicts, lists, tuples, str, int, float (NaN / inf kept), bool,
None, numpy scalars and arrays (dtype and shape kept, values exact) and dicts with int / float /
tuple keys (e.g. N_optimal keyed by prompt id); anything else raises naming its path.
"""

from __future__ import annotations

import collections
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from mojax import distributed
from mojax.infra import checkpoint_damage as damage_lib
from mojax.infra import checkpoint_save as save_lib
from mojax.infra.paths import local_path

_log = logging.getLogger(__name__)

_STATE, _HOST = damage_lib.STATE, damage_lib.HOST
_OK, _CORRUPT, _FAILED = "ok", "corrupt", "failed"


class CheckpointError(RuntimeError):
    """A checkpoint step cannot be restored (corrupt, unreadable for now, or it does not fit the
    restore target)."""


class CheckpointSaveError(CheckpointError):
    """A checkpoint step could not be written (a full disk, an I/O error); the message names the
    workdir, the free space and the last committed step, which is intact."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint step's files are damaged: missing, short, empty or unparsable."""


# --------------------------------------------------------------------------------------------------
# host state <-> strict JSON


def encode_host_state(obj: Any, path: str = "host_state") -> Any:
    """A strict-JSON tree (no NaN literals) that ``decode_host_state`` maps back exactly."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, np.bool_):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        if isinstance(obj, np.floating) and obj.dtype != np.float64:
            return {"__scalar__": encode_host_state(np.asarray(obj), path)}
        x = float(obj)
        return x if math.isfinite(x) else {"__float__": repr(x)}
    if isinstance(obj, (np.ndarray, jax.Array)):
        arr = np.asarray(obj)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{path}: numpy dtype {arr.dtype} is not supported in host state")
        flat = [encode_host_state(v, path) for v in arr.reshape(-1).tolist()]
        return {"__ndarray__": flat, "dtype": arr.dtype.str, "shape": list(arr.shape)}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode_host_state(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode_host_state(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj) and not any(k.startswith("__") for k in obj):
            return {k: encode_host_state(v, f"{path}.{k}") for k, v in obj.items()}
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, tuple, np.integer)):
                raise TypeError(f"{path}: dict key {k!r} of type {type(k).__name__} not supported")
            items.append([encode_host_state(k, path), encode_host_state(v, f"{path}[{k!r}]")])
        return {"__items__": items}
    raise TypeError(
        f"{path}: {type(obj).__name__} is not JSON-serialisable host state (use dict / list / "
        "tuple / str / int / float / bool / None / numpy arrays)"
    )


def decode_host_state(obj: Any) -> Any:
    """Inverse of ``encode_host_state``."""
    if isinstance(obj, list):
        return [decode_host_state(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__scalar__" in obj:
        return decode_host_state(obj["__scalar__"])[()]
    if "__ndarray__" in obj:
        dtype = np.dtype(obj["dtype"])
        vals = [decode_host_state(v) for v in obj["__ndarray__"]]
        return np.asarray(vals, dtype=dtype).reshape(obj["shape"])
    if "__tuple__" in obj:
        return tuple(decode_host_state(v) for v in obj["__tuple__"])
    if "__items__" in obj:
        return {_hashable(decode_host_state(k)): decode_host_state(v) for k, v in obj["__items__"]}
    return {k: decode_host_state(v) for k, v in obj.items()}


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, (tuple, list)) else k


# --------------------------------------------------------------------------------------------------
# the manager


def _as_abstract(target: Any) -> Any:
    """ShapeDtypeStructs (with the target's shardings) from concrete arrays or abstract leaves."""

    def leaf(x):
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree.map(leaf, target)


class Checkpointer:
    """Orbax ``CheckpointManager`` for (``TrainState``, host state) pairs; see the module docstring.

    Args:
      directory: where the step directories live (created if missing, unless ``read_only``); a
        URL (``gs://...``) raises ``mojax.infra.paths.RemotePathError``.
      max_to_keep: keep the newest N steps (None = all).
      async_save: write in a background thread (``save`` returns once the arrays are copied to
        host memory); ``wait()`` / ``close()`` block until written.
      save_interval_steps: ``save`` is a no-op unless ``step`` is a multiple (or ``force=True``).
      read_only: only read: nothing in the directory is created, deleted or renamed (unfinished
        saves of a running job stay); ``save`` and ``move_aside`` raise, and ``restore(...,
        fallback=True)`` skips a damaged step without moving it.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_to_keep: int | None = 3,
        async_save: bool = True,
        save_interval_steps: int = 1,
        read_only: bool = False,
    ):
        self.directory = local_path(directory, "checkpoint directory")
        self.read_only = read_only
        if read_only and not os.path.isdir(self.directory):
            raise CheckpointError(f"no checkpoint directory {self.directory}")
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None if read_only else max_to_keep,
            save_interval_steps=0 if read_only else save_interval_steps,
            enable_async_checkpointing=async_save and not read_only,
            cleanup_tmp_directories=not read_only,
            create=not read_only,
            read_only=read_only,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=(_STATE, _HOST)
        )
        self._state_reader = ocp.StandardCheckpointHandler()
        self._host_reader = ocp.JsonCheckpointHandler()
        self._pending: int | None = None  # an async save started and not yet waited for
        self._save_failed = False
        self._quiet = None if read_only else save_lib.QuietSaveFailures()
        if self._quiet is not None:
            logging.getLogger("absl").addFilter(self._quiet)

    # --- saving
    def save(self, step: int, state: Any, host_state: Any = None, *, force: bool = False) -> bool:
        """Start saving ``state`` (a pytree of arrays) and ``host_state`` as ``step``.

        Returns False when skipped by ``save_interval_steps``. Raises ``TypeError`` naming the path
        of a host-state value that JSON cannot hold (before anything is written), and
        ``CheckpointError`` when opened ``read_only``. A ``TrainState``'s ``frozen`` LoRA base is
        not saved (the host state names it; ``mojax.rl.warm_start``).
        """
        self._check_writable("save")
        if getattr(state, "frozen", None) is not None:
            state = state.replace(frozen=None)
        host = {"host_state": encode_host_state({} if host_state is None else host_state)}
        args = ocp.args.Composite(
            **{_STATE: ocp.args.StandardSave(state), _HOST: ocp.args.JsonSave(host)}
        )
        failing = int(step) if self._pending is None else self._pending  # orbax waits first
        started = self._saving(
            failing, lambda: self._manager.save(int(step), args=args, force=force)
        )
        self._pending = int(step) if started else None
        return started

    def wait(self) -> None:
        """Block until pending async saves are written and committed.

        Raises:
          CheckpointSaveError: the save could not be written (e.g. the disk is full); the
            message names the workdir, the free space and the intact previous step.
        """
        self._saving(self._pending, self._manager.wait_until_finished)
        self._pending = None

    def _saving(self, step: int | None, fn) -> Any:
        """``fn()``, an ``OSError`` (or TensorStore's ``RESOURCE_EXHAUSTED``) of a write turned
        into one :class:`CheckpointSaveError` (``mojax.infra.checkpoint_save``), once orbax's other
        save threads ended."""
        try:
            return fn()
        except (OSError, ValueError) as e:
            if not isinstance(e, OSError) and not save_lib.no_space(e):
                raise
            self._save_failed, self._pending = True, None
            save_lib.join_save_threads()
            raise CheckpointSaveError(save_lib.save_failed_message(self.directory, step, e)) from e

    def _check_writable(self, what: str) -> None:
        if self.read_only:
            raise CheckpointError(f"cannot {what} in {self.directory}: opened read_only")

    # --- reading
    def all_steps(self) -> list[int]:
        """Committed steps, ascending (unfinished tmp directories excluded)."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def step_path(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def _read(self, target: Any, step: int) -> tuple[Any, Any]:
        """(state, host_state) of ``step`` on this process; raises whatever the reader raises."""
        path = epath.Path(self.step_path(step))
        args = ocp.args.StandardRestore(_as_abstract(target))
        state = self._state_reader.restore(path / _STATE, args=args)
        host = self._host_reader.restore(path / _HOST, args=ocp.args.JsonRestore())
        host = decode_host_state(host["host_state"])
        got, want = jax.tree.structure(state), jax.tree.structure(target)
        if got != want:
            raise CheckpointError(
                f"checkpoint step {step} at {self.step_path(step)}: saved state structure differs "
                f"from the restore target:\n  saved:  {got}\n  target: {want}"
            )
        return state, host

    def _verdict(self, target: Any, step: int, err: Exception) -> tuple[str, str]:
        """(``_CORRUPT`` or ``_FAILED``, message) for a read of ``step`` that raised ``err``:
        corrupt only on positive evidence (``mojax.infra.checkpoint_damage``)."""
        where = f"checkpoint step {step} at {self.step_path(step)}"
        if isinstance(err, CheckpointError):
            return _FAILED, str(err)
        try:
            found = damage_lib.damage(self.step_path(step))
        except OSError as e:
            msg = damage_lib.not_damaged_message(where, err)
            return _FAILED, f"{msg}\n  (its files could not be inspected either: {e})"
        if found:
            return _CORRUPT, f"{where} is damaged: {found}; reading it raised {type(err).__name__}"
        mismatch = self._shape_mismatch(target, step)
        if mismatch:
            return _FAILED, (
                f"{where} does not fit the restore target (model or optimizer changed?): {mismatch}"
                f"; nothing was moved aside. Error: {damage_lib.describe(err)}"
            )
        found = damage_lib.reader_evidence(err)
        if found:
            return _CORRUPT, f"{where} is damaged: {found}"
        return _FAILED, damage_lib.not_damaged_message(where, err)

    def _shape_mismatch(self, target: Any, step: int) -> str | None:
        """The array shapes only in the saved step and only in ``target``, or None when they
        agree (or the saved metadata cannot be read)."""
        try:
            saved = self._state_reader.metadata(epath.Path(self.step_path(step)) / _STATE)
            saved = getattr(saved, "tree", saved)
            saved = collections.Counter(
                tuple(getattr(x, "shape", ())) for x in jax.tree.leaves(saved)
            )
        except Exception:  # noqa: BLE001 - no metadata, no shape verdict
            return None
        want = collections.Counter(tuple(np.shape(x)) for x in jax.tree.leaves(target))
        if saved == want:
            return None
        only_saved = sorted((saved - want).elements())[:5]
        only_target = sorted((want - saved).elements())[:5]
        return f"array shapes only in the checkpoint {only_saved}, only in the target {only_target}"

    def _read_together(self, target: Any, step: int) -> tuple[Any, list[tuple[str, str]]]:
        """Reads ``step`` on this process; returns (its result or None, every process's verdict
        ``(kind, message)`` in process order). Never raises before the all-gather, so every
        process reaches it."""
        result = None
        try:
            result, verdict = self._read(target, step), (_OK, "")
        except Exception as e:  # noqa: BLE001 - every reader failure becomes a verdict
            try:
                verdict = self._verdict(target, step, e)
            except Exception as inner:  # noqa: BLE001 - a verdict no matter what
                verdict = (_FAILED, f"checkpoint step {step}: {e!r}; classifying it: {inner!r}")
        return result, distributed.allgather_objects(verdict)

    def restore_step(self, target: Any, step: int) -> tuple[Any, Any]:
        """(state, host_state) of ``step`` placed like ``target`` (all processes call it).

        Raises:
          CorruptCheckpointError: some process found positive evidence of damage (and none
            failed otherwise).
          CheckpointError: some process could not read the step for another reason (transient
            error, or the step does not fit ``target``).
        """
        result, verdicts = self._read_together(target, step)
        _raise_unless_ok(verdicts)
        return result

    def move_aside(self, step: int) -> str | None:
        """Renames step directory ``<step>`` to ``<step>.corrupt`` (``.corrupt-1``, ... if taken).

        Every process calls it: process 0 renames, then all meet at a barrier, so every process
        sees the same step list afterwards. Returns the new path on process 0, else ``None`` (also
        when the directory is already gone). The directory is kept for inspection; renaming it back
        restores the step.
        """
        self._check_writable("move a step aside")
        moved = None
        if jax.process_index() == 0 and os.path.isdir(self.step_path(step)):
            src = self.step_path(step)
            moved, i = f"{src}.corrupt", 0
            while os.path.exists(moved):
                i += 1
                moved = f"{src}.corrupt-{i}"
            os.rename(src, moved)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"mojax.infra.checkpoint.move_aside.{step}")
        self._manager.reload()
        return moved

    def restore(
        self, target: Any, *, step: int | None = None, fallback: bool = False
    ) -> tuple[Any, Any, int]:
        """Restore ``(state, host_state, step)`` (every process calls it).

        Args:
          target: the state to restore into — a ``TrainState`` of ``jax.ShapeDtypeStruct`` with
            shardings (``mojax.learner.abstract_train_state``) or of arrays; the checkpoint is read
            straight into those shardings, whatever mesh it was saved from.
          step: the step to read (default the latest committed one).
          fallback: if the step is damaged, move it aside (``move_aside``; read-only: skip it,
            moving nothing), log a warning and try the next older steps.

        Raises:
          CorruptCheckpointError: the step (every step, with ``fallback``) is damaged; the
            message names each path and the evidence.
          CheckpointError: no committed step, or a step could not be read for another reason
            (transient error, a tree that does not fit ``target``): nothing is moved and no
            older step is tried.
        """
        steps = self.all_steps()
        if not steps:
            raise CheckpointError(f"no committed checkpoint in {self.directory}")
        if step is not None and step not in steps:
            raise CheckpointError(
                f"checkpoint step {step} not found in {self.directory}; committed steps: {steps}"
            )
        start = steps[-1] if step is None else step
        candidates = [s for s in reversed(steps) if s <= start]
        errors = []
        for s in candidates if fallback else candidates[:1]:
            result, verdicts = self._read_together(target, s)
            try:
                _raise_unless_ok(verdicts)
            except CorruptCheckpointError as e:
                errors.append(str(e))
                if not fallback:
                    raise
                if self.read_only:
                    _log.warning("%s; skipped (read-only: not moved); trying an older step", e)
                else:
                    moved = self.move_aside(s)
                    _log.warning("%s; moved it aside to %s; trying an older step", e, moved)
                continue
            return (*result, s)
        raise CorruptCheckpointError("no readable checkpoint:\n  " + "\n  ".join(errors))

    def close(self) -> None:
        """Wait for pending saves and release the manager's threads.

        Also waits for the manager's start-up clean-up of unfinished temporary directories, which
        orbax (0.12) runs on a thread of its own and does not join in ``close``: a run that stops
        right after opening its checkpoints (e.g. on a bad data file) would otherwise leave that
        thread reading the directory while the interpreter shuts down, and it prints a traceback.

        After a failed save (:class:`CheckpointSaveError`, already raised) orbax raises the same
        error again here; it is not raised twice. A save that fails first here is raised once
        the manager's threads are released.
        """
        reported, error = self._save_failed, None
        try:
            self.wait()
        except CheckpointSaveError as e:
            error = None if reported else e
        await_cleanup = getattr(self._manager, "_maybe_await_cleanup_tmp_directory", None)
        if await_cleanup is not None:
            await_cleanup()
        try:
            self._manager.close()
        except Exception:  # noqa: BLE001 - the failed save's error again, already raised once
            if not self._save_failed:
                raise
        self._state_reader.close()
        self._host_reader.close()
        if self._quiet is not None:
            logging.getLogger("absl").removeFilter(self._quiet)
        if error is not None:
            raise error

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_host_state(step_dir: str | os.PathLike) -> Any:
    """The host state of one committed step directory, read alone (no arrays, nothing written;
    one process). Raises whatever the JSON reader raises for a damaged or missing item."""
    reader = ocp.JsonCheckpointHandler()
    try:
        host = reader.restore(epath.Path(os.fspath(step_dir)) / _HOST, args=ocp.args.JsonRestore())
    finally:
        reader.close()
    return decode_host_state(host["host_state"])


def _raise_unless_ok(verdicts: list[tuple[str, str]]) -> None:
    """Raises the decision of all processes' verdicts: any failure -> ``CheckpointError``, else
    any damage -> ``CorruptCheckpointError``; nothing when every process read the step."""
    many = len(verdicts) > 1
    for kind, error in ((_FAILED, CheckpointError), (_CORRUPT, CorruptCheckpointError)):
        msgs = [(p, m) for p, (k, m) in enumerate(verdicts) if k == kind]
        if msgs:
            raise error("\n".join(f"process {p}: {m}" if many else m for p, m in msgs))
