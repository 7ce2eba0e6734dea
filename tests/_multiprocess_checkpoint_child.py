"""One process of ``test_multiprocess_checkpoint.py`` (started by ``launch/local_cluster.py``).

Saves steps 1 and 2 of a state whose array is sharded over the two processes (each writes its
own half, ``state/ocdbt.process_<i>``), damages step 2 as ``--scenario`` says, restores with
``fallback=True`` and prints one ``RESULT {...}`` line: the restored step or the error, and the
directory listing afterwards.

Scenarios: ``bad_shard`` truncates the data files process 1 wrote, so only process 1's read of
its half fails; ``eio_on_1`` makes only process 1's reader raise ``OSError(EIO)``; ``lock``
instead enters the ``WorkdirLock`` of ``--dir`` on both processes.
"""

import errno
import json
import logging
import os
import sys

from absl import flags

_COORD = flags.DEFINE_string("coordinator_address", None, "")
_NUM = flags.DEFINE_integer("num_processes", None, "")
_ID = flags.DEFINE_integer("process_id", None, "")
_DIR = flags.DEFINE_string("dir", None, "checkpoint directory (scenario lock: the workdir)")
_SCENARIO = flags.DEFINE_enum("scenario", None, ["bad_shard", "eio_on_1", "lock"], "")


def state(seed):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("x",))
    w = np.arange(512 * 8, dtype=np.float32).reshape(512, 8) + seed  # 8 KiB per half
    return {
        "w": jax.make_array_from_callback(
            w.shape, NamedSharding(mesh, PartitionSpec("x")), w.__getitem__
        ),
        "seed": jax.make_array_from_callback(
            (), NamedSharding(mesh, PartitionSpec()), lambda idx: np.int32(seed)
        ),
    }


def main():
    flags.FLAGS(sys.argv)
    from mojax import distributed

    distributed.initialize(_COORD.value, _NUM.value, _ID.value)
    import jax

    out = {"process": jax.process_index(), "pid": os.getpid()}
    if _SCENARIO.value == "lock":
        out.update(take_lock(_DIR.value))
    else:
        out.update(restore_damaged(_DIR.value, _SCENARIO.value))
    print("RESULT " + json.dumps(out), flush=True)


def take_lock(workdir) -> dict:
    """Enters ``WorkdirLock(workdir)``: the lock file's holder pid while held (read after a
    barrier, so both processes see it) and whether the file is gone after the exit; or the
    refusal."""
    from mojax import distributed
    from mojax.infra.workdir_lock import LOCK_FILE, WorkdirLock, WorkdirLockedError

    out = {}
    path = os.path.join(workdir, LOCK_FILE)
    try:
        with WorkdirLock(workdir):
            distributed.barrier("locked")
            with open(path) as f:
                out["holder_pid"] = json.load(f)["pid"]
            distributed.barrier("read")
    except WorkdirLockedError as e:
        out["error"] = str(e)
    distributed.barrier("released")
    out["lock_left"] = os.path.exists(path)
    return out


def restore_damaged(directory, scenario) -> dict:
    """Saves steps 1 and 2, damages step 2 per ``scenario``, restores with ``fallback=True``."""
    import jax
    import numpy as np

    from mojax import distributed
    from mojax.infra.checkpoint import Checkpointer, CheckpointError

    me = jax.process_index()
    out = {"warnings": []}
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: out["warnings"].append(record.getMessage())
    logging.getLogger("mojax.infra.checkpoint").addHandler(handler)
    with Checkpointer(directory, max_to_keep=None, async_save=False) as ck:
        ck.save(1, state(1), {"step": 1})
        ck.save(2, state(2), {"step": 2})
        distributed.barrier("saved")
        if scenario == "bad_shard" and me == 0:
            data = os.path.join(directory, "2", "state", "ocdbt.process_1", "d")
            for name in os.listdir(data):
                with open(os.path.join(data, name), "r+b") as f:
                    f.truncate(3)
        if scenario == "eio_on_1" and me == 1:

            def fail(*args, **kwargs):
                raise OSError(errno.EIO, "Input/output error")

            ck._state_reader.restore = fail
        distributed.barrier("damaged")
        target = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state(0)
        )
        try:
            restored, host, step = ck.restore(target, fallback=True)
            out["step"] = step
            out["host"] = host
            mine = [np.asarray(s.data) for s in restored["w"].addressable_shards]
            want = [np.asarray(s.data) for s in state(step)["w"].addressable_shards]
            out["equal"] = all(np.array_equal(a, b) for a, b in zip(mine, want, strict=True))
        except CheckpointError as e:
            out["error"] = type(e).__name__
            out["message"] = str(e)
    out["listing"] = sorted(os.listdir(directory))
    return out


if __name__ == "__main__":
    main()
