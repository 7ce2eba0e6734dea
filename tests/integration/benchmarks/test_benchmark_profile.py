"""``benchmarks/rl_step_profile.py`` reads each product fusion's shapes and FLOPs from the compiled
HLO: checked against ``2 M N K`` of two products written here (one with a transposed operand)."""

import os
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(
    0, os.path.join(os.fspath(pathlib.Path(__file__).resolve().parents[3]), "benchmarks")
)

from rl_step_profile import fusion_products  # noqa: E402


def test_fusion_products_count_2mnk():
    fn = jax.jit(lambda a, b, c: jnp.tanh(a @ b) @ c.T)
    a, b, c = jnp.ones((256, 512)), jnp.ones((512, 384)), jnp.ones((128, 384))
    found = fusion_products(fn.lower(a, b, c).compile().as_text())
    flops = sorted(f for _, f in found.values())
    assert flops == [2 * 256 * 384 * 128, 2 * 256 * 512 * 384], found
    shapes = " ".join(d for d, _ in found.values())
    assert "f32[256,512] x f32[512,384] -> f32[256,384]" in shapes, shapes
    assert "f32[256,384] x f32[128,384] -> f32[256,128]" in shapes, shapes
