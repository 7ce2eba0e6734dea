"""Device mesh ("data", "fsdp", "tensor") from the config, logical axis rules, batch placement.

The model names every parameter and activation axis logically ("batch", "embed", "heads", ...;
``mojax.models``); a tuple of rules maps those names to mesh axes, so one config switch moves a run
from one CPU to data / ZeRO-3 (fsdp) / tensor parallelism without touching the model code::

    mesh = mesh_from_config(config.mesh)        # config.mesh.{data, fsdp, tensor}; -1 = the rest
    sampler_mesh = sampler_mesh_from_config(config.mesh)  # config.mesh.sampler devices, or None
    rules = logical_axis_rules(config)          # config.logical_axis_rules or the model's default
    batch = shard_batch(batch, mesh, rules)     # rows over ("data", "fsdp"), scalars replicated
    check_model_divides(model_config, mesh, rules)  # ConfigError naming config.mesh.* and the dim

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

from mojax import distributed
from mojax.config import ConfigError
from mojax.models import DEFAULT_LOGICAL_AXIS_RULES

MESH_AXES = ("data", "fsdp", "tensor")
MESH_KEYS = MESH_AXES + ("sampler",)  # config.mesh: the learner's axes, the sampler's devices

#: The ``QwenConfig`` field that sizes each logical axis of the parameters (for error messages).
MODEL_DIMS = {
    "vocab": "vocab_size",
    "embed": "hidden_size",
    "norm": "hidden_size",
    "heads": "num_heads",
    "kv_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "mlp": "intermediate_size",
    "layers": "num_layers",
}


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
        raise ValueError(f"mesh: at most one axis may be -1, got {auto} (mesh={sizes})")
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
            f"mesh: data*fsdp*tensor = {math.prod(sizes.values())} != {num_devices} devices; "
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
    """``make_mesh`` from ``config.mesh`` (a ConfigDict or mapping with data / fsdp / tensor, and
    ``sampler``): the learner's mesh, over the devices ``split_devices`` leaves to the learner."""
    cfg = _mesh_keys(mesh_config)
    devices = split_devices(cfg.get("sampler", 0), devices)[0]
    return make_mesh(cfg.get("data", -1), cfg.get("fsdp", 1), cfg.get("tensor", 1), devices)


def sampler_mesh_from_config(mesh_config: Any, devices: Sequence[Any] | None = None) -> Mesh | None:
    """The sampler's own mesh of ``config.mesh.sampler`` devices (all on "data": rows spread, the
    weights replicated), or None when the sampler shares the learner's mesh (``sampler = 0``)."""
    n = _mesh_keys(mesh_config).get("sampler", 0)
    return make_mesh(-1, 1, 1, split_devices(n, devices)[1]) if n else None


def _mesh_keys(mesh_config: Any) -> dict[str, int]:
    cfg = dict(mesh_config.to_dict() if hasattr(mesh_config, "to_dict") else mesh_config)
    unknown = set(cfg) - set(MESH_KEYS)
    if unknown:
        raise ValueError(f"unknown mesh key(s) {sorted(unknown)}; allowed: {list(MESH_KEYS)}")
    return cfg


def split_devices(num_sampler: int, devices: Sequence[Any] | None = None) -> tuple[list, list]:
    """``(learner devices, sampler devices)``: every process gives the last ``num_sampler / P`` of
    its devices (by id) to the sampler and keeps the rest for the learner, so both meshes span every
    process (each process holds rows of both). ``num_sampler = 0``: all devices are the learner's.

    Raises:
      ValueError naming ``mesh.sampler`` when it does not divide into the processes or leaves a
      process no learner device.
    """
    devices = list(jax.devices() if devices is None else devices)
    if not num_sampler:
        return devices, []
    by_process: dict[int, list] = {}
    for d in sorted(devices, key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(d.process_index, []).append(d)
    n_proc = len(by_process)
    per = num_sampler // n_proc
    if num_sampler % n_proc or any(per >= len(v) for v in by_process.values()):
        raise ValueError(
            f"mesh.sampler={num_sampler}: must be a multiple of the {n_proc} process(es) and leave "
            f"every process a learner device (devices per process: "
            f"{sorted({len(v) for v in by_process.values()})})"
        )
    learner = [d for v in by_process.values() for d in v[: len(v) - per]]
    return learner, [d for v in by_process.values() for d in v[len(v) - per :]]


def logical_axis_rules(config: Any = None) -> tuple:
    """``config.logical_axis_rules`` if present, else the model's ``DEFAULT_LOGICAL_AXIS_RULES``
    (``check_rules``)."""
    rules = None
    if config is not None:
        rules = (
            config.get("logical_axis_rules")
            if isinstance(config, Mapping) or hasattr(config, "get")
            else None
        )
    return check_rules(rules)


def check_rules(rules: Any = None) -> tuple:
    """Pairs of logical name -> mesh axis / axes / None, validated against ``MESH_AXES``; None (or
    empty) is the model's ``DEFAULT_LOGICAL_AXIS_RULES``."""
    if not rules:
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


def process_local_mesh(mesh: Mesh | None = None) -> Mesh:
    """A mesh over this process's own devices (of ``mesh``, e.g. a sampler's own devices;
    default all of them), all on "data" (a per-process engine's mesh: weights replicated over
    its devices, rows split over them)."""
    me = jax.process_index()
    devices = jax.local_devices() if mesh is None else [
        d for d in mesh.devices.flat if d.process_index == me
    ]  # fmt: skip
    return make_mesh(data=-1, fsdp=1, tensor=1, devices=devices)


def copy_across_processes(params, shardings, source_mesh: Mesh, cast=None):
    """``params`` (global arrays on ``source_mesh``) placed with ``shardings`` (on another mesh,
    e.g. a sampler's, or one process's own devices) when the meshes span several processes: JAX
    reshards across hosts only within one device set, so ``source_mesh`` first gathers a full copy
    on each of its devices (one jitted all-gather, every process takes part), then each process
    copies the slices its target devices hold from one of its own source devices
    (device-to-device within the process) and assembles the target arrays. ``cast``: applied to
    ``params`` inside the all-gather (e.g. to the compute dtype: fewer bytes moved and held)."""
    cast = cast or (lambda p: p)
    full = jax.jit(cast, out_shardings=replicated(source_mesh))(params)

    def place(x, target):
        src = x.addressable_shards[0].data
        index = target.addressable_devices_indices_map(x.shape)
        bufs = [jax.device_put(src[idx], d) for d, idx in index.items()]
        return jax.make_array_from_single_device_arrays(x.shape, target, bufs)

    return jax.tree.map(place, full, shardings)


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
    """Every value of a host batch on the mesh: rows over "batch"'s mesh axes, scalars replicated.

    A host (numpy) value is placed with ``mojax.distributed.put_rows``: each process hands over only
    the rows its devices hold (``jax.make_array_from_process_local_data``); in one process that is
    a ``device_put``. A ``jax.Array`` is moved with ``device_put``.

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
        sh = batch_sharding(mesh, rules, v.ndim)
        if isinstance(v, jax.Array) or distributed.process_count() == 1:
            out[k] = jax.device_put(v, sh)
        else:
            out[k] = distributed.put_rows(v, sh)
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

    Used for the frozen reference params (``mojax.learner.make_logprob_fn(..., offload=True)`` streams them
    to the devices inside the jitted call). Returns ``(tree, offloaded: bool)``.
    """
    leaves = jax.tree.leaves(shardings)
    mesh = leaves[0].mesh if leaves else None
    if mesh is None or host_memory_kind(mesh) is None:
        return jax.device_put(tree, shardings), False
    host = jax.tree.map(lambda s: s.with_memory_kind("pinned_host"), shardings)
    return jax.device_put(tree, host), True


def _mesh_axes(axes) -> tuple[str, ...]:
    return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)


def _split_dims(model_config: Any, rules: Sequence) -> dict[tuple, tuple[str, int, str]]:
    """``(logical name, mesh axes) -> (first param path, its size)`` over every sharded param dim
    (the mesh axes each dim really gets: a mesh axis is used once per array)."""
    from mojax.models import param_logical_axes, param_shapes

    is_spec = lambda x: isinstance(x, PartitionSpec)  # noqa: E731
    specs = jax.tree_util.tree_leaves_with_path(param_logical_axes(model_config), is_leaf=is_spec)
    shapes = jax.tree.leaves(param_shapes(model_config))
    out = {}
    for (path, spec), shape in zip(specs, shapes, strict=True):
        for name, axes, size in zip(spec, nn.logical_to_mesh_axes(spec, rules), shape.shape):
            axes = _mesh_axes(axes)
            if name is not None and axes and (name, axes) not in out:
                where = ".".join(str(getattr(k, "key", k)) for k in path)
                out[(name, axes)] = (int(size), where, tuple(shape.shape))
    return out


def model_divisibility_errors(
    model_config: Any,
    mesh_shape: Mapping[str, int | None],
    rules: Sequence = DEFAULT_LOGICAL_AXIS_RULES,
    *,
    skip: Sequence[str] = (),
) -> list[str]:
    """One line per model dimension that the mesh does not divide, naming ``config.mesh.*``.

    Every parameter dim sharded by ``rules`` (heads, kv heads, vocab, MLP width, hidden size,
    head_dim when a rule shards it, ...) must be a multiple of the product of its mesh axes, or the
    params cannot be placed. ``mesh_shape`` maps mesh axis -> size; a size of None (a ``-1`` axis
    whose device count is not known yet) skips the dims that use it, and so do the logical names in
    ``skip`` (the vocabulary of a tokenizer not built yet).
    """
    errors = []
    for (name, axes), (size, path, shape) in _split_dims(model_config, rules).items():
        sizes = [mesh_shape.get(a) for a in axes]
        if name in skip or any(n is None for n in sizes):
            continue
        n = math.prod(sizes)
        if size % n == 0:
            continue
        keys = " * ".join(f"config.mesh.{a}={mesh_shape[a]}" for a in axes)
        field = MODEL_DIMS.get(name, name)
        hint = ""
        if name == "vocab":
            pad = -(-size // n) * n
            hint = f"; or pad the vocabulary: config.model.overrides.vocab_size={pad}"
        errors.append(
            f"{keys}: the model's {field}={size} (logical axis {name!r}, param {path} "
            f"{list(shape)}) is split {n} ways, and {n} does not divide {size}{hint}"
        )
    return errors


def mesh_errors(
    sizes: Mapping[str, int],
    num_devices: int | str | None,
    model_config: Any = None,
    rules: Sequence | None = None,
    *,
    skip: Sequence[str] = (),
) -> list[str]:
    """Config-time checks of ``config.mesh`` (``sizes``: axis -> size or -1, and ``sampler``): the
    product against ``num_devices`` less the sampler's (``"auto"``: ``jax.device_count()``, every
    process's devices; None: not known, the -1 axis is left unresolved), then
    ``model_divisibility_errors`` of ``model_config`` (None: not known). Lines start with the
    ``config.mesh`` key."""
    sizes, errors = dict(sizes), []
    n_sampler = sizes.pop("sampler", 0)  # the learner's mesh spans the other devices
    if num_devices == "auto":
        try:
            num_devices = len(split_devices(n_sampler)[0])
        except ValueError as e:
            return [f"config.{e}"]
    elif n_sampler and num_devices is not None:
        if n_sampler >= num_devices:
            return [f"config.mesh.sampler={n_sampler}: leaves none of the {num_devices} devices"]
        num_devices -= n_sampler
    resolved = {k: (None if v == -1 else v) for k, v in sizes.items()}
    if num_devices is not None:
        try:
            shape = resolve_mesh_shape(**sizes, num_devices=num_devices)
            resolved = dict(zip(MESH_AXES, shape, strict=True))
        except ValueError as e:
            errors.append(f"config.{e}")
    if model_config is not None:
        rules = DEFAULT_LOGICAL_AXIS_RULES if rules is None else rules
        errors += model_divisibility_errors(model_config, resolved, rules, skip=skip)
    return errors


def check_model_divides(model_config: Any, mesh: Mesh, rules: Sequence) -> None:
    """Raises ``ConfigError`` (``model_divisibility_errors``) if ``mesh`` does not divide the model.

    Called where the run's model config is first known (the jitted steps), before any array is
    placed, so an indivisible mesh is one line naming the key instead of JAX's IndivisibleError.
    """
    errors = model_divisibility_errors(model_config, dict(mesh.shape), rules)
    if errors:
        raise ConfigError.of(errors)


def bytes_per_device(tree) -> int:
    """Bytes of ``tree``'s leaves on one device (their shard shapes)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total
