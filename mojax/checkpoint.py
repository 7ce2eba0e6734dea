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
  so a process killed mid-save leaves the previous steps usable (unfinished tmp dirs are ignored
  and cleaned up when the next ``Checkpointer`` opens the directory);
* restore onto a different mesh: arrays are read slice-wise into the shardings of ``target``;
* a broken step raises ``CorruptCheckpointError`` naming its path and what is wrong; with
  ``fallback=True`` it is moved aside to ``<step>.corrupt`` (renamed, never deleted; logged) and the
  newest readable older step is restored instead, so the run can later save that step number again
  instead of crash-looping on ``StepAlreadyExistsError``. A step that is readable but does not fit
  the restore target (the model or optimizer changed) is not corruption: it raises a plain
  ``CheckpointError`` and nothing is moved.

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
from jax.experimental import multihost_utils

_log = logging.getLogger(__name__)

_STATE, _HOST = "state", "host"


class CheckpointError(RuntimeError):
    """A checkpoint step cannot be restored (corrupt, or it does not fit the restore target)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint step's files are missing, empty or unreadable although its saved array shapes
    fit the target (truncated data, garbage bytes, a deleted item)."""


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
      directory: where the step directories live (created if missing).
      max_to_keep: keep the newest N steps (None = all).
      async_save: write in a background thread (``save`` returns once the arrays are copied to
        host memory); ``wait()`` / ``close()`` block until written.
      save_interval_steps: ``save`` is a no-op unless ``step`` is a multiple (or ``force=True``).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_to_keep: int | None = 3,
        async_save: bool = True,
        save_interval_steps: int = 1,
    ):
        self.directory = os.path.abspath(os.fspath(directory))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True,
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=(_STATE, _HOST)
        )

    # --- saving
    def save(self, step: int, state: Any, host_state: Any = None, *, force: bool = False) -> bool:
        """Start saving ``state`` (a pytree of arrays) and ``host_state`` as ``step``.

        Returns False when skipped by ``save_interval_steps``. Raises ``TypeError`` naming the path
        of a host-state value that JSON cannot hold (before anything is written).
        """
        host = {"host_state": encode_host_state({} if host_state is None else host_state)}
        args = ocp.args.Composite(
            **{_STATE: ocp.args.StandardSave(state), _HOST: ocp.args.JsonSave(host)}
        )
        return self._manager.save(int(step), args=args, force=force)

    def wait(self) -> None:
        """Block until pending async saves are written and committed."""
        self._manager.wait_until_finished()

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

    def _check_files(self, step: int) -> None:
        path = self.step_path(step)
        if not os.path.isdir(path):
            raise CorruptCheckpointError(f"checkpoint step {step}: directory {path} does not exist")
        for item in (_STATE, _HOST):
            sub = os.path.join(path, item)
            if not os.path.isdir(sub) or not os.listdir(sub):
                raise CorruptCheckpointError(
                    f"checkpoint step {step} at {path}: item {item!r} is missing or empty ({sub})"
                )

    def restore_step(self, target: Any, step: int) -> tuple[Any, Any]:
        """(state, host_state) of ``step`` placed like ``target``.

        Raises:
          CorruptCheckpointError: files missing or unreadable (see the class).
          CheckpointError: the step is readable but does not fit ``target``.
        """
        self._check_files(step)
        args = ocp.args.Composite(
            **{
                _STATE: ocp.args.StandardRestore(_as_abstract(target)),
                _HOST: ocp.args.JsonRestore(),
            }
        )
        try:
            out = self._manager.restore(step, args=args)
            host = decode_host_state(out[_HOST]["host_state"])
        except Exception as e:  # noqa: BLE001 - every reader failure becomes one named error
            raise self._read_error(target, step, e) from e
        state = out[_STATE]
        got = jax.tree.structure(state)
        want = jax.tree.structure(target)
        if got != want:
            raise CheckpointError(
                f"checkpoint step {step} at {self.step_path(step)}: saved state structure differs "
                f"from the restore target:\n  saved:  {got}\n  target: {want}"
            )
        return state, host

    def _read_error(self, target: Any, step: int, err: Exception) -> CheckpointError:
        """Corrupt, unless the step's own metadata is readable and its array shapes differ from
        ``target``'s (then the model or optimizer changed, and nothing is corrupt)."""
        where = f"checkpoint step {step} at {self.step_path(step)}"
        cause = f"{type(err).__name__}: {err}"
        try:
            saved = self._manager.item_metadata(step)[_STATE]
            saved = getattr(saved, "tree", saved)
            saved_shapes = collections.Counter(
                tuple(getattr(x, "shape", ())) for x in jax.tree.leaves(saved)
            )
        except Exception as meta_err:  # noqa: BLE001 - unreadable metadata is corruption
            return CorruptCheckpointError(
                f"{where} is unreadable: {cause} (its metadata too: {type(meta_err).__name__}: "
                f"{meta_err})"
            )
        want = collections.Counter(tuple(np.shape(x)) for x in jax.tree.leaves(target))
        if saved_shapes != want:
            only_saved = sorted((saved_shapes - want).elements())[:5]
            only_target = sorted((want - saved_shapes).elements())[:5]
            return CheckpointError(
                f"{where} does not fit the restore target (model or optimizer changed?): array "
                f"shapes only in the checkpoint {only_saved}, only in the target {only_target}; "
                f"{cause}"
            )
        return CorruptCheckpointError(f"{where} is unreadable: {cause}")

    def move_aside(self, step: int) -> str | None:
        """Renames step directory ``<step>`` to ``<step>.corrupt`` (``.corrupt-1``, ... if taken).

        Only process 0 (``jax.process_index() == 0``) renames; with several processes all of them
        then meet at a barrier, so every process sees the same step list afterwards. Returns the
        new path on process 0, else ``None``. The directory is kept for inspection; renaming it
        back restores the step.
        """
        moved = None
        if jax.process_index() == 0:
            src = self.step_path(step)
            moved, i = f"{src}.corrupt", 0
            while os.path.exists(moved):
                i += 1
                moved = f"{src}.corrupt-{i}"
            os.rename(src, moved)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"mojax.checkpoint.move_aside.{step}")
        self._manager.reload()
        return moved

    def restore(
        self, target: Any, *, step: int | None = None, fallback: bool = False
    ) -> tuple[Any, Any, int]:
        """Restore ``(state, host_state, step)``.

        Args:
          target: the state to restore into — a ``TrainState`` of ``jax.ShapeDtypeStruct`` with
            shardings (``mojax.learner.abstract_train_state``) or of arrays; the checkpoint is read
            straight into those shardings, whatever mesh it was saved from.
          step: the step to read (default the latest committed one).
          fallback: if the step is corrupt, move it aside (``move_aside``: process 0 renames it to
            ``<step>.corrupt``), log a warning and try the next older steps.

        Raises:
          CorruptCheckpointError: the step (every step, with ``fallback``) is corrupt; the message
            names each path and what is wrong.
          CheckpointError: no committed step, or a readable step does not fit ``target`` (never
            moved aside).
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
        if not fallback:
            candidates = candidates[:1]
        errors = []
        for s in candidates:
            try:
                state, host = self.restore_step(target, s)
            except CorruptCheckpointError as e:
                errors.append(str(e))
                if fallback:
                    moved = self.move_aside(s)
                    _log.warning("%s; moved it aside to %s; trying an older step", e, moved)
                continue
            return state, host, s
        if len(errors) == 1:
            raise CorruptCheckpointError(errors[0])
        raise CorruptCheckpointError("no readable checkpoint:\n  " + "\n  ".join(errors))

    def close(self) -> None:
        """Wait for pending saves and release the manager's threads."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
