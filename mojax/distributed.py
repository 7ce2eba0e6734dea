"""Multi-controller JAX: one process per host (or per device), the same program on each.

mojax runs the same command on every process (MaxText / big_vision style). What each process does:

- **Startup.** ``initialize`` calls ``jax.distributed.initialize`` once, before any device is used:
  with no arguments it auto-detects SLURM and Cloud TPU VMs; ``--coordinator_address``,
  ``--num_processes`` and ``--process_id`` (``mojax.main``) override that, as
  ``launch/local_cluster.py`` does to run N processes on one machine. On the CPU the cross-process
  collectives are gloo's.
- **Device work.** Every jitted program (SFT, sampler, PPO step, log-probs) runs on the one global
  mesh. Row inputs are built from each process's own rows (``put_rows``,
  ``jax.make_array_from_process_local_data``); replicated inputs are the same numpy value on every
  process.
- **Rows.** A rollout's rows are sharded over the mesh's batch axes; ``row_layout`` says which rows
  are addressable here (``local``) and which process runs each row's host work and tools
  (``owner``). With the batch split across processes (data parallelism over hosts), a process reads
  only its own rows of the sampler's output (``read_local``, no all-gather), runs its own rows'
  tools, and builds its own rows of the next append; per round only two small values are agreed on
  (``global_max``: does any row resume, and the widest observation). Rows replicated over several
  processes (e.g. tensor parallelism across hosts), or rows that do not divide into the batch
  shards (``RowLayout.whole``: read whole with ``host_value``), are split among those processes for
  the tools, whose results are then all-gathered. The finished rollout is all-gathered once
  (``gather_rows``).
- **Host state.** The data position, trackers, ParetoPO's archive and the estimator state are
  computed from all-gathered values (rewards ``[P, G, M]``, ``valid``) by the same code on every
  process, so they are identical everywhere (``assert_same`` checks this in tests and with
  ``MOJAX_DEBUG_HOST_STATE=1``).
- **Reading device values.** ``read_local`` reads the addressable part of a global array,
  ``host_value`` the whole of it (``process_allgather``); never ``np.asarray`` on a global array.
- **Files.** Only ``is_leader()`` (process 0) writes metrics, TensorBoard, transcripts, plots, the
  tokenizer copy and the host-state JSON; orbax checkpoints are written by all processes together.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping, Sequence
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


def own_groups(num_groups: int) -> tuple[int, int]:
    """``[lo, hi)``: this process's block of prompt groups (``owner_of_groups``; empty when it
    owns none)."""
    mine = np.flatnonzero(owner_of_groups(num_groups) == process_index())
    return (int(mine[0]), int(mine[-1]) + 1) if mine.size else (0, 0)


def group_layout(num_rows: int, num_samples: int) -> RowLayout:
    """The ``RowLayout`` of per-process engines (``mojax.sampling.continuous.engine``): each process
    holds, works on and sends the rows of its own block of prompt groups (``row_owners``)."""
    if process_count() == 1:
        return RowLayout.single(num_rows)
    owner = row_owners(num_rows, num_samples)
    return RowLayout(owner == process_index(), owner, False, True)


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


def global_max(values: Sequence[int]) -> np.ndarray:
    """The elementwise max over processes of a few ints (one collective; no-op in one process)."""
    local = np.asarray(values, np.int64).reshape(-1)
    if process_count() == 1:
        return local
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(local)).reshape(-1, local.size).max(0)


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """Which rows of a row-sharded batch this process holds and works on.

    Attributes:
      local: bool [B], rows addressable on this process (its devices hold them).
      owner: int [B], the process that runs each row's host work (tools, transcripts' text).
      shared: some row is addressable on more than one process (their tool results are then
        all-gathered, so every holder appends the same observation).
      gathers: this process sends its rows in ``gather_rows`` (the lowest process of each set of
        processes that hold the same rows).
      whole: the rows do not divide into the batch shards (e.g. an evaluation batch of 3 rows on
        2 shards): every process works on every row, reads whole arrays (``host_value``) and
        passes whole host inputs.
    """

    local: np.ndarray
    owner: np.ndarray
    shared: bool
    gathers: bool
    whole: bool = False

    @classmethod
    def single(cls, num_rows: int) -> RowLayout:
        return cls(np.ones(num_rows, bool), np.zeros(num_rows, np.int32), False, True)

    def read(self, x: Any) -> np.ndarray:
        """The rows of ``x`` this process works on (``read_local``; whole: ``host_value``)."""
        return host_value(x) if self.whole else read_local(x)

    def put(self, value: np.ndarray, sharding: Any) -> Any:
        """A device input from a host value of which this process filled in its rows
        (``put_rows``; whole: the whole value, the same on every process)."""
        return put_rows(value, None if self.whole else sharding)


def row_layout(sharding: Any, num_rows: int) -> RowLayout:
    """The ``RowLayout`` of ``num_rows`` rows placed with ``sharding`` (a 1-d batch sharding; None:
    an unsharded value, every process holds every row).

    Raises:
      ValueError: two processes hold overlapping but different sets of rows (a device order in
        which one process's devices interleave another's along the batch axes).
    """
    count, me = process_count(), process_index()
    if count == 1:
        return RowLayout.single(num_rows)
    holds = np.zeros((count, num_rows), bool)
    try:
        indices = {} if sharding is None else sharding.devices_indices_map((num_rows,))
    except ValueError:  # jax's IndivisibleError: uneven rows, worked on whole
        indices, sharding = {}, None
    if sharding is None:
        holds[:] = True
    for device, index in indices.items():
        holds[device.process_index, index[0]] = True
    owner = np.zeros(num_rows, np.int32)
    gathers = False
    for p in range(count):
        same = [q for q in range(count) if np.array_equal(holds[q], holds[p])]
        if any(np.any(holds[q] & holds[p]) for q in range(count) if q not in same):
            raise ValueError(
                f"processes {p} and others hold overlapping but different rows of the batch "
                f"({sharding}); order the mesh devices by process along the batch axes"
            )
        if p == same[0]:  # split this set's rows among its processes, contiguous blocks
            rows = np.flatnonzero(holds[p])
            owner[rows] = np.asarray(same)[owner_of_groups(len(rows), len(same))]
            gathers = gathers or p == me
    shared = bool(holds.sum(0).max() > 1)
    return RowLayout(holds[me], owner, shared, gathers, whole=sharding is None)


def read_local(x: Any) -> np.ndarray:
    """numpy of ``x`` with only the parts addressable on this process filled in (zeros
    elsewhere): reads no other process's rows. A fully addressable value is read whole."""
    import jax

    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
        return np.asarray(x)
    out = np.zeros(x.shape, x.dtype)
    for shard in x.addressable_shards:
        out[shard.index] = np.asarray(shard.data)
    return out


def put_rows(value: np.ndarray, sharding: Any) -> Any:
    """A global array with ``sharding`` from a host value of the global shape of which only this
    process's addressable parts are read (``jax.make_array_from_process_local_data``; the value is
    used as is in one process). A scalar, or any value with a fully replicated sharding, is the
    same on every process: each device gets the whole value."""
    import jax

    value = np.asarray(value)
    if sharding is None or process_count() == 1:
        return jax.numpy.asarray(value)
    if value.ndim == 0 or sharding.is_fully_replicated:
        return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])
    rows = np.zeros(value.shape[0], bool)
    for idx in sharding.addressable_devices_indices_map(value.shape).values():
        rows[idx[0]] = True
    lo, hi = np.flatnonzero(rows)[[0, -1]] + (0, 1)
    if not rows[lo:hi].all():  # this process's rows are not one block: per-device callback
        return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])
    return jax.make_array_from_process_local_data(sharding, value[lo:hi], value.shape)


def gather_rows(layout: RowLayout, arrays: Mapping[str, np.ndarray], objects: Mapping[str, list]):
    """Every row of per-row values of which each process filled in its ``layout.local`` rows.

    Args:
      arrays: name -> [B, ...] numpy, valid on the local rows.
      objects: name -> list of B picklable values, valid on the local rows.

    Returns:
      ``(arrays, objects)`` with every row filled in, on every process (one all-gather of the
      senders' rows; in one process the inputs are returned).
    """
    if process_count() == 1:
        return dict(arrays), {k: list(v) for k, v in objects.items()}
    ids = np.flatnonzero(layout.local) if layout.gathers else np.zeros((0,), np.int64)
    part = (
        ids,
        {k: np.asarray(v)[ids] for k, v in arrays.items()},
        {k: [v[i] for i in ids] for k, v in objects.items()},
    )
    out_a = {k: np.zeros_like(np.asarray(v)) for k, v in arrays.items()}
    out_o = {k: [None] * len(v) for k, v in objects.items()}
    seen = np.zeros(len(layout.local), bool)
    for rows, arr, obj in allgather_objects(part):
        if seen[rows].any():
            raise RuntimeError(f"rows {rows[seen[rows]].tolist()} were sent by two processes")
        seen[rows] = True
        for k, v in arr.items():
            out_a[k][rows] = v
        for k, v in obj.items():
            for i, x in zip(rows, v, strict=True):
                out_o[k][i] = x
    if not seen.all():
        raise RuntimeError(f"rows {np.flatnonzero(~seen).tolist()} were sent by no process")
    return out_a, out_o
