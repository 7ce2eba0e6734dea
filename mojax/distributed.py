"""Multi-controller JAX: one process per host (or per device), the same program on each.

mojax runs the same command on every process (MaxText / big_vision style). What each process does:

- **Startup.** ``initialize`` calls ``jax.distributed.initialize`` once, before any device is used:
  with no arguments it auto-detects SLURM and Cloud TPU VMs; ``--coordinator_address``,
  ``--num_processes`` and ``--process_id`` (``mojax.main``) override that, as
  ``launch/local_cluster.py`` does to run N processes on one machine. On the CPU the cross-process
  collectives are gloo's.
- **Device work.** Every jitted program (SFT, sampler, PPO step, log-probs) runs on the one global
  mesh, with identical host inputs on every process (``jax.device_put`` of the same numpy value).
- **Host state.** The data position, trackers, ParetoPO's archive and the estimator state are
  computed from all-gathered values by the same code on every process, so they are identical
  everywhere (``assert_same`` checks this in tests and with ``MOJAX_DEBUG_HOST_STATE=1``).
- **Rows.** Row ``b`` of a rollout is owned by the process that owns its prompt group
  (``owner_of_groups``: contiguous blocks of whole groups). A process runs the tools of its own rows
  only; the observations are all-gathered (``allgather_objects``), so every process appends the
  same tokens.
- **Reading device values.** ``host_value`` reads a global array on every process
  (``process_allgather``; never ``np.asarray`` on a global array).
- **Files.** Only ``is_leader()`` (process 0) writes metrics, TensorBoard, transcripts, plots, the
  tokenizer copy and the host-state JSON; orbax checkpoints are written by all processes together.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """``jax.distributed.initialize`` (auto-detection unless the three values are given).

    Raises:
      ValueError: only some of the three explicit values are given.
    """
    import jax

    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ValueError(
            "--coordinator_address, --num_processes and --process_id go together (got "
            f"coordinator_address={coordinator_address!r}, num_processes={num_processes!r}, "
            f"process_id={process_id!r}); give all three, or none for auto-detection"
        )
    if all(given):
        if not 0 <= process_id < num_processes:
            raise ValueError(f"--process_id={process_id} must be in [0, {num_processes})")
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    else:
        jax.distributed.initialize()


def process_index() -> int:
    import jax

    return jax.process_index()


def process_count() -> int:
    import jax

    return jax.process_count()


def is_leader() -> bool:
    """True on the process that writes files (process 0)."""
    return process_index() == 0


def barrier(name: str) -> None:
    """Every process waits here until all have arrived (no-op in one process)."""
    if process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def owner_of_groups(num_groups: int, count: int | None = None) -> np.ndarray:
    """int [num_groups]: the process that owns each prompt group (contiguous blocks of whole
    groups, as even as possible; the first ``num_groups % count`` processes own one more)."""
    count = process_count() if count is None else count
    return (
        np.minimum(np.arange(num_groups) * count // max(num_groups, 1), count - 1).astype(np.int32)
        if num_groups
        else np.zeros((0,), np.int32)
    )


def row_owners(num_rows: int, num_samples: int) -> np.ndarray:
    """int [B]: the process owning each row of a prompt-major batch (whole groups of
    ``num_samples`` rows, ``owner_of_groups``)."""
    return np.repeat(owner_of_groups(num_rows // num_samples), num_samples)


def host_value(x: Any) -> np.ndarray:
    """The whole value of ``x`` as numpy on every process: a global ``jax.Array`` is all-gathered
    (``process_allgather``); an addressable or host value is read directly."""
    import jax

    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def allgather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj`` (picklable), in process order, on every process. One process: ``[obj]``.

    Two collectives: the byte lengths, then the padded bytes."""
    if process_count() == 1:
        return [obj]
    from jax.experimental import multihost_utils

    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.asarray([data.size], np.int64)))
    sizes = sizes.reshape(-1)
    padded = np.zeros((int(sizes.max()),), np.uint8)
    padded[: data.size] = data
    gathered = np.asarray(multihost_utils.process_allgather(padded))
    return [pickle.loads(gathered[i, : sizes[i]].tobytes()) for i in range(len(sizes))]


def merge_owned(parts: Sequence[dict[int, Any]]) -> dict[int, Any]:
    """One ``{row: value}`` from each process's ``{row: value}`` of its own rows.

    Raises:
      RuntimeError: two processes answered the same row (an ownership bug).
    """
    out: dict[int, Any] = {}
    for part in parts:
        twice = sorted(set(out) & set(part))
        if twice:
            raise RuntimeError(f"rows {twice} were answered by two processes")
        out.update(part)
    return out


def assert_same(name: str, value: Any) -> None:
    """Raises when ``value`` (picklable) differs between processes (a host-state divergence)."""
    values = allgather_objects(value)
    blobs = [pickle.dumps(v) for v in values]
    bad = [i for i, b in enumerate(blobs) if b != blobs[0]]
    if bad:
        raise RuntimeError(f"{name} differs between processes: process(es) {bad} != process 0")
