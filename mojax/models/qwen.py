"""The Qwen decoder (``Qwen``, a pure linen module) and the user-facing ``QwenModel``.

``Qwen(config).apply({"params": params}, tokens, positions=..., attention_mask=..., cache=...)`` is
the functional core used inside jit by the sampler and the train step. ``QwenModel`` bundles the
static config with the parameter pytree and is what ``from_pretrained`` returns.

Shape legend: B rows, T tokens, V vocab, E embed, L layers, C cache slots.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from mojax.models import cache as cache_lib
from mojax.models import paged_cache
from mojax.models.config import QwenConfig
from mojax.models.layer_cache import LayerKVCache
from mojax.models.layers import DecoderLayer, RMSNorm, constrain
from mojax.models.paged_cache import PagedKVCache

#: Logical axis name -> mesh axes, for a mesh with axes ("data", "fsdp", "tensor"). Rules are
#: applied in order and a mesh axis is used once per array, so activations' "embed" stays unsharded
#: when "batch" already took "fsdp", while parameters' "embed" is sharded over "fsdp" (ZeRO-3
#: style).
#: The logit of a padding row of a padded vocabulary: finite (so ``p * logit`` is 0, not NaN, in an
#: entropy) and far below any real logit (``exp`` of it is 0 in fp32).
PADDING_LOGIT = -1e30

DEFAULT_LOGICAL_AXIS_RULES = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("embed", "fsdp"),
    ("length", None),
    ("cache_length", None),
    ("head_dim", None),
    ("layers", None),
    ("norm", None),
    ("lora", None),
)

_REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Qwen(nn.Module):
    """Qwen2 / Qwen2.5 / Qwen3 causal LM.

    Call: ``logits = apply(vars, tokens, attention_mask=mask)`` (uncached) or
    ``logits, cache = apply(vars, tokens, attention_mask=token_mask, cache=cache)`` (cached).

    Args of ``__call__``:
      tokens: int32 [B, T].
      positions: int32 [B, T] RoPE positions; default ``cumsum(mask) - 1`` (uncached) or
        ``cache.num_valid + cumsum(mask) - 1`` (cached), clipped at 0 for padding.
      attention_mask: [B, T], 1/True for real tokens, 0 for padding (left, right or inside a chunk);
        default all ones.
      cache: a ``KVCache`` (or a ``PagedKVCache``, ``mojax.models.paged_cache``); when given, the chunk is written at each row's ``end`` and attends over
        the cache (see ``mojax.models.cache``). With unrolled layers it may also be a
        ``LayerKVCache`` (the CPU decode layout, ``mojax.models.layer_cache``); the updated cache
        comes back in the layout it came in.
      return_hidden: return the final normed hidden states [B, T, E] (compute dtype) instead of
        logits, so a loss can project vocab chunks itself with ``method=Qwen.logits``.
      segment_ids: int32 [B, T] of a packed uncached row (``mojax.learner.packing``): 0 on padding,
        ``s >= 1`` on the tokens of its ``s``-th sequence; a token attends only to the earlier
        tokens of its own segment, and default positions restart at 0 in each segment.

    Returns:
      fp32 logits [B, T, V] (or hidden states), plus the updated cache when ``cache`` is given.
    """

    config: QwenConfig

    def setup(self):
        cfg = self.config
        self.embed_tokens = self.param(
            "embed_tokens",
            nn.with_logical_partitioning(
                nn.initializers.normal(stddev=cfg.initializer_range), ("vocab", "embed")
            ),
            (cfg.vocab_size, cfg.hidden_size),
            cfg.jnp_param_dtype,
        )
        if not cfg.tie_word_embeddings:
            self.lm_head = self.param(
                "lm_head",
                nn.with_logical_partitioning(
                    nn.initializers.normal(stddev=cfg.initializer_range), ("vocab", "embed")
                ),
                (cfg.vocab_size, cfg.hidden_size),
                cfg.jnp_param_dtype,
            )
        layer_cls = DecoderLayer
        if cfg.remat != "none":
            layer_cls = nn.remat(
                DecoderLayer,
                policy=_REMAT_POLICIES[cfg.remat],
                prevent_cse=not cfg.scan_layers,
                # unrolled: the layer index stays a Python int (a LayerKVCache needs one)
                static_argnums=() if cfg.scan_layers else (6,),
            )
        if cfg.scan_layers:
            self.layers = nn.scan(
                layer_cls,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast, 0),
                length=cfg.num_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )(cfg)
        else:
            self.layers = [layer_cls(cfg) for _ in range(cfg.num_layers)]
        self.norm = RMSNorm(cfg)

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        cache: cache_lib.KVCache | LayerKVCache | None = None,
        return_hidden: bool = False,
        segment_ids: jax.Array | None = None,
    ):
        cfg = self.config
        b, t = tokens.shape
        mask = jnp.ones((b, t), bool) if attention_mask is None else attention_mask.astype(bool)
        counts = jnp.cumsum(mask, axis=-1, dtype=jnp.int32)  # [B, T]
        if segment_ids is not None and cache is not None:
            raise ValueError("segment_ids (packed rows) are for uncached calls only")
        if cache is None:
            if positions is None:
                positions = (
                    jnp.maximum(counts - 1, 0)
                    if segment_ids is None
                    else segment_positions(segment_ids)
                )
            q_idx = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
            k_valid, write_idx, kv = mask, None, None
            if segment_ids is not None:  # int32 ids, 0 on padding: no attention across segments
                k_valid = jnp.where(mask, segment_ids.astype(jnp.int32), 0)
        elif isinstance(cache, PagedKVCache):  # real tokens packed per row (paged_cache)
            if positions is None:
                positions = jnp.maximum(cache.lengths[:, None] + counts - 1, 0)
            q_idx = paged_cache.token_positions(cache, mask)
            write_idx = paged_cache.physical_pages(cache, q_idx, mask)
            k_valid, kv = cache.lengths + counts[:, -1], cache
        else:
            if positions is None:
                positions = jnp.maximum(cache.num_valid[:, None] + counts - 1, 0)
            write_idx = cache_lib.write_indices(cache, t)
            q_idx = write_idx
            k_valid = cache_lib.update_slot_mask(cache, mask)
            kv = (cache.k, cache.v)

        x = jnp.take(self.embed_tokens, tokens, axis=0).astype(cfg.jnp_dtype)
        x = constrain(x, "batch", "length", "embed")
        if cfg.scan_layers:
            layer_ids = jnp.arange(cfg.num_layers, dtype=jnp.int32)
            (x, kv), _ = self.layers((x, kv), positions, q_idx, k_valid, write_idx, layer_ids)
        else:
            for i, layer in enumerate(self.layers):
                (x, kv), _ = layer((x, kv), positions, q_idx, k_valid, write_idx, i)
        x = self.norm(x)
        out = x if return_hidden else self.logits(x)
        if cache is None:
            return out
        if isinstance(cache, PagedKVCache):
            return out, kv.replace(lengths=k_valid, end=cache.end + t)
        new_cache = cache.replace(k=kv[0], v=kv[1], slot_mask=k_valid, end=cache.end + t)
        return out, new_cache

    def logits(self, hidden: jax.Array) -> jax.Array:
        """fp32 logits [..., V] from final hidden states [..., E] (tied or untied head); the
        padding rows of a padded vocabulary (``QwenConfig.real_vocab_size``) get
        ``PADDING_LOGIT``."""
        cfg = self.config
        head = self.embed_tokens if cfg.tie_word_embeddings else self.lm_head
        return head_logits(cfg, head, hidden)


def output_head(config: QwenConfig, params: Any) -> jax.Array:
    """The output projection ``[V, E]`` of ``params`` (the embedding when tied)."""
    return params["embed_tokens"] if config.tie_word_embeddings else params["lm_head"]


def head_logits(config: QwenConfig, head: jax.Array, hidden: jax.Array) -> jax.Array:
    """fp32 logits [..., V] of final hidden states [..., E] under the output head ``[V, E]``
    (``Qwen.logits``; the padding rows of a padded vocabulary, ``QwenConfig.real_vocab_size``,
    get ``PADDING_LOGIT``; inside a mesh + rules context a 3-D result is constrained like logits)."""
    lead = hidden.shape[:-1]
    logits = jax.lax.dot_general(  # 2-D [N, E] x [V, E]^T: see layers.Projection for why
        hidden.astype(config.jnp_dtype).reshape(-1, config.hidden_size),
        head.astype(config.jnp_dtype),
        (((1,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    ).reshape(*lead, config.vocab_size)
    if config.real_vocab_size is not None and config.real_vocab_size < config.vocab_size:
        ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
        logits = jnp.where(ids < config.real_vocab_size, logits, PADDING_LOGIT)
    if logits.ndim == 3:
        logits = constrain(logits, "batch", "length", "vocab")
    return logits


def segment_positions(segment_ids: jax.Array) -> jax.Array:
    """int32 [B, T] RoPE positions restarting at 0 at the first token of each segment (a
    position whose id differs from the one before it)."""
    b, t = segment_ids.shape
    idx = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    first = jnp.concatenate(
        [jnp.ones((b, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1
    )
    start = jax.lax.cummax(jnp.where(first, idx, 0), axis=1)
    return idx - start


def token_logprobs(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """fp32 ``log softmax(logits)[targets]``: ``[..., V]``, ``[...]`` -> ``[...]``.

    Written as ``sum(logits * one_hot) - logsumexp`` rather than ``take_along_axis(log_softmax)``:
    same value, but its gradient is elementwise instead of a scatter, which XLA's CPU backend runs
    slowly. To score next tokens, shift the *targets* (``roll(tokens, -1)`` with the last position
    masked) rather than slicing the logits, whose gradient would otherwise be a padded copy of the
    whole ``[B, T, V]`` array.
    """
    logits = logits.astype(jnp.float32)
    picked = jnp.sum(logits * jax.nn.one_hot(targets, logits.shape[-1], dtype=logits.dtype), -1)
    return picked - jax.nn.logsumexp(logits, axis=-1)


# --------------------------------------------------------------------------------------------------
# parameters: init, logical axes, shardings


def _boxed_init(config: QwenConfig, key: jax.Array):
    return Qwen(config).init(key, jnp.zeros((1, 1), jnp.int32))["params"]


def param_logical_axes(config: QwenConfig) -> Any:
    """Pytree (same structure as the params) of ``PartitionSpec``s of logical axis names."""
    boxed = jax.eval_shape(functools.partial(_boxed_init, config), jax.random.key(0))
    return nn.get_partition_spec(boxed)


def param_shapes(config: QwenConfig) -> Any:
    """Pytree of ``jax.ShapeDtypeStruct`` of the params (no memory; works for 7B+ configs)."""
    boxed = jax.eval_shape(functools.partial(_boxed_init, config), jax.random.key(0))
    return nn.meta.unbox(boxed)


def param_shardings(config: QwenConfig, mesh, rules=DEFAULT_LOGICAL_AXIS_RULES) -> Any:
    """Pytree of ``NamedSharding``s placing the params on ``mesh`` by the logical axis ``rules``."""
    return nn.logical_to_mesh_sharding(param_logical_axes(config), mesh, rules)


def init_params(config: QwenConfig, key: jax.Array, shardings: Any = None) -> Any:
    """Random parameters (normal(initializer_range) kernels/embeddings, unit norms, zero biases).

    With ``shardings`` (e.g. from ``param_shardings``) every array is created already sharded.
    """
    fn = jax.jit(lambda k: nn.meta.unbox(_boxed_init(config, k)), out_shardings=shardings)
    return fn(key)


# --------------------------------------------------------------------------------------------------
# user-facing model


@flax.struct.dataclass
class QwenModel:
    """A config (static) and its parameters: ``model(tokens, attention_mask=mask) -> logits``.

    A pytree, so it can be passed through ``jax.jit``; ``apply_fn`` is the pure core for custom
    steps: ``model.apply_fn({"params": params}, tokens, attention_mask=mask, cache=cache)``.
    """

    config: QwenConfig = flax.struct.field(pytree_node=False)
    params: Any

    @property
    def module(self) -> Qwen:
        return Qwen(self.config)

    @property
    def apply_fn(self):
        return self.module.apply

    def __call__(self, tokens, attention_mask=None, positions=None, cache=None):
        """Logits fp32 [B, T, V] (and the new cache when ``cache`` is given), jit-compiled."""
        return _forward(self, jnp.asarray(tokens), attention_mask, positions, cache)

    def replace_config(self, **kwargs) -> QwenModel:
        """Same params under a config with changed execution fields (dtype, remat).

        ``scan_layers`` changes the param layout, so it cannot be switched here.
        """
        if "scan_layers" in kwargs and kwargs["scan_layers"] != self.config.scan_layers:
            raise ValueError(
                "scan_layers changes the parameter layout; reload with from_pretrained"
            )
        return self.replace(config=self.config.replace(**kwargs))


def without_padding_rows(model: QwenModel) -> QwenModel:
    """The model with the padding rows of its vocabulary dropped (``QwenConfig.real_vocab_size``):
    ``vocab_size = real_vocab_size`` and the embedding (and untied head) cut to those rows. Over
    the real ids the logits, and so the distribution, are the padded model's exactly: what an HF
    export writes, since transformers and vLLM do not mask padding rows."""
    real = model.config.real_vocab_size
    if real is None or real == model.config.vocab_size:
        return model
    params = dict(model.params)
    for name in ("embed_tokens", "lm_head"):
        if name in params:
            params[name] = params[name][:real]
    config = model.config.replace(vocab_size=real, real_vocab_size=None)
    return model.replace(config=config, params=params)


def unstack_layers(model: QwenModel) -> QwenModel:
    """The same model with unrolled layers (``scan_layers=False``): ``params["layers"]``, stacked
    on a leading L axis, becomes ``layers_0 .. layers_{L-1}``. Pure; works on traced params.

    A scanned layer slices its weights out of the stacked arrays on every call; in a decode loop
    that is a copy of all weights per token (XLA CPU materialises each slice before its dot).
    Unstacked once before the loop, the slices are loop-invariant. The policy log-probs of the
    train step unstack too on the CPU (``mojax.learner.logprobs.token_logprobs``); the gradient flows
    back into the stacked parameters through one concatenate.
    """
    if not model.config.scan_layers:
        return model
    n = model.config.num_layers
    # ``split``, not ``x[i]``: its transpose (for gradients) is one concatenate, where the sum of
    # L zero-padded slices would touch every layer's weights L times
    leaves, treedef = jax.tree.flatten(model.params["layers"])
    parts = [jnp.split(x, n, axis=0) for x in leaves]  # per leaf: n arrays [1, ...]
    params = {k: v for k, v in model.params.items() if k != "layers"}
    for i in range(n):
        params[f"layers_{i}"] = treedef.unflatten([p[i][0] for p in parts])
    # ``replace`` keeps a subclass and its fields (e.g. a test's scripted model)
    return model.replace(config=model.config.replace(scan_layers=False), params=params)


@jax.jit
def _forward(model: QwenModel, tokens, attention_mask, positions, cache):
    return model.apply_fn(
        {"params": model.params},
        tokens,
        positions=positions,
        attention_mask=attention_mask,
        cache=cache,
    )
