"""benchmarks/target_bound.py's FLOP counts against the model's own program and a step-by-step loop.

The bound of a speed target is only as good as its count, so both halves are checked:

* the per-weight and per-attention-pair coefficients against the matmul FLOPs of the mojax Qwen3
  forward's jaxpr (every ``dot_general``, scans multiplied out), and of its gradient (3x);
* the sums over prompts, samples and decode steps against a loop that walks the generation one
  decode step at a time, and the training count against a loop over rows and positions.
"""

from __future__ import annotations

import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

_BENCHMARKS = os.path.join(os.fspath(pathlib.Path(__file__).resolve().parents[3]), "benchmarks")
if _BENCHMARKS not in sys.path:  # appended: benchmark scripts never shadow another module
    sys.path.append(_BENCHMARKS)

import target_bound  # noqa: E402

import mojax.models as mm  # noqa: E402
from mojax.models.variants import get_variant  # noqa: E402

SHAPE = dict(
    vocab_size=96, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=8,
)  # fmt: skip


def _dot_flops(jaxpr) -> int:
    """2 x output elements x contracted size of every dot_general, scans and calls included."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            k = int(np.prod([lhs[d] for d in lhs_contract]))
            total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * k
        times = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        for sub in jax.core.jaxprs_in_params(eqn.params):
            total += times * _dot_flops(sub)
    return total


@pytest.fixture(scope="module")
def model():
    cfg = get_variant("tiny-qwen3", dtype="float32", param_dtype="float32", **SHAPE)
    return mm.QwenModel(config=cfg, params=mm.init_params(cfg, jax.random.key(0)))


@pytest.mark.parametrize("n", [5, 9])
def test_forward_coefficients_match_the_models_dots(model, n):
    body, head, _ = target_bound.weight_products(SHAPE)
    tokens = jnp.ones((1, n), jnp.int32)
    counted = _dot_flops(jax.make_jaxpr(lambda p, t: model.apply_fn({"params": p}, t))(model.params, tokens).jaxpr)  # fmt: skip
    # the model scores every position and attends over all n keys (the mask is applied after)
    assert counted == 2 * (body + head) * n + target_bound._attn(SHAPE) * n * n


def test_gradient_is_three_forwards(model):
    n = 7
    tokens = jnp.ones((1, n), jnp.int32)

    def loss(p):
        return model.apply_fn({"params": p}, tokens).sum()

    fwd = _dot_flops(jax.make_jaxpr(loss)(model.params).jaxpr)
    grad = _dot_flops(jax.make_jaxpr(jax.grad(loss))(model.params).jaxpr)
    assert grad == 3 * fwd
    # the bound's training count of the same positions, all scored, full attention, is below it
    body, head, qkv0 = target_bound.weight_products(SHAPE)
    assert 6 * (body + head) * n - 2 * qkv0 * n + 3 * target_bound._attn(SHAPE) * n * n < grad


def _generation_by_steps(lengths, samples, new_tokens):
    """Walks the generation: each prompt's prefill once, then per row each decode step."""
    body, head, _ = target_bound.weight_products(SHAPE)
    attn = target_bound._attn(SHAPE)
    flops = 0
    for n in lengths:
        for pos in range(n):  # prefill: every prompt position attends to itself and the past
            flops += 2 * body + attn * (pos + 1)
        flops += 2 * head  # the first new token, drawn from the last prompt position
        for _ in range(samples):
            ctx = n
            for _ in range(new_tokens - 1):  # feed the drawn token, draw the next
                ctx += 1
                flops += 2 * (body + head) + attn * ctx
    return flops


def _training_by_rows(lengths, samples, new_tokens):
    body, head, qkv0 = target_bound.weight_products(SHAPE)
    attn = target_bound._attn(SHAPE)
    flops = 0
    for n in lengths:
        for _ in range(samples):
            for pos in range(n + new_tokens - 1):
                flops += 3 * 2 * body - 2 * qkv0 + 3 * attn * (pos + 1)
            flops += 3 * 2 * head * new_tokens
    return flops


@pytest.mark.parametrize("samples,new_tokens", [(1, 1), (1, 6), (3, 4)])
def test_sums_match_step_by_step_loops(samples, new_tokens):
    lengths = np.array([3, 8, 5])
    assert target_bound._forward(SHAPE, lengths, samples, new_tokens) == _generation_by_steps(
        lengths, samples, new_tokens
    )
    assert target_bound._train(SHAPE, lengths, samples, new_tokens) == _training_by_rows(
        lengths, samples, new_tokens
    )


def test_rl_step_count_is_below_the_peers_padded_counts():
    """benchmarks/logs/HISTORY.md (docs/performance.md section 5e until 2026-12-06) counted
    2.44 TFLOP for TRL's padded update (rows of the longest prompt + completion, head on the
    completion); the bound packs nothing in and pads nothing, so it must be below that and above
    the same rows without attention."""
    gen, upd = target_bound.rl_step_flops()
    assert 2.0e12 < upd < 2.44e12
    assert 0.5e12 < gen < 0.7e12
