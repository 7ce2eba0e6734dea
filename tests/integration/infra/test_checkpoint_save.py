"""A save that finds the disk full (issue 49): one ``CheckpointSaveError`` naming the workdir and
the free space, the previous step intact and restorable, ``close()`` quiet, and exit code 4 with
one message from the command line (``mojax.main`` run in-process).

The write fails inside a real async orbax save of a real small train state: the host-state
item's write raises ``OSError(ENOSPC)`` (what Python raises), or the sharding metadata's
TensorStore write raises ``ValueError: RESOURCE_EXHAUSTED ... No space left on device
[os_error_code='28']`` (the text TensorStore gave on a full tmpfs); and, where this process may
mount one (root), on a real full tmpfs.
"""

import errno
import os
import subprocess

import jax
import numpy as np
import pytest
from orbax.checkpoint._src.handlers import json_checkpoint_handler
from orbax.checkpoint._src.serialization import jax_array_handlers
from test_checkpoint import host_state, small_state

from mojax.infra.checkpoint import Checkpointer, CheckpointSaveError

_TS_ENOSPC = (
    'RESOURCE_EXHAUSTED: Error writing local file "{d}/_sharding": Failed writing: '
    '"{d}/_sharding.__lock": Failed to write 83 bytes to file 5: No space left on device '
    "[os_error_code='28']"
)


def _json_enospc(monkeypatch):
    async def full(self, x, directory):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / "metadata"))

    monkeypatch.setattr(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", full)


def _tensorstore_resource_exhausted(monkeypatch):
    async def full(shardings, infos, *, primary_host):
        raise ValueError(_TS_ENOSPC.format(d=infos[0].parent_dir))

    monkeypatch.setattr(jax_array_handlers, "_async_serialize_shardings", full)


@pytest.mark.parametrize("fault", [_json_enospc, _tensorstore_resource_exhausted])
def test_a_full_disk_is_one_message_and_the_previous_step_restores(tmp_path, monkeypatch, fault):
    work = tmp_path / "run"
    directory = work / "checkpoints"
    ckpt = Checkpointer(directory, max_to_keep=1)
    s1, s2 = small_state(1), small_state(2)
    ckpt.save(1, s1, host_state(1), force=True)
    ckpt.wait()
    with monkeypatch.context() as m:
        fault(m)
        with pytest.raises(CheckpointSaveError) as info:
            ckpt.save(2, s2, host_state(2), force=True)  # async: the error comes at the wait
            ckpt.wait()
        ckpt.close()  # orbax raises the same error again: not a second traceback
    msg = str(info.value)
    assert msg.startswith(f"workdir {work}: checkpoint step 2 could not be saved: the disk is full")
    assert "GiB free of" in msg and f"on the file system of {directory}" in msg
    assert f"the previous checkpoint step 1 is intact ({directory / '1'})" in msg
    assert "Traceback" not in msg and "\n" in msg and len(msg.splitlines()) == 3
    with Checkpointer(directory, max_to_keep=1) as again:  # space is back: the run goes on
        assert again.all_steps() == [1]
        state, host, step = again.restore(s1)
        assert step == 1 and host["data"] == host_state(1)["data"]
        for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(s1)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        again.save(2, s2, host_state(2), force=True)
    with Checkpointer(directory, read_only=True) as reader:
        assert reader.all_steps() == [2]


def test_a_really_full_tmpfs_gives_the_same_message(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        directory = mnt / "run" / "checkpoints"
        ckpt = Checkpointer(directory)
        ckpt.save(1, small_state(1), host_state(1), force=True)
        ckpt.wait()
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        with pytest.raises(CheckpointSaveError, match="could not be saved: the disk is full"):
            ckpt.save(2, small_state(2), host_state(2), force=True)
            ckpt.wait()
        ckpt.close()
        os.remove(mnt / "filler")
        with Checkpointer(directory) as again:
            assert again.restore(small_state(1))[2] == 1
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_cli_full_disk_exits_4_with_one_message(tmp_path, monkeypatch):
    """``python -m mojax.main`` in-process (``mojax_cli``) with the trainer replaced by a real save
    of a run's checkpoint onto a full disk."""
    from mojax_cli import run_cli

    from mojax.rl import trainer

    def run(config, workdir):
        with pytest.MonkeyPatch.context() as m:
            _json_enospc(m)
            ckpt = Checkpointer(workdir + "/checkpoints")
            try:
                ckpt.save(1, small_state(1), host_state(1), force=True)
                ckpt.wait()
            finally:
                ckpt.close()

    monkeypatch.setattr(trainer, "run", run)
    work = tmp_path / "run"
    p = run_cli("--config=configs/grpo.py", f"--workdir={work}")
    assert p.returncode == 4, p.stdout + p.stderr
    assert "mojax: checkpoint not saved\n" in p.stderr
    assert f"workdir {work}: checkpoint step 1 could not be saved: the disk is full" in p.stderr
    assert "no earlier checkpoint step exists" in p.stderr
    assert "Traceback" not in p.stderr
