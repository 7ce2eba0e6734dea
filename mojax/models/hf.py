"""Hugging Face checkpoints in and out: ``from_pretrained`` and ``save_pretrained``.

Every mojax parameter maps to HF tensors by a ``TensorMap``: the HF names (one per layer when layers
are scanned and stacked on a leading L axis), whether the HF ``[out, in]`` matrix is transposed, and
how the (transposed) HF axes split into mojax axes (e.g. ``q_proj.weight [H*D, E]`` -> ``[E, H,
D]``). The same map drives loading (with slice reads for sharded placement) and saving, so both
directions are checked against one table.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from typing import Any

import jax
import numpy as np
from flax import traverse_util

from mojax.models import safetensors_io
from mojax.models.config import QwenConfig
from mojax.models.qwen import QwenModel, init_params, param_shapes
from mojax.models.variants import VARIANTS, get_variant

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """How one mojax parameter is laid out in the HF checkpoint.

    Attributes:
      hf_names: HF tensor names; one per layer when ``stacked`` (mojax axis 0 is the layer).
      hf_shape: shape of each HF tensor.
      transpose: the 2-D HF tensor is transposed before the reshape (HF Linear stores ``[out,
        in]``).
      groups: number of mojax axes each (transposed) HF axis splits into, e.g. ``(1, 2)`` for
        ``[E, H*D] -> [E, H, D]``.
      shape: mojax per-layer shape.
    """

    hf_names: tuple[str, ...]
    hf_shape: tuple[int, ...]
    transpose: bool
    groups: tuple[int, ...]
    shape: tuple[int, ...]
    stacked: bool

    def to_mojax(self, hf: np.ndarray) -> np.ndarray:
        return (hf.T if self.transpose else hf).reshape(self.shape)

    def to_hf(self, ours: np.ndarray) -> np.ndarray:
        t_shape = self.hf_shape[::-1] if self.transpose else self.hf_shape
        flat = ours.reshape(t_shape)
        return np.ascontiguousarray(flat.T if self.transpose else flat)

    def read_slice(self, get, idx: tuple[slice, ...]) -> np.ndarray:
        """Reads ``ours[idx]`` touching only the HF rows/cols it needs (``get(name)`` -> memmap)."""
        if self.stacked:
            layers = range(len(self.hf_names))[idx[0]]
            return np.stack([self._read_layer(get(self.hf_names[i]), idx[1:]) for i in layers])
        return self._read_layer(get(self.hf_names[0]), idx)

    def _read_layer(self, hf: np.ndarray, idx: tuple[slice, ...]) -> np.ndarray:
        idx = tuple(idx) + (slice(None),) * (len(self.shape) - len(idx))
        hf_slices, inner, pos = [], [], 0
        grouped_shape = []
        for g in self.groups:
            start, stop, _ = idx[pos].indices(self.shape[pos])
            inner_size = math.prod(self.shape[pos + 1 : pos + g])
            hf_slices.append(slice(start * inner_size, stop * inner_size))
            grouped_shape += [stop - start, *self.shape[pos + 1 : pos + g]]
            inner += [slice(None), *idx[pos + 1 : pos + g]]
            pos += g
        if self.transpose:
            part = np.asarray(hf[tuple(hf_slices[::-1])]).T
        else:
            part = np.asarray(hf[tuple(hf_slices)])
        return part.reshape(grouped_shape)[tuple(inner)]


def tensor_maps(config: QwenConfig) -> dict[tuple[str, ...], TensorMap]:
    """Flattened mojax param path -> ``TensorMap``, for every parameter of ``config``."""
    e, f, h, k, d = (
        config.hidden_size,
        config.intermediate_size,
        config.num_heads,
        config.num_kv_heads,
        config.head_dim,
    )
    v, n_layers = config.vocab_size, config.num_layers
    # per-layer: (mojax sub-path, HF suffix, hf_shape, transpose, groups, mojax shape)
    per_layer = [
        (("input_layernorm", "scale"), "input_layernorm.weight", (e,), False, (1,), (e,)),
        (("post_attention_layernorm", "scale"), "post_attention_layernorm.weight", (e,), False,
         (1,), (e,)),
        (("self_attn", "q_proj", "kernel"), "self_attn.q_proj.weight", (h * d, e), True, (1, 2),
         (e, h, d)),
        (("self_attn", "k_proj", "kernel"), "self_attn.k_proj.weight", (k * d, e), True, (1, 2),
         (e, k, d)),
        (("self_attn", "v_proj", "kernel"), "self_attn.v_proj.weight", (k * d, e), True, (1, 2),
         (e, k, d)),
        (("self_attn", "o_proj", "kernel"), "self_attn.o_proj.weight", (e, h * d), True, (2, 1),
         (h, d, e)),
        (("mlp", "gate_proj", "kernel"), "mlp.gate_proj.weight", (f, e), True, (1, 1), (e, f)),
        (("mlp", "up_proj", "kernel"), "mlp.up_proj.weight", (f, e), True, (1, 1), (e, f)),
        (("mlp", "down_proj", "kernel"), "mlp.down_proj.weight", (e, f), True, (1, 1), (f, e)),
    ]  # fmt: skip
    if config.qkv_bias:
        per_layer += [
            (("self_attn", "q_proj", "bias"), "self_attn.q_proj.bias", (h * d,), False, (2,),
             (h, d)),
            (("self_attn", "k_proj", "bias"), "self_attn.k_proj.bias", (k * d,), False, (2,),
             (k, d)),
            (("self_attn", "v_proj", "bias"), "self_attn.v_proj.bias", (k * d,), False, (2,),
             (k, d)),
        ]  # fmt: skip
    if config.qk_norm:
        per_layer += [
            (("self_attn", "q_norm", "scale"), "self_attn.q_norm.weight", (d,), False, (1,), (d,)),
            (("self_attn", "k_norm", "scale"), "self_attn.k_norm.weight", (d,), False, (1,), (d,)),
        ]
    maps = {
        ("embed_tokens",): TensorMap(
            ("model.embed_tokens.weight",), (v, e), False, (1, 1), (v, e), False
        ),
        ("norm", "scale"): TensorMap(("model.norm.weight",), (e,), False, (1,), (e,), False),
    }
    if not config.tie_word_embeddings:
        maps[("lm_head",)] = TensorMap(("lm_head.weight",), (v, e), False, (1, 1), (v, e), False)
    for sub, suffix, hf_shape, transpose, groups, shape in per_layer:
        names = tuple(f"model.layers.{i}.{suffix}" for i in range(n_layers))
        if config.scan_layers:
            maps[("layers", *sub)] = TensorMap(names, hf_shape, transpose, groups, shape, True)
        else:
            for i, name in enumerate(names):
                maps[(f"layers_{i}", *sub)] = TensorMap(
                    (name,), hf_shape, transpose, groups, shape, False
                )
    return maps


# --------------------------------------------------------------------------------------------------
# loading


def open_checkpoint(path: str) -> dict[str, safetensors_io.SafetensorsFile]:
    """HF tensor name -> the file holding it (single file or sharded with an index)."""
    index_path = os.path.join(path, _INDEX)
    if os.path.isfile(index_path):
        with open(index_path) as fh:
            try:
                weight_map = json.load(fh)["weight_map"]
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
                raise ValueError(
                    f"{index_path}: not a safetensors index (needs a JSON object with a "
                    f"'weight_map'): {type(err).__name__}: {err}"
                ) from None
        for f in sorted(set(weight_map.values())):
            if not os.path.isfile(os.path.join(path, f)):
                raise FileNotFoundError(f"{index_path} lists {f}, which is not in {path}")
        files = {
            f: safetensors_io.SafetensorsFile(os.path.join(path, f))
            for f in set(weight_map.values())
        }
        out = {}
        for name, fname in weight_map.items():
            if name not in files[fname].names:
                raise ValueError(f"{index_path} maps {name!r} to {fname}, which does not hold it")
            out[name] = files[fname]
        return out
    single = os.path.join(path, _SINGLE)
    if not os.path.isfile(single):
        raise FileNotFoundError(
            f"no {_SINGLE} or {_INDEX} in {path!r} (only safetensors checkpoints are supported)"
        )
    f = safetensors_io.SafetensorsFile(single)
    return {name: f for name in f.names}


def check_checkpoint(config: QwenConfig, files: dict) -> None:
    """Raises a ValueError naming the checkpoint and every missing, unexpected or mis-shaped tensor
    (with the file holding it)."""
    maps = tensor_maps(config)
    expected = {n: m.hf_shape for m in maps.values() for n in m.hf_names}
    allowed_extra = {"lm_head.weight"} if config.tie_word_embeddings else set()
    missing = sorted(set(expected) - set(files))
    extra = sorted(set(files) - set(expected) - allowed_extra)
    bad_shape = [
        f"{n} (in {files[n].path}): checkpoint {files[n].shape(n)} != expected {expected[n]}"
        for n in sorted(set(expected) & set(files))
        if files[n].shape(n) != tuple(expected[n])
    ]
    if config.tie_word_embeddings and "lm_head.weight" in files:
        got = files["lm_head.weight"].shape("lm_head.weight")
        want = (config.vocab_size, config.hidden_size)
        if got != want:
            where = files["lm_head.weight"].path
            bad_shape.append(f"lm_head.weight (in {where}): checkpoint {got} != expected {want}")
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing}")
    if extra:
        problems.append(f"unexpected tensors: {extra}")
    if bad_shape:
        problems.append(f"mis-shaped tensors: {bad_shape}")
    if problems:
        where = sorted({os.path.dirname(f.path) for f in files.values()}) or ["(no tensors)"]
        raise ValueError(
            f"checkpoint {', '.join(where)} does not match the model config: " + "; ".join(problems)
        )


def load_params(path: str, config: QwenConfig, shardings: Any = None) -> Any:
    """Reads and checks the HF tensors of ``path`` into the mojax param pytree of ``config``.

    Args:
      path: checkpoint directory.
      config: the model config (``scan_layers`` decides stacking, ``param_dtype`` the dtype).
      shardings: optional pytree of ``jax.sharding.Sharding`` (e.g. from ``param_shardings``);
        each array is then built by ``jax.make_array_from_callback`` from slice reads of the
        memmapped file, so no host ever holds a second full copy of a sharded tensor.
    """
    files = open_checkpoint(path)
    check_checkpoint(config, files)
    maps = tensor_maps(config)
    dtype = np.dtype(config.jnp_param_dtype)
    flat_shardings = traverse_util.flatten_dict(shardings) if shardings is not None else {}
    out = {}
    for key, m in maps.items():

        def get(name):
            return files[name].get(name)

        full_shape = ((len(m.hf_names),) if m.stacked else ()) + m.shape
        if key in flat_shardings:

            def callback(idx, m=m, get=get):
                return m.read_slice(get, tuple(idx)).astype(dtype)

            out[key] = jax.make_array_from_callback(full_shape, flat_shardings[key], callback)
        else:
            full = tuple(slice(None) for _ in full_shape)
            out[key] = jax.device_put(m.read_slice(get, full).astype(dtype))
    return traverse_util.unflatten_dict(out)


def from_pretrained(
    path_or_variant: str | os.PathLike,
    dtype: Any = "float32",
    *,
    param_dtype: Any = None,
    scan_layers: bool = True,
    remat: str = "none",
    shardings: Any = None,
    mesh: Any = None,
    rules: Any = None,
    seed: int = 0,
) -> QwenModel:
    """A ``QwenModel`` from an HF checkpoint directory, or a variant name (random init).

    Args:
      path_or_variant: directory with ``config.json`` + safetensors, or a name in ``VARIANTS``.
      dtype: compute dtype (``"float32"``, ``"bfloat16"``); logits stay fp32.
      param_dtype: parameter dtype; defaults to ``dtype``.
      scan_layers: stack layers and ``nn.scan`` over them (see ``QwenConfig``).
      remat: ``"none"``, ``"full"`` or ``"dots"``.
      shardings: pytree of shardings for the params; or give ``mesh`` (and optional ``rules``,
        default ``DEFAULT_LOGICAL_AXIS_RULES``) to derive them from the logical axis names.
      seed: init seed for variants.
    """
    from mojax.models.qwen import DEFAULT_LOGICAL_AXIS_RULES, param_shardings

    dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    param_dtype = dtype if param_dtype is None else param_dtype
    param_dtype = np.dtype(param_dtype).name if not isinstance(param_dtype, str) else param_dtype
    opts = dict(dtype=dtype, param_dtype=param_dtype, scan_layers=scan_layers, remat=remat)
    name = os.fspath(path_or_variant)
    is_dir = os.path.isdir(name)
    if not is_dir and name not in VARIANTS:
        raise ValueError(
            f"path_or_variant={name!r} is neither a checkpoint directory nor a variant "
            f"({sorted(VARIANTS)})"
        )
    config = QwenConfig.from_hf(name, **opts) if is_dir else get_variant(name, **opts)
    if shardings is None and mesh is not None:
        shardings = param_shardings(config, mesh, rules or DEFAULT_LOGICAL_AXIS_RULES)
    if is_dir:
        params = load_params(name, config, shardings)
    else:
        params = init_params(config, jax.random.key(seed), shardings)
    return QwenModel(config=config, params=params)


# --------------------------------------------------------------------------------------------------
# saving


#: Files copied by ``save_pretrained(..., tokenizer_dir=...)`` so the output serves as-is.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "generation_config.json",
)


def save_pretrained(
    model: QwenModel,
    out_dir: str | os.PathLike,
    *,
    dtype: Any = None,
    max_shard_bytes: int = 5 << 30,
    tokenizer_dir: str | os.PathLike | None = None,
) -> None:
    """Writes ``config.json`` and HF-format safetensors (sharded with an index above
    ``max_shard_bytes``).

    Args:
      model: the model to save (params may be sharded; they are gathered tensor by tensor).
      out_dir: created if needed.
      dtype: dtype of the saved tensors; defaults to the params' dtype.
      max_shard_bytes: size above which tensors go to numbered shards plus an index file.
      tokenizer_dir: if given, its tokenizer (and generation config) files are copied along, so
        transformers / vLLM can serve ``out_dir`` unchanged.
    """
    config = model.config
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    flat = traverse_util.flatten_dict(model.params)
    maps = tensor_maps(config)
    if set(flat) != set(maps):
        raise ValueError(
            f"params do not match the config: missing {sorted(set(maps) - set(flat))}, "
            f"unexpected {sorted(set(flat) - set(maps))}"
        )
    shards, current, size = [], {}, 0
    for key, m in maps.items():
        arr = np.asarray(jax.device_get(flat[key]))
        if dtype is not None:
            arr = arr.astype(np.dtype(dtype))
        layers = [arr[i] for i in range(arr.shape[0])] if m.stacked else [arr]
        for name, ours in zip(m.hf_names, layers):
            t = m.to_hf(ours)
            if current and size + t.nbytes > max_shard_bytes:
                shards.append(current)
                current, size = {}, 0
            current[name] = t
            size += t.nbytes
    shards.append(current)
    hf_config = config.to_hf_dict()
    saved_dtype = np.dtype(dtype).name if dtype is not None else config.param_dtype
    hf_config["torch_dtype"] = saved_dtype
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(hf_config, fh, indent=2)
    if tokenizer_dir is not None:
        copied = 0
        for fname in TOKENIZER_FILES:
            src = os.path.join(os.fspath(tokenizer_dir), fname)
            if os.path.isfile(src):
                shutil.copyfile(src, os.path.join(out_dir, fname))
                copied += 1
        if not copied:
            raise FileNotFoundError(
                f"tokenizer_dir={tokenizer_dir!r} has none of {TOKENIZER_FILES}"
            )
    if len(shards) == 1:
        safetensors_io.save_file(shards[0], os.path.join(out_dir, _SINGLE))
        return
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors_io.save_file(shard, os.path.join(out_dir, fname))
        for name, t in shard.items():
            weight_map[name] = fname
            total += t.nbytes
    with open(os.path.join(out_dir, _INDEX), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=2)


def param_count(config: QwenConfig) -> int:
    """Parameters of ``config`` from ``jax.eval_shape`` (no memory)."""
    return sum(math.prod(x.shape) for x in jax.tree.leaves(param_shapes(config)))
