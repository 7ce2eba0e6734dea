"""The chunked vocabulary projection's custom VJP against plain autodiff of the unchunked one:
log-probs, entropies and the gradients of a loss on both, for tied and untied heads, with and
without skipped chunks; and its backward holds one head gradient, not one per chunk."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mojax import learner, models

B, T = 3, 17


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("remat", [True, False])
def test_chunked_values_and_grads_equal_unchunked(tie, skip, remat):
    cfg = models.get_variant("tiny-qwen3", vocab_size=97, tie_word_embeddings=tie)
    params = models.init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (B, T), 0, 97)
    need = np.zeros((B, T), bool)
    need[:, 9:13] = True
    w = jax.random.normal(jax.random.key(2), (2, B, T))

    def loss(p, chunk):
        lp, ent = learner.token_logprobs(
            cfg, p, tokens, chunk_size=chunk, with_entropy=True,
            need=jnp.asarray(need) if skip else None, remat_chunks=remat,
        )  # fmt: skip
        m = jnp.asarray(need)
        return jnp.sum(jnp.where(m, w[0] * lp + w[1] * ent, 0.0)), (lp, ent)

    (v0, (lp0, e0)), g0 = jax.value_and_grad(loss, has_aux=True)(params, None)
    (v1, (lp1, e1)), g1 = jax.value_and_grad(loss, has_aux=True)(params, 4)
    np.testing.assert_allclose(np.where(need, lp1, 0), np.where(need, lp0, 0), atol=1e-5)
    np.testing.assert_allclose(np.where(need, e1, 0), np.where(need, e0, 0), atol=1e-5)
    np.testing.assert_allclose(v1, v0, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_backward_holds_one_head_gradient():
    """5 chunks of a 4096-word head: XLA's temporaries stay below 2 head-sized arrays (a stacked
    per-chunk gradient would be 5)."""
    cfg = models.get_variant("tiny-qwen3", vocab_size=4096, num_layers=1)
    params = models.param_shapes(cfg)
    tokens = jax.ShapeDtypeStruct((1, 40), jnp.int32)

    def loss(p, t):
        need = jnp.arange(40)[None] >= 20  # the PPO step passes its loss mask
        return jnp.sum(learner.token_logprobs(cfg, p, t, chunk_size=8, need=need)[0])

    mem = jax.jit(jax.grad(loss)).lower(params, tokens).compile().memory_analysis()
    head = 4096 * cfg.hidden_size * 4
    assert mem.temp_size_in_bytes < 2 * head + 8 * 4096 * 4 * 4


# every pair of settings once (tied x remat, each chunk / mode with both of each): 8 of the 16
@pytest.mark.parametrize(
    "chunk, mode, tie, remat",
    [
        (3, "rows", True, True),
        (3, "rows", False, False),
        (4, "batch", True, False),
        (4, "batch", False, True),
        (32, "rows", True, False),
        (32, "rows", False, True),
        (64, "batch", True, True),
        (64, "batch", False, False),
    ],
)
def test_compact_values_and_grads_equal_unchunked(chunk, mode, tie, remat):
    """``compact``: each row's (or the batch's) loss positions (different per row, in several
    runs as in packed rows) gathered to the front and projected; the values and gradients of a
    loss on them equal the unchunked projection's, and the positions outside ``need`` get 0."""
    cfg = models.get_variant("tiny-qwen3", vocab_size=97, tie_word_embeddings=tie)
    params = models.init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (B, T), 0, 97)
    need = np.zeros((B, T), bool)
    need[0, 9:13] = True
    need[1, 2:5] = need[1, 8:16] = True  # two sequences of a packed row
    need[2, 16] = True  # the last position only
    w = jax.random.normal(jax.random.key(2), (2, B, T))

    def loss(p, compact):
        lp, ent = learner.token_logprobs(
            cfg, p, tokens, chunk_size=chunk if compact else None, with_entropy=True,
            need=jnp.asarray(need), compact=mode if compact else "off", remat_chunks=remat,
        )  # fmt: skip
        m = jnp.asarray(need)
        return jnp.sum(jnp.where(m, w[0] * lp + w[1] * ent, 0.0)), (lp, ent)

    (v0, (lp0, e0)), g0 = jax.value_and_grad(loss, has_aux=True)(params, False)
    (v1, (lp1, e1)), g1 = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)(
        params, True
    )
    np.testing.assert_allclose(np.where(need, lp1, 0), np.where(need, lp0, 0), atol=1e-5)
    np.testing.assert_allclose(np.where(need, e1, 0), np.where(need, e0, 0), atol=1e-5)
    np.testing.assert_array_equal(np.where(need, 0, lp1), 0)
    np.testing.assert_allclose(v1, v0, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_compact_projects_only_the_chunks_needed(monkeypatch):
    """Rows of 40 positions with 8 loss positions each, at different offsets: the plain skip
    projects the 3 chunks of 8 touching a row's loss positions, row compaction 1 chunk (of 2
    rows), batch compaction 2 chunks (of 1 row of 80) (the chunk projections that run are counted
    by a host callback in the projection)."""
    from mojax.learner import logprobs

    cfg = models.get_variant("tiny-qwen3", vocab_size=4096, num_layers=1)
    params = models.init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 40), 0, 4096)
    need = np.zeros((2, 40), bool)
    need[0, 5:13], need[1, 25:33] = True, True
    runs = []
    head_terms = logprobs._head_terms

    def counted(*args):
        jax.debug.callback(lambda: runs.append(1))
        return head_terms(*args)

    monkeypatch.setattr(logprobs, "_head_terms", counted)
    out = {}
    for compact in ("off", "rows", "batch"):
        runs.clear()
        fn = lambda p, compact=compact: learner.token_logprobs(  # noqa: E731
            cfg, p, tokens, chunk_size=8, need=jnp.asarray(need), compact=compact
        )[0]
        out[compact] = jax.block_until_ready(jax.jit(fn)(params))
        jax.effects_barrier()
        out[compact, "runs"] = len(runs)
    assert [out[m, "runs"] for m in ("off", "rows", "batch")] == [3, 1, 2]
    for m in ("rows", "batch"):
        np.testing.assert_allclose(np.where(need, out[m], 0), np.where(need, out["off"], 0),
                                   atol=1e-5)  # fmt: skip


def test_kept_logits_skip_one_head_matmul():
    """``remat_chunks=False``: the compiled value-and-gradient has one logits-shaped product
    ``[B Tc, E] x [E, V]`` (the forward's), against two with recomputed chunks (the forward's and
    the backward's recomputation; the backward's d_head and d_hidden products have other shapes),
    and it keeps the chunks' logits (more temporary memory)."""
    cfg = models.get_variant("tiny-qwen3", vocab_size=4096, num_layers=1)
    params = models.param_shapes(cfg)
    tokens = jax.ShapeDtypeStruct((2, 64), jnp.int32)

    def compiled(remat):
        def loss(p, t):
            return jnp.sum(learner.token_logprobs(cfg, p, t, chunk_size=32, remat_chunks=remat)[0])

        return jax.jit(jax.value_and_grad(loss)).lower(params, tokens).compile()

    def logits_products(c):
        return sum(" dot(" in line and "f32[64,4096]" in line for line in c.as_text().splitlines())

    kept, recomputed = compiled(False), compiled(True)
    assert (logits_products(recomputed), logits_products(kept)) == (2, 1)
    logits = 2 * 64 * 4096 * 4  # [B, T, V] fp32: both chunks kept
    assert kept.memory_analysis().temp_size_in_bytes >= (
        recomputed.memory_analysis().temp_size_in_bytes + logits // 2
    )
