"""``QwenConfig``: one frozen, hashable description of a Qwen2 / Qwen2.5 / Qwen3 decoder.

The config is static under ``jit`` (it is hashed), so every field is an immutable Python value; the
HF ``rope_scaling`` dict is stored as a sorted tuple of ``(key, value)`` pairs.

Two families differ only in the attention block:

* ``qwen2`` (Qwen2, Qwen2.5, Qwen2.5-Math): biases on the q/k/v projections, no q/k norm.
* ``qwen3``: no q/k/v bias, RMSNorm over the head dimension of q and k (``q_norm`` / ``k_norm``),
and a
  ``head_dim`` set independently of ``hidden_size / num_heads``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

#: HF ``architectures`` entries and ``model_type`` values this port implements.
SUPPORTED_ARCHITECTURES = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
SUPPORTED_ROPE_TYPES = ("default", "yarn")
_DTYPES = ("float32", "bfloat16", "float16")
_REMAT = ("none", "full", "dots")

# HF config.json keys that carry no information for this port (training/serving knobs, bookkeeping).
_IGNORED_HF_KEYS = {
    "_name_or_path",
    "architectures",
    "model_type",
    "attention_dropout",
    "hidden_act",
    "initializer_range",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "use_cache",
    "max_window_layers",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "use_mrope",
    "quantization_config",
    # generic PreTrainedConfig bookkeeping (transformers 4.x and 5.x to_dict())
    "chunk_size_feed_forward",
    "id2label",
    "label2id",
    "is_encoder_decoder",
    "is_decoder",
    "output_attentions",
    "output_hidden_states",
    "problem_type",
    "return_dict",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "pruned_heads",
    "tie_encoder_decoder",
    "add_cross_attention",
    "cross_attention_hidden_size",
    "tokenizer_class",
    "prefix",
    "sep_token_id",
    "decoder_start_token_id",
    "task_specific_params",
    "finetuning_task",
}


@dataclasses.dataclass(frozen=True)
class QwenConfig:
    """Shapes, numerics and execution options of a Qwen decoder.

    Attributes:
      model_type: ``"qwen2"`` or ``"qwen3"`` (selects QKV bias vs q/k norm, and the HF
        architecture).
      vocab_size: V.
      hidden_size: E.
      intermediate_size: SwiGLU hidden width F.
      num_layers: L.
      num_heads: H query heads.
      num_kv_heads: K key/value heads (H % K == 0; K == H is MHA, K == 1 is MQA).
      head_dim: D (Qwen3 sets it independently of E / H).
      rms_norm_eps: epsilon inside every RMSNorm.
      rope_theta: RoPE base.
      rope_scaling: HF ``rope_scaling`` dict as sorted ``(key, value)`` pairs; ``()`` for plain
        RoPE.
      max_position_embeddings: written back to config.json; YaRN uses it as a default.
      tie_word_embeddings: share the input embedding with the output projection.
      qkv_bias: bias on q/k/v projections (True for qwen2).
      qk_norm: RMSNorm over D on q and k before RoPE (True for qwen3).
      initializer_range: std of the normal init used for random (variant) weights.
      bos_token_id, eos_token_id, pad_token_id: copied to and from config.json.
      dtype: compute dtype of activations and matmuls (logits and softmaxes are always fp32).
      param_dtype: storage dtype of the parameters.
      scan_layers: stack the L layers on a leading ``"layers"`` axis and ``nn.scan`` over them
        (constant compile time in L); False unrolls them as ``layers_0 .. layers_{L-1}``.
      remat: ``"none"``, ``"full"`` (save nothing inside a layer) or ``"dots"`` (save matmul
        outputs).
      layouts: the execution layouts of the hot paths (``mojax.models.layouts.Layouts``), set when a
        sampler or learner is built; None runs the portable layouts. Not part of ``config.json``.
      real_vocab_size: ids ``>= real_vocab_size`` are padding rows of a vocabulary padded for
        sharding (a self-built tokenizer's, ``mojax.spec.model_config``): their logits are
        ``PADDING_LOGIT``, so they are never sampled and take no probability mass in the sampler's
        or the learner's log-softmax. None: every id is a token. Not part of ``config.json``
        (``mojax.models.without_padding_rows`` drops the rows for an HF export).
      lora: LoRA / QLoRA adapters on the projections (``mojax.models.lora.LoraConfig``; None = a
        dense model). Not part of ``config.json``.
      fused_projections: the params hold each layer's q/k/v kernels as one ``qkv_proj`` and its
        gate/up kernels as one ``gate_up_proj`` (``mojax.models.fused``: a decode-time layout, one
        matmul launch where there were three and two). Not part of ``config.json``.
    """

    model_type: str = "qwen3"
    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_layers: int = 28
    num_heads: int = 16
    num_kv_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: tuple = ()
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True
    qkv_bias: bool = False
    qk_norm: bool = True
    initializer_range: float = 0.02
    bos_token_id: int | None = 151643
    eos_token_id: int | tuple | None = 151645
    pad_token_id: int | None = None
    dtype: str = "float32"
    param_dtype: str = "float32"
    scan_layers: bool = True
    remat: str = "none"
    layouts: Any = None
    real_vocab_size: int | None = None
    lora: Any = None
    fused_projections: bool = False

    def __post_init__(self):
        if self.model_type not in SUPPORTED_ARCHITECTURES.values():
            raise ValueError(
                f"model_type={self.model_type!r} is not supported; "
                f"expected one of {sorted(SUPPORTED_ARCHITECTURES.values())}"
            )
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_kv_heads <= 0 or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.real_vocab_size is not None and not 0 < self.real_vocab_size <= self.vocab_size:
            raise ValueError(
                f"real_vocab_size={self.real_vocab_size} must be in [1, vocab_size="
                f"{self.vocab_size}]"
            )
        if self.head_dim <= 0 or self.head_dim % 2:
            raise ValueError(f"head_dim must be a positive even number, got {self.head_dim}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"{name}={getattr(self, name)!r}; expected one of {_DTYPES}")
        if self.remat not in _REMAT:
            raise ValueError(f"remat={self.remat!r}; expected one of {_REMAT}")
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", _freeze(self.rope_scaling))
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))
        rope_type = self.rope_scaling_dict.get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope_scaling type {rope_type!r} is not supported; expected one of "
                f"{SUPPORTED_ROPE_TYPES}"
            )
        if rope_type == "yarn" and "factor" not in self.rope_scaling_dict:
            raise ValueError("rope_scaling of type 'yarn' needs a 'factor'")

    # ----------------------------------------------------------------------------------------------
    @property
    def rope_scaling_dict(self) -> dict[str, Any]:
        """``rope_scaling`` as a dict with ``rope_type`` normalised (HF accepts ``type`` too)."""
        d = dict(self.rope_scaling)
        if "type" in d and "rope_type" not in d:
            d["rope_type"] = d.pop("type")
        d.pop("type", None)
        return d

    @property
    def architecture(self) -> str:
        return {v: k for k, v in SUPPORTED_ARCHITECTURES.items()}[self.model_type]

    @property
    def jnp_dtype(self):
        import jax.numpy as jnp

        return jnp.dtype(self.dtype)

    @property
    def jnp_param_dtype(self):
        import jax.numpy as jnp

        return jnp.dtype(self.param_dtype)

    def replace(self, **kwargs) -> QwenConfig:
        """A copy with some fields changed (e.g. ``dtype``, ``scan_layers``, ``remat``)."""
        unknown = set(kwargs) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"QwenConfig has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **kwargs)

    def num_params(self) -> int:
        """Parameter count from the shapes alone (equals transformers' ``num_parameters()``)."""
        e, f, h, k, d = (
            self.hidden_size,
            self.intermediate_size,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
        )
        attn = e * h * d + 2 * e * k * d + h * d * e
        if self.qkv_bias:
            attn += h * d + 2 * k * d
        if self.qk_norm:
            attn += 2 * d
        layer = attn + 3 * e * f + 2 * e
        embed = self.vocab_size * e * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + embed + e

    # ----------------------------------------------------------------------------------------------
    @classmethod
    def from_hf(
        cls, path_or_dict: str | os.PathLike | dict, *, strict: bool = True, **overrides
    ) -> QwenConfig:
        """Builds the config from an HF ``config.json`` (a file, a checkpoint dir, or its dict).

        Args:
          path_or_dict: checkpoint directory, path of ``config.json``, or the parsed dict.
          strict: raise on config.json keys this port does not know (False: ignore them).
          **overrides: execution fields to set (``dtype``, ``param_dtype``, ``scan_layers``,
          ``remat``).

        Raises:
          ValueError: for an unsupported architecture / model_type / rope type, sliding-window
            attention, or (``strict``) an unknown key (named), so a config is never half-understood.
        """
        hf = _read_hf(path_or_dict)
        _check_hf(hf, strict)
        heads = int(hf["num_attention_heads"])
        qwen3 = hf["model_type"] == "qwen3"
        rope_theta, rope_scaling = _hf_rope(hf)
        kw = dict(
            model_type=hf["model_type"],
            vocab_size=int(hf["vocab_size"]),
            hidden_size=int(hf["hidden_size"]),
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope_theta),
            rope_scaling=_freeze(rope_scaling),
            max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", not qwen3)),
            qkv_bias=bool(hf.get("attention_bias", False)) if qwen3 else True,
            qk_norm=qwen3,
            initializer_range=float(hf.get("initializer_range", 0.02)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=hf.get("eos_token_id"),
            pad_token_id=hf.get("pad_token_id"),
        )
        if qwen3 and kw["qkv_bias"]:
            raise ValueError("attention_bias=True for qwen3 is not supported (no release uses it)")
        kw.update(overrides)
        return cls(**kw)

    def to_hf_dict(self) -> dict[str, Any]:
        """The ``config.json`` dict transformers (>= 4.37, incl. 5.x) and vLLM load as-is.

        Uses the long-standing ``rope_theta`` / ``rope_scaling`` keys, which newer transformers
        converts to ``rope_parameters`` itself.
        """
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        out = {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling_dict or None,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "initializer_range": self.initializer_range,
            "attention_dropout": 0.0,
            "use_cache": True,
            "use_sliding_window": False,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "torch_dtype": self.param_dtype,
        }
        if self.model_type == "qwen3" or self.head_dim != self.hidden_size // self.num_heads:
            out["head_dim"] = self.head_dim
        if self.model_type == "qwen3":
            out["attention_bias"] = False
        if self.pad_token_id is not None:
            out["pad_token_id"] = self.pad_token_id
        return out


def _freeze(d: dict) -> tuple:
    """A dict of JSON scalars as a sorted tuple of pairs (hashable, so the config stays static)."""
    items = []
    for k, v in sorted(dict(d).items()):
        if isinstance(v, list):
            v = tuple(v)
        if isinstance(v, np.generic):
            v = v.item()
        items.append((k, v))
    return tuple(items)


# HF config.json keys this port reads.
_READ_HF_KEYS = {
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "max_position_embeddings",
    "tie_word_embeddings",
    "attention_bias",
}


def _read_hf(path_or_dict: str | os.PathLike | dict) -> dict[str, Any]:
    """The ``config.json`` dict of a checkpoint directory, a ``config.json`` path or a dict."""
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict)
    path = os.fspath(path_or_dict)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as fh:
        return json.load(fh)


def _check_hf(hf: dict[str, Any], strict: bool) -> None:
    """Raises ``ValueError`` for an architecture, activation or attention this port does not
    implement, and (``strict``) for keys it does not know."""
    archs = hf.get("architectures") or []
    model_type = hf.get("model_type")
    bad = [a for a in archs if a not in SUPPORTED_ARCHITECTURES]
    if bad or model_type not in SUPPORTED_ARCHITECTURES.values():
        raise ValueError(
            f"unsupported architecture {archs or None} / model_type {model_type!r}: "
            f"mojax.models implements {sorted(SUPPORTED_ARCHITECTURES)}"
        )
    if hf.get("use_sliding_window", False):
        raise ValueError("use_sliding_window=True is not supported (no Qwen release uses it)")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={hf['hidden_act']!r} is not supported (only 'silu')")
    unknown = sorted(set(hf) - _IGNORED_HF_KEYS - _READ_HF_KEYS)
    if unknown and strict:
        raise ValueError(f"unknown config.json key(s) {unknown}; refusing to guess their meaning")


def _hf_rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """``(rope_theta, rope_scaling)`` from the ``rope_theta`` / ``rope_scaling`` keys, or from
    transformers 5's ``rope_parameters``; a ``"default"`` rope type is plain RoPE (``{}``)."""
    rope_params = dict(hf.get("rope_parameters") or {})
    rope_scaling = dict(hf.get("rope_scaling") or {})
    rope_theta = hf.get("rope_theta", rope_params.pop("rope_theta", 10000.0))
    rope_params.pop("rope_theta", None)
    if not rope_scaling and rope_params.get("rope_type", "default") != "default":
        rope_scaling = rope_params
    if rope_scaling.get("rope_type", rope_scaling.get("type")) == "default":
        rope_scaling = {}
    return rope_theta, rope_scaling
