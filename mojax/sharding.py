"""Device mesh ("data", "fsdp", "tensor") from the config, logical axis rules, batch placement.

The model names every parameter and activation axis logically ("batch", "embed", "heads", ...;
``mojax.models``); a tuple of rules maps those names to mesh axes, so one config switch moves a run
from one CPU to data / ZeRO-3 (fsdp) / tensor parallelism without touching the model code::

    mesh = mesh_from_config(config.mesh)        # config.mesh.{data, fsdp, tensor}; -1 = the rest
    rules = logical_axis_rules(config)          # config.logical_axis_rules or the model's default
    batch = shard_batch(batch, mesh, rules)     # rows over ("data", "fsdp"), scalars replicated

Nothing here runs at import time (no device query until a function is called).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mojax.models import DEFAULT_LOGICAL_AXIS_RULES

MESH_AXES = ("data", "fsdp", "tensor")


def resolve_mesh_shape(
    data: int = -1, fsdp: int = 1, tensor: int = 1, *, num_devices: int
) -> tuple[int, int, int]:
    """The (data, fsdp, tensor) sizes with at most one ``-1`` replaced by the remaining devices.

    Raises:
      ValueError naming ``mesh.<axis>`` when a size is not a positive int / -1, more than one axis is
      -1, or the product does not equal ``num_devices``.
    """
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or (v < 1 and v != -1):
            raise ValueError(f"mesh.{name} must be a positive int or -1 (the rest), got {v!r}")
    auto = [k for k, v in sizes.items() if v == -1]
    if len(auto) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got {auto} (mesh={sizes})")
    fixed = math.prod(v for v in sizes.values() if v != -1)
    if auto:
        if num_devices % fixed:
            raise ValueError(
                f"mesh.{auto[0]}=-1: {num_devices} devices are not divisible by the other axes "
                f"({fixed}); mesh={sizes}"
            )
        sizes[auto[0]] = num_devices // fixed
    if math.prod(sizes.values()) != num_devices:
        raise ValueError(
            f"mesh data*fsdp*tensor = {math.prod(sizes.values())} != {num_devices} devices; "
            f"mesh={sizes} (use -1 on one axis for 'the remaining devices')"
        )
    return sizes["data"], sizes["fsdp"], sizes["tensor"]


def make_mesh(
    data: int = -1, fsdp: int = 1, tensor: int = 1, devices: Sequence[Any] | None = None
) -> Mesh:
    """A ``Mesh`` with axes ("data", "fsdp", "tensor") over ``devices`` (default all devices)."""
    devices = list(jax.devices() if devices is None else devices)
    shape = resolve_mesh_shape(data, fsdp, tensor, num_devices=len(devices))
    try:  # topology-aware order on TPU/GPU slices
        from jax.experimental import mesh_utils

        grid = mesh_utils.create_device_mesh(shape, devices)
    except Exception:  # noqa: BLE001 - any topology helper failure: plain row-major order
        grid = np.asarray(devices, dtype=object).reshape(shape)
    return Mesh(grid, MESH_AXES)


def mesh_from_config(mesh_config: Any, devices: Sequence[Any] | None = None) -> Mesh:
    """``make_mesh`` from ``config.mesh`` (a ConfigDict or mapping with data / fsdp / tensor)."""
    cfg = dict(mesh_config.to_dict() if hasattr(mesh_config, "to_dict") else mesh_config)
    unknown = set(cfg) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"unknown mesh key(s) {sorted(unknown)}; allowed: {list(MESH_AXES)}")
    return make_mesh(cfg.get("data", -1), cfg.get("fsdp", 1), cfg.get("tensor", 1), devices)


def logical_axis_rules(config: Any = None) -> tuple:
    """``config.logical_axis_rules`` (pairs of logical name -> mesh axis / axes / None) if present,
    else the model's ``DEFAULT_LOGICAL_AXIS_RULES``; validated against ``MESH_AXES``."""
    rules = None
    if config is not None:
        rules = (
            config.get("logical_axis_rules")
            if isinstance(config, Mapping) or hasattr(config, "get")
            else None
        )
    if rules is None:
        return DEFAULT_LOGICAL_AXIS_RULES
    out = []
    for i, rule in enumerate(rules):
        if len(rule) != 2 or not isinstance(rule[0], str):
            raise ValueError(f"logical_axis_rules[{i}] must be (name, mesh_axes), got {rule!r}")
        name, axes = rule
        axes_t = (axes,) if isinstance(axes, str) else tuple(axes or ())
        bad = [a for a in axes_t if a not in MESH_AXES]
        if bad:
            raise ValueError(
                f"logical_axis_rules[{i}] ({name!r}) names unknown mesh axes {bad}; "
                f"mesh axes are {list(MESH_AXES)}"
            )
        out.append((name, axes if isinstance(axes, str) or axes is None else tuple(axes)))
    return tuple(out)


def logical_sharding(mesh: Mesh, rules: Sequence, *names: str | None) -> NamedSharding:
    """The ``NamedSharding`` of an array whose axes have the logical ``names``."""
    return nn.logical_to_mesh_sharding(PartitionSpec(*names), mesh, rules)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh, rules: Sequence, ndim: int) -> NamedSharding:
    """Rows (leading axis) over the mesh axes of logical "batch"; a 0-d value is replicated."""
    if ndim == 0:
        return replicated(mesh)
    return logical_sharding(mesh, rules, "batch", *([None] * (ndim - 1)))


def batch_shardings(batch: Mapping[str, Any], mesh: Mesh, rules: Sequence) -> dict[str, Any]:
    """A dict of ``batch_sharding`` per key of ``batch`` (by each value's rank)."""
    return {k: batch_sharding(mesh, rules, np.ndim(v)) for k, v in batch.items()}


def num_shards(mesh: Mesh | None, rules: Sequence, name: str) -> int:
    """Into how many pieces the logical axis ``name`` is split on ``mesh`` (1 without a mesh)."""
    if mesh is None:
        return 1
    spec = logical_sharding(mesh, rules, name).spec
    axes = spec[0] if spec else None
    axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
    return math.prod(mesh.shape[a] for a in axes)


def batch_divisor(mesh: Mesh, rules: Sequence) -> int:
    """Number of shards of the batch axis (rows per call must be a multiple of it)."""
    return num_shards(mesh, rules, "batch")


def shard_batch(batch: Mapping[str, Any], mesh: Mesh, rules: Sequence) -> dict[str, jax.Array]:
    """``device_put`` every value of a host batch: rows over "batch"'s mesh axes, scalars replicated.

    Raises:
      ValueError naming the key whose row count is not a multiple of the number of batch shards.
    """
    div = batch_divisor(mesh, rules)
    out = {}
    for k, v in batch.items():
        v = np.asarray(v) if not isinstance(v, jax.Array) else v
        if v.ndim and v.shape[0] % div:
            raise ValueError(
                f"batch[{k!r}] has {v.shape[0]} rows, not a multiple of the {div} batch shards "
                f"of mesh {dict(mesh.shape)}"
            )
        out[k] = jax.device_put(v, batch_sharding(mesh, rules, v.ndim))
    return out


def host_memory_kind(mesh: Mesh) -> str | None:
    """ "pinned_host" if the mesh's devices can hold arrays in host memory, else None."""
    try:
        kinds = {m.kind for m in mesh.devices.flat[0].addressable_memories()}
    except Exception:  # noqa: BLE001 - backends without the memories API
        return None
    return "pinned_host" if "pinned_host" in kinds else None


def offload(tree: Any, shardings: Any) -> Any:
    """Place ``tree`` with ``shardings`` in pinned host memory when the backend supports it.

    Used for the frozen reference params (``mojax.rl.make_logprob_fn(..., offload=True)`` streams them
    to the devices inside the jitted call). Returns ``(tree, offloaded: bool)``.
    """
    leaves = jax.tree.leaves(shardings)
    mesh = leaves[0].mesh if leaves else None
    if mesh is None or host_memory_kind(mesh) is None:
        return jax.device_put(tree, shardings), False
    host = jax.tree.map(lambda s: s.with_memory_kind("pinned_host"), shardings)
    return jax.device_put(tree, host), True
