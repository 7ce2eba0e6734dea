"""``Checkpointer.restore`` moves a step aside only on positive evidence of damage.

Damaged files (short, missing, empty, garbage, unparsable) are corrupt: named, moved aside with
``fallback=True``, and the older step restored. A read that fails while the files are intact --
an injected I/O error (EIO, ESTALE, EMFILE, in Python's and in TensorStore's form), out of memory,
orbax's tree-structure mismatch -- stops with a ``CheckpointError`` that says so and moves nothing,
even with ``fallback=True``. A read-only ``Checkpointer`` (``mode=eval``, export) deletes, creates
and renames nothing: a running job's unfinished save stays.
"""

import errno
import gc
import glob
import os
import shutil

import optax
import pytest
from test_checkpoint import (
    assert_host_equal,
    assert_tree_equal,
    host_state,
    small_state,
    truncate_array_data,
)

from mojax.infra.checkpoint import Checkpointer, CheckpointError, CorruptCheckpointError
from mojax.infra.paths import RemotePathError
from mojax.learner import TrainState

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def save_steps(directory, steps=(1, 2, 3)):
    with Checkpointer(directory, max_to_keep=None, async_save=False) as ck:
        for i in steps:
            ck.save(i, small_state(i), host_state(i))


def listing(directory):
    return sorted(
        (os.path.relpath(os.path.join(r, f), directory), os.path.getsize(os.path.join(r, f)))
        for r, _, fs in os.walk(directory)
        for f in fs
    )


def _overwrite(pattern, data=None):
    files = glob.glob(pattern)
    assert files, pattern
    for f in files:
        size = os.path.getsize(f)
        with open(f, "wb") as fh:
            fh.write(os.urandom(size) if data is None else data)


def _remove(pattern):
    files = glob.glob(pattern)
    assert files, pattern
    for f in files:
        os.remove(f)


DAMAGE = {
    "truncated data": (lambda d: truncate_array_data(d), "shorter than the checkpoint's index"),
    "data files deleted": (lambda d: _remove(f"{d}/state/ocdbt.process_0/d/*"), "do not decode"),
    "garbage data": (lambda d: _overwrite(f"{d}/state/ocdbt.process_0/d/*"), "do not decode"),
    "truncated manifest": (lambda d: _overwrite(f"{d}/state/manifest.ocdbt", b"x"), "data loss"),
    "empty data file": (lambda d: _overwrite(f"{d}/state/ocdbt.process_0/d/*", b""), "is empty"),
    "missing _METADATA": (lambda d: _remove(f"{d}/state/_METADATA"), "_METADATA is missing"),
    "garbage host JSON": (lambda d: _overwrite(f"{d}/host/metadata", b"{x"), "is not JSON"),
    "empty host JSON": (lambda d: _overwrite(f"{d}/host/metadata", b""), "metadata is empty"),
    "host item deleted": (lambda d: shutil.rmtree(f"{d}/host"), "'host' is missing"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_files_are_corrupt_and_moved_aside(tmp_path, kind):
    directory = tmp_path / "ck"
    save_steps(directory, (1, 2))
    damage, evidence = DAMAGE[kind]
    damage(str(directory / "2"))
    with Checkpointer(directory) as ck:
        with pytest.raises(CorruptCheckpointError, match=evidence) as info:
            ck.restore(small_state(0))
        assert str(directory / "2") in str(info.value)
        assert (directory / "2").is_dir()  # without fallback nothing moves
        state, host, step = ck.restore(small_state(0), fallback=True)
    assert step == 1
    assert_tree_equal(state, small_state(1))
    assert_host_equal(host, host_state(1))
    assert sorted(os.listdir(directory)) == ["1", "2.corrupt"]
    gc.collect()


def _ts_os_error(code, name, text):
    """What TensorStore raises when the OS refuses a read (its POSIX errno mapping)."""
    return ValueError(
        f'FAILED_PRECONDITION: Error reading "params.w/0.0" in OCDBT database at local file '
        f'"/ck/3/state/": Error reading local file "/ck/3/state/d/ab": [OS error {code}: '
        f"{name} {text}]"
    )


TRANSIENT = {
    "EIO": (OSError(errno.EIO, "Input/output error"), "EIO"),
    "ESTALE (TensorStore)": (_ts_os_error(116, "ESTALE", "Stale file handle"), "OS error"),
    "EIO (TensorStore)": (_ts_os_error(5, "EIO", "Input/output error"), "OS error"),
    "EMFILE": (OSError(errno.EMFILE, "Too many open files"), "EMFILE"),
    "out of host memory": (MemoryError("std::bad_alloc"), "out of memory"),
    "out of device memory": (
        ValueError("RESOURCE_EXHAUSTED: Out of memory allocating 4096 bytes"),
        "out of memory",
    ),
}


@pytest.mark.parametrize("reader", ["state", "host"])
@pytest.mark.parametrize("kind", sorted(TRANSIENT))
def test_transient_read_error_moves_nothing_and_stops(tmp_path, monkeypatch, kind, reader):
    directory = tmp_path / "ck"
    save_steps(directory)
    before = listing(directory)
    exc, cause = TRANSIENT[kind]

    def fail(*args, **kwargs):
        raise exc

    with Checkpointer(directory) as ck:
        # the reader of one item fails (the manager's own metadata reads are left alone)
        monkeypatch.setattr(getattr(ck, f"_{reader}_reader"), "restore", fail)
        with pytest.raises(CheckpointError) as info:
            ck.restore(small_state(0), fallback=True)
        assert not isinstance(info.value, CorruptCheckpointError)
        msg = str(info.value)
        assert f"checkpoint step 3 at {directory / '3'} could not be restored" in msg
        assert "files show no damage, so nothing was moved aside" in msg and cause in msg
        assert listing(directory) == before and ck.all_steps() == [1, 2, 3]
        monkeypatch.undo()  # the fault clears: the same step restores
        state, host, step = ck.restore(small_state(0), fallback=True)
    assert step == 3
    assert_tree_equal(state, small_state(3))
    assert listing(directory) == before


def test_tree_structure_mismatch_moves_nothing(tmp_path):
    """The saved optimizer has a clip_by_global_norm state (max_grad_norm set); the target has
    none (max_grad_norm=None): same array shapes, different trees."""
    directory = tmp_path / "ck"
    save_steps(directory)
    before = listing(directory)
    s = small_state(0)
    other = TrainState(
        step=s.step, params=s.params, opt_state=optax.adamw(1e-3).init(s.params), rng=s.rng
    )
    with Checkpointer(directory) as ck:
        with pytest.raises(CheckpointError, match="tree structures do not match") as info:
            ck.restore(other, fallback=True)
    assert not isinstance(info.value, CorruptCheckpointError)
    assert "max_grad_norm" in str(info.value) and "nothing was moved aside" in str(info.value)
    assert listing(directory) == before
    gc.collect()


def test_read_only_deletes_nothing_and_skips_damage_without_moving(tmp_path):
    directory = tmp_path / "ck"
    save_steps(directory)
    # a running job's unfinished async save of step 4
    shutil.copytree(directory / "3", directory / "4.orbax-checkpoint-tmp-1234")
    truncate_array_data(directory / "3")
    before = listing(directory)
    with Checkpointer(directory, read_only=True) as ck:
        assert ck.all_steps() == [1, 2, 3]
        with pytest.raises(CorruptCheckpointError):
            ck.restore(small_state(0))
        state, _, step = ck.restore(small_state(0), fallback=True)
        assert step == 2
        assert_tree_equal(state, small_state(2))
        with pytest.raises(CheckpointError, match="opened read_only"):
            ck.save(5, small_state(5))
        with pytest.raises(CheckpointError, match="opened read_only"):
            ck.move_aside(3)
    assert listing(directory) == before
    with pytest.raises(CheckpointError, match="no checkpoint directory"):
        Checkpointer(tmp_path / "absent", read_only=True)
    assert not (tmp_path / "absent").exists()
    # a writing Checkpointer cleans the unfinished save up (by its first save at the latest):
    # only the holder of the workdir lock opens one
    with Checkpointer(directory) as ck:
        ck.save(5, small_state(5), host_state(5))
    assert not (directory / "4.orbax-checkpoint-tmp-1234").exists()
    gc.collect()


def test_url_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RemotePathError, match=r"checkpoint directory='gs://b/run' is a URL"):
        Checkpointer("gs://b/run")
    assert os.listdir(tmp_path) == []  # no local gs:/b/run folder


def test_many_processes_agree_in_process_order():
    """``_raise_unless_ok``: any failure wins over damage, which wins over success."""
    from mojax.infra.checkpoint import _raise_unless_ok

    _raise_unless_ok([("ok", ""), ("ok", "")])
    with pytest.raises(CorruptCheckpointError, match="^process 1: bad shard$"):
        _raise_unless_ok([("ok", ""), ("corrupt", "bad shard")])
    with pytest.raises(CheckpointError, match="process 0: EIO") as info:
        _raise_unless_ok([("failed", "EIO"), ("corrupt", "bad shard")])
    assert not isinstance(info.value, CorruptCheckpointError)
