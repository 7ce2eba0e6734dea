"""Flax (linen) Qwen2 / Qwen2.5 / Qwen3 with Hugging Face checkpoints in and out.

Quick use::

    model = mojax.models.from_pretrained("/ckpt/Qwen3-1.7B", dtype="bfloat16")  # or "tiny-qwen3"
    logits = model(tokens, attention_mask=mask)  # fp32 [B, T, V]; positions = cumsum(mask) - 1
    mojax.models.save_pretrained(model, out_dir, tokenizer_dir=src)  # HF format, serves as-is
    tok = mojax.models.load_tokenizer(path)  # HF dir (chat template) or sentencepiece .model

Functional core (inside jit)::

    module = Qwen(config)  # == model.module; model.apply_fn == module.apply
    logits = module.apply({"params": params}, tokens, attention_mask=mask, positions=None)
    cache = init_cache(config, batch=B, max_len=S_max, dtype=jnp.bfloat16)
    logits, cache = module.apply({"params": params}, tokens, attention_mask=token_mask,
                                 positions=None, cache=cache)
    hidden = module.apply(vars, tokens, attention_mask=mask, return_hidden=True)   # [B, T, E]
    logits = module.apply(vars, hidden, method=Qwen.logits)                        # fp32 [..., V]

``KVCache`` (flax.struct): ``k, v [L, B, S_max, K, D]``, ``slot_mask bool [B, S_max]``, ``end int32
[B]``. A cached call with ``tokens [B, T]`` writes the T new k/v of each row at slots
``end .. end+T-1`` (padding in the chunk takes a slot marked invalid), advances ``end`` by T and
attends causally (by slot index) over the valid slots. Default positions continue each row from its
number of valid tokens, so prefill (T = prompt bucket), decode (T = 1) and per-row appends of tool
observations all use this one path. ``cache.repeat_rows(G)`` shares one prefill across G samples
(prompt-major). See ``mojax.models.cache``. The CPU decode loop carries it as a ``LayerKVCache``
(one array per layer, keys ``[B, K, D, S_max]``, values ``[B, K, S_max, D]``; unrolled layers
only, ``unstack_layers(model)``): ``to_layer_major(cache)`` / ``to_stacked(cache)`` convert exactly.
See ``mojax.models.layer_cache``.

Loss helper: ``token_logprobs(logits, targets)`` (fp32, scatter-free gradient); score next tokens by
shifting the targets (``roll(tokens, -1)``, last position masked) rather than slicing the logits.

Sharding: params carry logical axis names (``param_logical_axes(config)``); with a mesh of axes
("data", "fsdp", "tensor") use ``param_shardings(config, mesh, DEFAULT_LOGICAL_AXIS_RULES)`` or
``from_pretrained(..., mesh=mesh)``, and run the apply under
``nn.logical_axis_rules(DEFAULT_LOGICAL_AXIS_RULES)`` + ``mesh`` to constrain the activations.

Param pytree (``scan_layers=True``, the default; leading L axis under "layers")::

    embed_tokens [V, E]; lm_head [V, E] (untied only); norm/scale [E]
    layers/{input_layernorm,post_attention_layernorm}/scale [L, E]
    layers/self_attn/q_proj/kernel [L, E, H, D]; {k_proj,v_proj}/kernel [L, E, K, D]
    layers/self_attn/{q,k,v}_proj/bias [L, H or K, D]              (qwen2 only)
    layers/self_attn/o_proj/kernel [L, H, D, E]
    layers/self_attn/{q_norm,k_norm}/scale [L, D]                  (qwen3 only)
    layers/mlp/{gate_proj,up_proj}/kernel [L, E, F]; layers/mlp/down_proj/kernel [L, F, E]
    (scan_layers=False: the same without the L axis under layers_0 .. layers_{L-1})
"""

from mojax.models import layouts, lora
from mojax.models.cache import KVCache, init_cache
from mojax.models.config import QwenConfig
from mojax.models.hf import from_pretrained, load_params, param_count, save_pretrained
from mojax.models.layer_cache import LayerKVCache, to_layer_major, to_stacked
from mojax.models.layouts import Layouts
from mojax.models.qwen import (
    DEFAULT_LOGICAL_AXIS_RULES,
    Qwen,
    QwenModel,
    init_params,
    param_logical_axes,
    param_shapes,
    param_shardings,
    token_logprobs,
    unstack_layers,
    without_padding_rows,
)
from mojax.models.tokenizer import HFTokenizer, SentencePieceTokenizer, load_tokenizer
from mojax.models.variants import VARIANTS, get_variant

__all__ = [
    "Layouts",
    "layouts",
    "lora",
    "DEFAULT_LOGICAL_AXIS_RULES",
    "KVCache",
    "LayerKVCache",
    "Qwen",
    "QwenConfig",
    "QwenModel",
    "VARIANTS",
    "without_padding_rows",
    "from_pretrained",
    "get_variant",
    "HFTokenizer",
    "SentencePieceTokenizer",
    "load_tokenizer",
    "init_cache",
    "init_params",
    "load_params",
    "param_count",
    "param_logical_axes",
    "param_shapes",
    "param_shardings",
    "save_pretrained",
    "to_layer_major",
    "to_stacked",
    "token_logprobs",
    "unstack_layers",
]
