"""The accelerator-only paths lower for their platform here, so a GPU or TPU run is not their first.

Each test traces and lowers a real model call with ``jax.export`` for a platform this CPU does not
have (``platforms=["cuda"]`` / ``["tpu"]``) and reads the lowered module's custom calls: the kernel
each layout promises must be there, forward and backward where the learner runs it.

* cuDNN flash attention (``Layouts.attention="cudnn"``, the GPU learner's): the forward and the
  backward fused-attention calls. JAX asks the installed cuDNN for its version while tracing; with
  no CUDA here the test hands it one (9.10), which only selects the kernel's API, not its maths.
* Pallas splash attention (``"splash"``, the TPU learner's): its Mosaic kernels, forward and
  backward (``tpu_custom_call``).
* One decode step under the GPU layouts (fused q/k/v and gate/up products, the Pallas GPU paged
  attention over a ``PagedKVCache``): the Triton kernel call; and under the TPU layouts, the Pallas
  TPU paged attention's Mosaic kernel.

Their values are tested on the CPU in interpret mode (``tests/integration/models/test_attention_impls.py``,
``tests/integration/models/test_paged_cache.py``, ``tests/integration/models/test_fused.py``); what cannot run here is
their lowering for the real platform, which this file covers.
"""

import dataclasses
import re
import types

import jax
import jax.numpy as jnp
import pytest
from jax import export

import mojax.models as mm
from mojax.models import fused, layer_cache, layouts
from mojax.models.paged_cache import init_paged_cache
from mojax.models.qwen import Qwen

CFG = mm.get_variant("tiny-qwen3", vocab_size=128, dtype="bfloat16")
B, T = 2, 128


def _custom_calls(exported) -> list[str]:
    return re.findall(r"stablehlo.custom_call @([\w$.]+)", exported.mlir_module())


def _export(fn, platform, *args):
    """``fn`` lowered for ``platform``, custom calls allowed (their kernels are what we check)."""
    checks = [export.DisabledSafetyCheck.custom_call(n) for n in _UNCHECKED]
    return export.export(jax.jit(fn), platforms=[platform], disabled_checks=checks)(*args)


_UNCHECKED = (
    "__cudnn$fmhaScaleBiasSoftmax",
    "__cudnn$fmhaScaleBiasSoftmaxBackward",
    "__cudnn$fmhaSoftmax",
    "__cudnn$fmhaSoftmaxBackward",
    "__gpu$xla.gpu.triton",
    "tpu_custom_call",
)


def _train_grad(impl):
    cfg = CFG.replace(layouts=layouts.Layouts(attention=impl))
    params = jax.eval_shape(lambda: mm.init_params(CFG, jax.random.key(0)))
    tokens = jax.ShapeDtypeStruct((B, T), jnp.int32)
    mask = jax.ShapeDtypeStruct((B, T), jnp.bool_)

    def loss(p, t, m):
        logits = Qwen(cfg).apply({"params": p}, t, attention_mask=m)
        return jnp.sum(jnp.where(m[..., None], logits, 0.0))

    return jax.value_and_grad(loss), (params, tokens, mask)


@pytest.fixture
def cudnn_9_10(monkeypatch):
    """The cuDNN version JAX reads while tracing a cuDNN call (none is installed here)."""
    from jax._src.cudnn import fused_attention_stablehlo as fa

    monkeypatch.setattr(fa, "cuda_versions", types.SimpleNamespace(cudnn_get_version=lambda: 91000))


def test_cudnn_attention_lowers_forward_and_backward_for_cuda(cudnn_9_10):
    fn, args = _train_grad("cudnn")
    calls = _custom_calls(_export(fn, "cuda", *args))
    assert any(c.startswith("__cudnn$fmha") and not c.endswith("Backward") for c in calls), calls
    assert any(c.startswith("__cudnn$fmha") and c.endswith("Backward") for c in calls), calls


def test_splash_attention_lowers_forward_and_backward_for_tpu():
    fn, args = _train_grad("splash")
    exported = _export(fn, "tpu", *args)
    kernels = re.findall(r'kernel_name = "([\w.]+)"', exported.mlir_module())
    calls = _custom_calls(exported)
    assert calls.count("tpu_custom_call") >= 3, calls  # forward, dq, dkv
    assert len(kernels) >= 3, kernels


def _decode_step(lay, cache_dtype):
    """One decode token on a paged cache under ``lay``, as the decode loop runs it (its params
    rewritten by ``fused.for_decode`` where the layouts fuse the projections). Head dim 128 and
    pages of 16: the TPU kernel's tiles (``paged_attention.tpu_kernel_fits``)."""
    cfg = CFG.replace(layouts=lay, head_dim=128)
    params = jax.eval_shape(lambda: mm.init_params(cfg, jax.random.key(0)))
    decode = lambda p: fused.for_decode(mm.QwenModel(config=cfg, params=p))
    shapes = jax.eval_shape(lambda p: decode(p).params, params)
    cfg = cfg.replace(fused_projections=lay.fuse_decode_projections)
    cache = jax.eval_shape(lambda: init_paged_cache(cfg, B, 64, 16, 16, cache_dtype))

    def step(p, tok, cache):
        mask = jnp.ones_like(tok, bool)
        return Qwen(cfg).apply({"params": p}, tok, attention_mask=mask, cache=cache)

    return step, (shapes, jax.ShapeDtypeStruct((B, 1), jnp.int32), cache)


def test_gpu_decode_step_lowers_with_the_triton_paged_kernel(cudnn_9_10):
    assert layouts.GPU.fuse_decode_projections and layouts.GPU.paged_attention == "pallas_gpu"
    fn, args = _decode_step(layouts.GPU, None)
    calls = _custom_calls(_export(fn, "cuda", *args))
    assert "__gpu$xla.gpu.triton" in calls, calls


def test_tpu_decode_step_lowers_with_the_mosaic_paged_kernel():
    assert layouts.TPU.paged_attention == "pallas_tpu"
    fn, args = _decode_step(layouts.TPU, "bfloat16")
    calls = _custom_calls(_export(fn, "tpu", *args))
    assert "tpu_custom_call" in calls, calls


def _kernel_step(cache_kind, rows):
    """One decode token under the GPU layouts with ``decode_kernel="pallas_gpu"``, at the 0.5B's
    attention shapes (E = 896: chunks of 128; 14 heads over 2 kv heads, G = 7 padded to 16; D =
    128), on a per-layer dense cache of 40 slots (blocks of 32, the last one overlapping) or a
    paged one; ``rows`` rows (3: kernel B splits each row's slots; 64: one program per row and kv
    head)."""
    lay = dataclasses.replace(layouts.GPU, decode_kernel="pallas_gpu")
    cfg = CFG.replace(layouts=lay, hidden_size=896, num_heads=14, head_dim=128, scan_layers=False)
    params = jax.eval_shape(lambda: mm.init_params(cfg, jax.random.key(0)))
    decode = lambda p: fused.for_decode(mm.QwenModel(config=cfg, params=p))
    shapes = jax.eval_shape(lambda p: decode(p).params, params)
    cfg = cfg.replace(fused_projections=True)
    if cache_kind == "layer":
        make = lambda: layer_cache.to_layer_major(mm.init_cache(cfg, rows, 40))
    else:
        make = lambda: init_paged_cache(cfg, rows, 64, 16, 16, per_layer=True)

    def step(p, tok, cache):
        mask = jnp.ones_like(tok, bool)
        return Qwen(cfg).apply({"params": p}, tok, attention_mask=mask, cache=cache)

    return step, (shapes, jax.ShapeDtypeStruct((rows, 1), jnp.int32), jax.eval_shape(make))


@pytest.mark.parametrize("cache_kind, rows", [("layer", 3), ("layer", 64), ("paged", 3)])
def test_gpu_decode_kernels_lower_to_triton_for_cuda(cudnn_9_10, cache_kind, rows):
    """Kernel A (norm, q/k/v, q/k norm, RoPE) in every layer, kernel B (the attention) over the
    per-layer dense cache; over pages the attention is JAX's paged kernel (``mojax.models.
    decode_kernel``)."""
    fn, args = _kernel_step(cache_kind, rows)
    exported = _export(fn, "cuda", *args)
    names = re.findall(r'name = "(mojax_\w+|paged_attention\w*)', exported.mlir_module())
    n, dense = CFG.num_layers, cache_kind == "layer"
    assert names.count("mojax_qkv_rope") == n, names
    assert names.count("mojax_decode_attention") == (n if dense else 0), names
    assert any(x.startswith("paged_attention") for x in names) == (not dense), names
    assert "__gpu$xla.gpu.triton" in _custom_calls(exported)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_the_lowering_check_can_fail(platform):
    """The reference layouts lower without any kernel call: the assertions above are not vacuous."""
    fn, args = _train_grad("reference")
    calls = _custom_calls(_export(fn, platform, *args))
    assert not any(c.startswith("__cudnn") or c == "tpu_custom_call" for c in calls), calls
