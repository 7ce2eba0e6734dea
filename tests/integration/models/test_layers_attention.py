"""``layers.attend`` and the query-blocked ``layers.attend_causal`` against a numpy float64 loop
written from the equations (softmax(q k^T / sqrt(D)) v over the visible keys, grouped queries).

Rows are full, left-padded and right-padded. A query that sees no key (left padding) gets zeros in
both functions, so blocked and unblocked calls agree everywhere.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax.models import layers

B, T, K, G, D = 3, 100, 2, 3, 8


def _inputs(seed=0, t=T):
    rng = np.random.RandomState(seed)
    qg = rng.randn(B, t, K, G, D).astype(np.float32)
    keys = rng.randn(B, t, K, D).astype(np.float32)
    values = rng.randn(B, t, K, D).astype(np.float32)
    mask = np.ones((B, t), bool)
    mask[1, :9] = False  # left padding
    mask[2, t - 13 :] = False  # right padding
    idx = np.arange(t)
    visible = (idx[None, None, :] <= idx[None, :, None]) & mask[:, None, :]  # [B, T, S]
    return qg, keys, values, visible


def _reference(qg, keys, values, visible):
    """float64 loop over rows, query tokens and heads; NaN where a query sees no key."""
    out = np.full(qg.shape, np.nan)
    for b in range(qg.shape[0]):
        for t in range(qg.shape[1]):
            seen = np.flatnonzero(visible[b, t])
            if seen.size == 0:
                continue
            for k in range(K):
                kk = keys[b, seen, k].astype(np.float64)  # [S', D]
                vv = values[b, seen, k].astype(np.float64)
                for g in range(G):
                    s = kk @ qg[b, t, k, g].astype(np.float64) / np.sqrt(D)
                    p = np.exp(s - s.max())
                    out[b, t, k, g] = (p / p.sum()) @ vv
    return out


def _seen(visible):
    return visible.any(-1)  # [B, T]: queries that see at least one key


@pytest.mark.parametrize("block", [None, 3, 7, 32, 64, 100, 128])
def test_attend_causal_equals_float64_reference(block):
    qg, keys, values, visible = _inputs()
    ref = _reference(qg, keys, values, visible)
    args = [jnp.asarray(a) for a in (qg, keys, values, visible)]
    outs = {"attend": jax.jit(layers.attend, static_argnums=4)(*args, jnp.float32)}
    if block is not None:
        blocked = jax.jit(layers.attend_causal, static_argnums=(4, 5))
        outs["attend_causal"] = blocked(*args, jnp.float32, block)
    seen = _seen(visible)
    assert (~seen).sum() == 9  # the left-padded row's first 9 queries see nothing
    for name, out in outs.items():
        out = np.asarray(out)
        assert out.shape == qg.shape and out.dtype == np.float32, name
        assert (out[~seen] == 0).all(), name
        np.testing.assert_allclose(out[seen], ref[seen], rtol=0, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("block", [16, 33])
def test_attend_causal_gradients_equal_attend(block):
    qg, keys, values, visible = _inputs(seed=1)
    rng = np.random.RandomState(2)
    ct = rng.randn(*qg.shape).astype(np.float32)
    vis = jnp.asarray(visible)

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, vis, jnp.float32) * ct)

    blocked = jax.tree_util.Partial(layers.attend_causal, block=block)
    grad = jax.jit(jax.grad(loss, argnums=(1, 2, 3)), static_argnums=0)
    ref = grad(layers.attend, qg, keys, values)
    got = grad(blocked, qg, keys, values)
    for name, r, g in zip(("dq", "dk", "dv"), ref, got):
        scale = float(jnp.max(jnp.abs(r)))
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=0, atol=1e-5 * scale,
                                   err_msg=name)  # fmt: skip


def test_layouts_choose_the_query_blocks():
    """``Layouts.causal_block`` rows per block, at most ``causal_max_blocks`` blocks; a chunk no
    longer than a block is one block (the same jaxpr as ``attend``); the CPU layouts block, the
    portable ones do not."""
    from mojax.models import layouts

    qg, keys, values, visible = (jnp.asarray(a) for a in _inputs(t=40))

    def jaxpr(fn):
        return str(jax.make_jaxpr(lambda *a: fn(*a, jnp.float32))(qg, keys, values, visible))

    one = jaxpr(layers.attend)
    assert one.count("= exp ") == 1  # one softmax per block
    cases = [(64, 1), (16, 3), (1, 8), (0, 1)]  # 16: blocks of 16, 16, 8; 1: capped, 8 blocks of 5
    for rows, blocks in cases:
        block = layouts.Layouts(causal_block=rows).causal_block_rows(40)
        text = jaxpr(functools.partial(layers.attend_causal, block=block))
        assert text.count("= exp ") == blocks, rows
        assert blocks > 1 or text == one
    assert layouts.for_backend("cpu").causal_block_rows(40) == 32
    assert layouts.for_backend("gpu").causal_block_rows(40) is None


@pytest.mark.parametrize("one_query", [True, False])
def test_one_query_decode_path_equals_reference(one_query):
    """T = 1 (a decode step; ``_attend_one_query`` with ``Layouts.one_query_reduce``, else the
    einsums) over 40 cache slots, one row seeing no slot at all (zeros), one seeing a single slot."""
    rng = np.random.RandomState(4)
    qg = rng.randn(B, 1, K, G, D).astype(np.float32)
    keys = rng.randn(B, 40, K, D).astype(np.float32)
    values = rng.randn(B, 40, K, D).astype(np.float32)
    visible = rng.rand(B, 1, 40) < 0.5
    visible[1] = False
    visible[2] = False
    visible[2, 0, 17] = True
    ref = _reference(qg, keys, values, visible)
    fn = lambda *a: layers.attend(*a, jnp.float32, one_query=one_query)
    out = np.asarray(jax.jit(fn)(qg, keys, values, visible))
    assert (out[1] == 0).all()
    np.testing.assert_allclose(out[[0, 2]], ref[[0, 2]], rtol=0, atol=2e-6)
