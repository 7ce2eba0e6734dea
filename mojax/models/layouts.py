"""Execution layouts of the model's hot paths, chosen once per backend.

The same maths runs in different layouts on different backends: XLA CPU is fastest with a decode
step's attention as multiply-reduces over non-minor axes, the uncached attention in query blocks,
the decode loop over unrolled layers with one cache array per layer (``LayerKVCache``) and the
learner's forward and backward over unrolled layers; GPUs decode over unrolled layers with the
per-layer cache too (a scanned layer is one iteration of an inner loop per layer and token, each
with its own launches and loop test), with each layer's q/k/v and gate/up products fused
(``mojax.models.fused``), and otherwise take the plain einsum paths and scanned layers, as TPUs
do. :func:`for_backend` is the one place that looks at the backend: a sampler or a learner
resolves its model config with :func:`resolve` when it is built, and the hot paths read
``config.layouts`` only. A config whose ``layouts`` is None (a model built by hand) runs the portable
layout until a sampler or learner resolves it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Layouts:
    """How the model's hot paths are laid out (a hashable part of ``QwenConfig``).

    Attributes:
      one_query_reduce: a one-token query (a decode step) attends as fused multiply-reduces instead
        of two einsums (same values up to fp32 summation order).
      causal_block: the uncached (prefill / training) attention runs in query blocks of this many
        rows, each over its causal key prefix (0 = one block).
      causal_max_blocks: at most this many blocks (the block grows for long chunks).
      decode_per_layer: the decode loop runs unrolled layers and carries the KV cache as one array
        per layer (``mojax.models.layer_cache``), converted back when the loop ends.
      learner_unrolled: the learner's forward and backward run unrolled layers (the gradient flows
        back into the stacked parameters), unless the model rematerialises (``remat``): XLA CPU
        would schedule the recomputation of every unrolled layer before the backward pass.
      attention: how an uncached chunk (training, log-probs, prefill) attends over itself:
        ``"reference"`` (the explicit einsum path, query-blocked by ``causal_block``), ``"cudnn"``
        (``jax.nn.dot_product_attention``'s cuDNN flash kernel), ``"splash"`` (Pallas splash
        attention) or ``"xla"`` (the XLA implementation of that call); see
        ``mojax.models.attention``.
      paged_attention: how a cached chunk attends over a ``PagedKVCache``: ``"gather"`` (the
        row's pages gathered, then the cache attention above), ``"pallas_gpu"`` or
        ``"pallas_tpu"`` (JAX's Pallas paged-attention kernels for a decode step); see
        ``mojax.models.paged_attention``.
      fuse_decode_projections: the decode loop runs each layer's q/k/v as one product and its
        gate/up as one (``mojax.models.fused``; the params are rewritten once before the loop):
        wider products, which the GPU runs nearer the bandwidth (``docs/performance.md`` section 6).
      decode_kernel: a decode step's attention half in Pallas kernels (``mojax.models.decode_kernel``:
        the input norm, q/k/v, q/k norms and RoPE in one; the attention over a ``LayerKVCache`` in
        another): ``"none"`` (the reference layer), ``"pallas_gpu"`` (Triton) or
        ``"pallas_gpu_interpret"`` (Pallas' interpreter, the CPU tests). Not a default anywhere
        until a GPU measures it faster.
    """

    one_query_reduce: bool = False
    causal_block: int = 0
    causal_max_blocks: int = 8
    decode_per_layer: bool = False
    learner_unrolled: bool = False
    attention: str = "reference"
    paged_attention: str = "gather"
    fuse_decode_projections: bool = False
    decode_kernel: str = "none"

    def __post_init__(self):
        from mojax.models import decode_kernel
        from mojax.models.attention import IMPLS
        from mojax.models.paged_attention import check_impl

        check_impl(self.paged_attention)
        decode_kernel.check_impl(self.decode_kernel)

        if self.attention not in IMPLS:
            raise ValueError(f"Layouts.attention={self.attention!r} is not one of {IMPLS}")

    def causal_block_rows(self, t: int) -> int | None:
        """Rows per query block of a ``t``-token uncached chunk (None: one block)."""
        if not self.causal_block:
            return None
        return max(self.causal_block, -(-t // self.causal_max_blocks))


PORTABLE = Layouts()
CPU = Layouts(one_query_reduce=True, causal_block=32, decode_per_layer=True, learner_unrolled=True)
GPU = Layouts(
    attention="cudnn",
    decode_per_layer=True,
    paged_attention="pallas_gpu",
    fuse_decode_projections=True,  # H200, 2026-12-04: 0.5B batch 1 -19%, 1.5B batch 64 -7%
)
TPU = Layouts(attention="splash", paged_attention="pallas_tpu")


def for_backend(backend: str | None = None) -> Layouts:
    """The layouts of ``backend`` (default: JAX's default backend)."""
    return {"cpu": CPU, "gpu": GPU, "cuda": GPU, "tpu": TPU}.get(
        backend or jax.default_backend(), PORTABLE
    )


def of(config: Any) -> Layouts:
    """The layouts a config runs with (the portable ones when unresolved)."""
    return config.layouts if config.layouts is not None else PORTABLE


def resolve(config: Any, backend: str | None = None) -> Any:
    """``config`` with its layouts set for ``backend`` when they are not set yet."""
    if config.layouts is not None:
        return config
    return config.replace(layouts=for_backend(backend))
