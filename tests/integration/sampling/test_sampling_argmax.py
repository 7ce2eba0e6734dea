"""``first_argmax`` and ``gumbel_max_draw`` (mojax.sampling.processors) against the library calls
they replace: ``jnp.argmax`` and ``jax.random.categorical`` give the reference, token for token.

The default ``draw="gumbel"`` must keep the random stream of every recorded run, so equality is
exact (not statistical) on random, tied, truncated (-inf) and NaN rows and on widths that are and
are not multiples of the block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax.sampling import processors as proc


def _rows(kind: str, b: int, v: int, seed: int) -> np.ndarray:
    rng = np.random.RandomState(seed)
    if kind == "normal":
        return rng.randn(b, v).astype(np.float32)
    if kind == "ties":  # few distinct values: many tied maxima, the first must win
        return rng.randint(0, 3, (b, v)).astype(np.float32)
    if kind == "signed_zeros":  # -0.0 and +0.0 tie (the first wins), below them negatives
        x = -rng.rand(b, v).astype(np.float32)
        x[rng.rand(b, v) < 0.3] = 0.0
        x[rng.rand(b, v) < 0.3] = -0.0
        return x
    if kind == "truncated":  # top-k style rows: most entries -inf, one row entirely -inf
        x = rng.randn(b, v).astype(np.float32)
        x[rng.rand(b, v) < 0.9] = -np.inf
        x[0] = -np.inf
        return x
    if kind == "nan":  # a NaN counts as the maximum in jnp.argmax
        x = rng.randn(b, v).astype(np.float32)
        x[1, v // 2] = np.nan
        x[2, v - 1] = np.nan
        x[2, 0] = np.inf
        return x
    raise ValueError(kind)


@pytest.mark.parametrize("v", [1, 7, 255, 256, 257, 1000, 4096 + 3])
@pytest.mark.parametrize("kind", ["normal", "ties", "signed_zeros", "truncated", "nan"])
def test_first_argmax_equals_jnp_argmax(kind, v):
    x = jnp.asarray(_rows(kind, 5, v, seed=v))
    want = np.asarray(jnp.argmax(x, axis=-1))
    got = np.asarray(jax.jit(proc.first_argmax)(x))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("block", [1, 3, 64, 256, 10_000])
def test_first_argmax_any_block(block):
    x = jnp.asarray(_rows("ties", 4, 1000, seed=block))
    np.testing.assert_array_equal(
        np.asarray(proc.first_argmax(x, block)), np.asarray(jnp.argmax(x, axis=-1))
    )


def test_first_argmax_bfloat16():
    x = jnp.asarray(_rows("ties", 6, 777, seed=1)).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(proc.first_argmax(x)), np.asarray(jnp.argmax(x, -1)))


@pytest.mark.parametrize("v", [5, 256, 3000, 32768])
def test_gumbel_max_draw_is_categorical(v):
    """Same tokens as jax.random.categorical for 20 keys (the recorded runs' stream)."""
    z = jnp.asarray(_rows("normal", 16, v, seed=v)) * 3.0
    draw = jax.jit(proc.gumbel_max_draw)
    cat = jax.jit(lambda k, z: jax.random.categorical(k, z, axis=-1))
    for i in range(20):
        key = jax.random.fold_in(jax.random.key(7), i)
        np.testing.assert_array_equal(np.asarray(draw(key, z)), np.asarray(cat(key, z)))


def test_sample_step_default_draw_keeps_the_categorical_stream():
    """sample_step's default draw after top-k / top-p truncation: token for token categorical."""
    logits = jnp.asarray(_rows("normal", 32, 1024, seed=3)) * 2.0
    params = proc.SamplingParams(temperature=0.7, top_k=50, top_p=0.9)
    z = proc.process_logits(logits, params)
    step = jax.jit(lambda l, k: proc.sample_step(l, k, params))
    for i in range(10):
        key = jax.random.fold_in(jax.random.key(0), i)
        tokens, _ = step(logits, key)
        want = jax.random.categorical(key, z, axis=-1)
        np.testing.assert_array_equal(np.asarray(tokens), np.asarray(want))
        assert np.all(np.isfinite(np.asarray(z)[np.arange(32), np.asarray(tokens)]))


def test_greedy_is_argmax():
    logits = jnp.asarray(_rows("ties", 9, 1500, seed=4))
    tokens, _ = proc.sample_step(logits, jax.random.key(0), proc.SamplingParams(temperature=0.0))
    np.testing.assert_array_equal(np.asarray(tokens), np.asarray(jnp.argmax(logits, -1)))
