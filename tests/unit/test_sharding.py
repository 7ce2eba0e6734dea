"""``mojax.sharding``: mesh shapes from the config (``-1`` = the remaining devices), logical axis rules
from the config, batch placement errors."""

import jax
import numpy as np
import pytest

from mojax import sharding as shl


def test_mesh_shape_validation():
    assert shl.resolve_mesh_shape(-1, 2, 1, num_devices=8) == (4, 2, 1)
    assert shl.resolve_mesh_shape(1, 1, -1, num_devices=8) == (1, 1, 8)
    with pytest.raises(ValueError, match="at most one"):
        shl.resolve_mesh_shape(-1, -1, 1, num_devices=8)
    with pytest.raises(ValueError, match="mesh.tensor"):
        shl.resolve_mesh_shape(1, 1, 0, num_devices=8)
    with pytest.raises(ValueError, match="!= 8 devices"):
        shl.resolve_mesh_shape(2, 2, 1, num_devices=8)
    with pytest.raises(ValueError, match="not divisible"):
        shl.resolve_mesh_shape(-1, 3, 1, num_devices=8)
    with pytest.raises(ValueError, match="unknown mesh key"):
        shl.mesh_from_config({"data": 1, "model": 1})
    with pytest.raises(ValueError, match="unknown mesh axes"):
        shl.logical_axis_rules({"logical_axis_rules": (("batch", "pipeline"),)})
    mesh = shl.mesh_from_config({"data": -1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 1}


def test_shard_batch_places_rows_and_names_bad_keys():
    mesh = shl.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    rules = shl.logical_axis_rules()
    out = shl.shard_batch(
        {"tokens": np.zeros((4, 3), np.int32), "clip_eps": np.float32(0.1)}, mesh, rules
    )
    assert out["tokens"].sharding.spec == jax.sharding.PartitionSpec(("data", "fsdp"), None)
    assert out["clip_eps"].sharding.spec == jax.sharding.PartitionSpec()
    assert shl.num_shards(mesh, rules, "vocab") == 1 and shl.num_shards(None, rules, "batch") == 1
    custom = shl.logical_axis_rules({"logical_axis_rules": [("batch", ["data"]), ("vocab", None)]})
    assert custom == (("batch", ("data",)), ("vocab", None))
