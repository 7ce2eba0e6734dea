"""LoRA and QLoRA adapters of the Qwen port's projections: config, quantised base, split and merge.

LoRA (Hu et al. 2021, arXiv:2106.09685): a targeted projection ``y = x W`` becomes
``y = x W + (alpha / r) · dropout(x) A B`` with ``A [in, r]`` (uniform, ``1/sqrt(in)`` bound, as
PEFT's ``kaiming_uniform(a=√5)``) and ``B [r, out]`` (zeros), so training starts at the base
model. QLoRA (Dettmers et al. 2023, arXiv:2305.14314): the frozen base kernels of every
projection are stored quantised in blocks of ``block`` input rows, ``nf4`` (the 16 NormalFloat-4
levels, two codes per byte) or ``int8`` (symmetric absmax), with one fp32 absmax per block and
output column, and dequantised inside the layer that uses them (one layer at a time).

The parameter tree of a config with ``lora`` set holds, per projection, ``kernel`` (or
``kernel_q`` + ``kernel_scale`` when quantised) and, per targeted projection, ``lora_a`` /
``lora_b``. :func:`split` separates the trainable adapters (``lora_*`` leaves) from the frozen base;
:func:`merge` puts them back together; :func:`base_from_dense` builds the base from dense weights
(quantising them); :func:`merged_dense` folds the adapters into dense kernels ``W + s A B`` for an
HF export. Shapes: a kernel ``[in..., out...]`` (e.g. q_proj ``[E, H, D]``), ``A [in..., r]``,
``B [r, out...]``, ``n_in`` / ``n_out`` the products of the in / out dims.

Why not qwix: ``qwix.apply_lora_to_model`` (qwix 0.1.8, ``LoraProvider`` rules matching
``q_proj|v_proj|gate_proj``) runs on the port's ``Qwen`` module but adds no adapter: the port's
projections (``mojax.models.layers.Projection``) reshape to a 2-D ``lax.dot_general`` instead of
calling ``nn.Dense`` or an einsum, which is what its provider rewrites; its params tree comes back
without a ``lora_*`` leaf. Owning the adapters also gives the quantised base, the split / merge the
optimizer and the sampler need, and the PEFT export in one place.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
QUANT = ("none", "nf4", "int8")
#: the NF4 levels (QLoRA, arXiv:2305.14314, App. E), ascending
NF4 = np.array(
    [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
     -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
     0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
     0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0],
    np.float32,
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """The adapters of a model config (hashable: part of ``QwenConfig.lora``).

    Attributes:
      rank: r. alpha: the scale numerator (``scale = alpha / r``). dropout: on the adapter's input
      (training only). targets: projection names that get adapters. quant: the frozen base's
      storage (``"none"``, ``"nf4"``, ``"int8"``). block: input rows per quantisation block.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple = PROJECTIONS
    quant: str = "none"
    block: int = 64

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))
        if self.rank < 1:
            raise ValueError(f"lora rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora dropout must be in [0, 1), got {self.dropout}")
        bad = [t for t in self.targets if t not in PROJECTIONS]
        if bad or not self.targets:
            raise ValueError(f"lora targets {list(self.targets)}: each one of {PROJECTIONS}")
        if self.quant not in QUANT:
            raise ValueError(f"lora quant={self.quant!r} is not one of {QUANT}")
        if self.block < 1:
            raise ValueError(f"lora block must be >= 1, got {self.block}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def block_rows(n_in: int, block: int) -> int:
    """Rows per quantisation block of an ``n_in``-row kernel (``block`` when it divides, else all)."""
    return block if n_in % block == 0 else n_in


def quantize(w: jax.Array, quant: str, block: int) -> tuple[jax.Array, jax.Array]:
    """``(codes, scale)`` of a 2-D kernel ``w [n_in, n_out]``: int8 codes ``[n_in, n_out]`` or nf4
    codes packed two per byte ``uint8 [n_in, n_out / 2]``, fp32 absmax ``[n_in / block, n_out]``."""
    n_in, n_out = w.shape
    rows = block_rows(n_in, block)
    blocks = w.astype(jnp.float32).reshape(n_in // rows, rows, n_out)
    absmax = jnp.max(jnp.abs(blocks), axis=1)  # [n_in / rows, n_out]
    safe = jnp.where(absmax > 0, absmax, 1.0)[:, None, :]
    x = (blocks / safe).reshape(n_in, n_out)
    if quant == "int8":
        return jnp.round(x * 127.0).astype(jnp.int8), absmax
    idx = jnp.argmin(jnp.abs(x[..., None] - jnp.asarray(NF4)), axis=-1).astype(jnp.uint8)
    return (idx[:, 0::2] | (idx[:, 1::2] << 4)).astype(jnp.uint8), absmax


def dequantize(codes: jax.Array, scale: jax.Array, quant: str, dtype) -> jax.Array:
    """The 2-D kernel ``[n_in, n_out]`` (``dtype``) of :func:`quantize`'s output."""
    if quant == "int8":
        x = codes.astype(jnp.float32) / 127.0
    else:
        lo, hi = codes & 0xF, codes >> 4
        idx = jnp.stack([lo, hi], axis=-1).reshape(codes.shape[0], -1)
        x = jnp.asarray(NF4)[idx.astype(jnp.int32)]
    n_in, n_out = x.shape
    rows = n_in // scale.shape[0]
    w = x.reshape(scale.shape[0], rows, n_out) * scale[:, None, :]
    return w.reshape(n_in, n_out).astype(dtype)


def _is_adapter(path) -> bool:
    return str(getattr(path[-1], "key", path[-1])).startswith("lora_")


def split(params: Any) -> tuple[Any, Any]:
    """``(base, adapters)``: the frozen leaves and the ``lora_*`` leaves, as nested dicts."""

    def part(tree, keep):
        out = {}
        for k, v in tree.items():
            if isinstance(v, dict):
                sub = part(v, keep)
                if sub:
                    out[k] = sub
            elif keep(k):
                out[k] = v
        return out

    return part(params, lambda k: not k.startswith("lora_")), part(
        params, lambda k: k.startswith("lora_")
    )


def merge(base: Any, adapters: Any) -> Any:
    """The full parameter tree: ``base`` and ``adapters`` (disjoint leaves) in one nested dict."""
    out = dict(base)
    for k, v in adapters.items():
        out[k] = merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def _projection_dicts(tree: Any, path=()):
    """``(path, dict)`` of every projection's parameter dict in a (sub)tree."""
    for k, v in tree.items():
        if isinstance(v, dict):
            if k in PROJECTIONS:
                yield path + (k,), v
            else:
                yield from _projection_dicts(v, path + (k,))


def base_from_dense(config: Any, dense: Any) -> Any:
    """The frozen base of ``config`` (``config.lora`` set) from a dense (non-LoRA) parameter tree:
    the same tree, each projection's kernel quantised when ``quant`` is not ``"none"``. Pure."""
    lora = config.lora
    if lora.quant == "none":
        return dense
    out = jax.tree.map(lambda x: x, dense)  # a fresh nested-dict copy of the structure
    for path, proj in _projection_dicts(out):
        kernel = proj.pop("kernel")
        stacked = config.scan_layers and path[0] == "layers"
        n_in = _n_in(path[-1], config)
        lead = kernel.shape[:1] if stacked else ()
        w = kernel.reshape(*lead, n_in, -1)
        fn = lambda m: quantize(m, lora.quant, lora.block)
        codes, scale = jax.vmap(fn)(w) if stacked else fn(w)
        proj["kernel_q"], proj["kernel_scale"] = codes, scale
    return out


def _n_in(name: str, config: Any) -> int:
    """Input width of projection ``name``."""
    if name == "o_proj":
        return config.num_heads * config.head_dim
    if name == "down_proj":
        return config.intermediate_size
    return config.hidden_size


def dense_kernel(config: Any, proj: dict, name: str, stacked: bool) -> jax.Array:
    """The dense base kernel of one projection's params (dequantised when stored quantised), in
    its 2-D ``[(L,) n_in, n_out]`` form."""
    n_in = _n_in(name, config)
    if "kernel" in proj:
        k = proj["kernel"]
        return k.reshape(*(k.shape[:1] if stacked else ()), n_in, -1)
    fn = lambda c, s: dequantize(c, s, config.lora.quant, jnp.float32)
    return (jax.vmap(fn) if stacked else fn)(proj["kernel_q"], proj["kernel_scale"])


def merged_dense(config: Any, params: Any, kernel_shapes: Any) -> Any:
    """A dense (non-LoRA) tree ``W + (alpha / r) A B`` from a LoRA tree (``params``: base and
    adapters merged); ``kernel_shapes``: the dense tree's shapes (``param_shapes`` of the config
    without ``lora``) for each kernel's own shape. Pure (jit it for large models)."""
    return _merge_tree(config, params, kernel_shapes, ())


def _merge_tree(config, tree, shapes, path):
    out = {}
    for k, v in tree.items():
        if not isinstance(v, dict):
            out[k] = v
        elif k in PROJECTIONS:
            stacked = config.scan_layers and path[:1] == ("layers",)
            w = dense_kernel(config, v, k, stacked)
            if "lora_a" in v:
                a, b = v["lora_a"], v["lora_b"]
                lead = a.shape[:1] if stacked else ()
                r = config.lora.rank
                a2 = a.reshape(*lead, -1, r).astype(jnp.float32)
                b2 = b.reshape(*lead, r, -1).astype(jnp.float32)
                w = w.astype(jnp.float32) + config.lora.scale * (a2 @ b2)
            shape = shapes[k]["kernel"].shape
            dtype = shapes[k]["kernel"].dtype
            proj = {"kernel": w.reshape(shape).astype(dtype)}
            if "bias" in v:
                proj["bias"] = v["bias"]
            out[k] = proj
        else:
            out[k] = _merge_tree(config, v, shapes[k], path + (k,))
    return out


def init_adapters(config: Any, key: jax.Array, shapes: Any) -> Any:
    """Fresh adapters of ``config``: ``lora_a`` uniform in ``±1/sqrt(n_in)``, ``lora_b`` zeros;
    ``shapes``: the config's parameter shapes (``mojax.models.param_shapes``)."""
    _, shapes = split(shapes)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes)
    keys = jax.random.split(key, max(1, len(leaves)))
    out = []
    for (path, leaf), k in zip(leaves, keys):
        name = str(getattr(path[-1], "key", path[-1]))
        proj = str(getattr(path[-2], "key", path[-2]))
        if name == "lora_b":
            out.append(jnp.zeros(leaf.shape, leaf.dtype))
        else:
            bound = 1.0 / math.sqrt(_n_in(proj, config))
            out.append(jax.random.uniform(k, leaf.shape, leaf.dtype, -bound, bound))
    return jax.tree_util.tree_unflatten(treedef, out)
