"""Named model variants: the real shapes of the Qwen releases the seeds train, and tiny test shapes.

Shapes are those of the public ``config.json`` of each Hugging Face repo (base models; the Instruct
repos share the shapes). ``get_variant(name, **overrides)`` returns a ``QwenConfig``.
"""

from __future__ import annotations

from mojax.models.config import QwenConfig

_QWEN25 = dict(
    model_type="qwen2",
    qkv_bias=True,
    qk_norm=False,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    bos_token_id=151643,
    eos_token_id=151643,
)
_QWEN3 = dict(
    model_type="qwen3",
    qkv_bias=False,
    qk_norm=True,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    vocab_size=151936,
    head_dim=128,
    num_layers=28,
    max_position_embeddings=40960,
    bos_token_id=151643,
    eos_token_id=151645,
)


def _q25(e, f, layers, heads, kv, vocab, tie, max_pos, **kw):
    return {
        **_QWEN25,
        **dict(
            hidden_size=e,
            intermediate_size=f,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=e // heads,
            vocab_size=vocab,
            tie_word_embeddings=tie,
            max_position_embeddings=max_pos,
        ),
        **kw,
    }


def _q3(e, f, layers, heads, tie):
    return {
        **_QWEN3,
        **dict(
            hidden_size=e,
            intermediate_size=f,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=8,
            tie_word_embeddings=tie,
        ),
    }


VARIANTS: dict[str, dict] = {
    # Qwen2.5 (Qwen/Qwen2.5-*)
    "qwen2.5-0.5b": _q25(896, 4864, 24, 14, 2, 151936, True, 32768),
    "qwen2.5-1.5b": _q25(1536, 8960, 28, 12, 2, 151936, True, 131072),
    "qwen2.5-3b": _q25(2048, 11008, 36, 16, 2, 151936, True, 32768),
    "qwen2.5-7b": _q25(3584, 18944, 28, 28, 4, 152064, False, 131072),
    # Qwen2.5-Math (Qwen/Qwen2.5-Math-*): 4k context, rope_theta 10k
    "qwen2.5-math-1.5b": _q25(1536, 8960, 28, 12, 2, 151936, True, 4096, rope_theta=10000.0),
    "qwen2.5-math-7b": _q25(3584, 18944, 28, 28, 4, 152064, False, 4096, rope_theta=10000.0),
    # Qwen3 (Qwen/Qwen3-*): head_dim 128 independent of hidden_size / heads
    "qwen3-0.6b": _q3(1024, 3072, 28, 16, True),
    "qwen3-1.7b": _q3(2048, 6144, 28, 16, True),
    "qwen3-4b": _q3(2560, 9728, 36, 32, True),
    "qwen3-8b": _q3(4096, 12288, 36, 32, False),
    # Tiny test shapes (GQA; qwen3 with head_dim != hidden / heads and an untied head).
    "tiny-qwen2": _q25(64, 128, 2, 4, 2, 256, True, 2048, rope_theta=10000.0),
    "tiny-qwen3": {
        **_QWEN3,
        **dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            tie_word_embeddings=False,
            max_position_embeddings=2048,
        ),
    },
    # ~48M-parameter Qwen3-shaped config used by benchmarks/model.py.
    "bench-qwen3-50m": {
        **_QWEN3,
        **dict(
            vocab_size=32000,
            hidden_size=512,
            intermediate_size=1536,
            num_layers=10,
            num_heads=8,
            num_kv_heads=4,
            head_dim=64,
            tie_word_embeddings=True,
            max_position_embeddings=4096,
        ),
    },
}


def get_variant(name: str, **overrides) -> QwenConfig:
    """The ``QwenConfig`` of a named variant, execution fields (dtype, remat, ...) overridden."""
    if name not in VARIANTS:
        raise ValueError(f"unknown model variant {name!r}; known: {sorted(VARIANTS)}")
    return QwenConfig(**{**VARIANTS[name], **overrides})
