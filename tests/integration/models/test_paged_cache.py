"""The paged KV cache (``mojax.models.paged_cache``) and its attention
(``mojax.models.paged_attention``).

References:
* the gather path against the dense cache attention (``layers.attend`` /
  ``layers.attend_layer_major``) on a dense ``[N, S, K, D]`` array built in numpy from the pool and
  the page tables: equal bit for bit (the same attention on the same keys);
* JAX's Pallas GPU paged-attention kernel, run in Pallas' interpreter on the CPU, against the
  gather path: fp32, 1e-6 (measured differences ~1e-7: the kernel takes an online softmax over
  blocks of pages with ``exp2(x * log2 e)``, divides once by the sum plus fp32 eps, and its
  queries are scaled before the dot; each is a few fp32 roundings of O(1) values);
* the model's cached calls (a padded prefill, then decode steps with idle rows) on a
  ``PagedKVCache`` against the same calls on a ``KVCache``: fp32 logits to 1e-5 (measured ~3e-7:
  the paged rows hold their real keys packed, the dense rows hold padding slots between them, so
  the softmax sums run in another order).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
from mojax.models import layouts
from mojax.models.cache import KVCache, init_cache
from mojax.models.layers import attend, attend_layer_major
from mojax.models.paged_attention import (
    gpu_kernel_blocks,
    gpu_kernel_fits,
    paged_layer,
    pallas_gpu,
    pallas_tpu,
    tpu_kernel_fits,
)
from mojax.models.paged_cache import (
    PagedKVCache,
    gather_layer,
    init_paged_cache,
    place_rows,
    write_layer,
)
from mojax.models.qwen import Qwen

N, H, K, D, PS, NP, PR = 3, 8, 2, 32, 4, 24, 6  # GQA: 4 query heads per kv head


def pool_and_table(seed=0):
    """A random pool [L=2, K, Np, Ps, D] and page tables of distinct, scattered pages; row 2 owns
    fewer pages than its table spans (the rest ``Np``)."""
    rng = np.random.RandomState(seed)
    k = rng.randn(2, K, NP, PS, D).astype(np.float32)
    v = rng.randn(2, K, NP, PS, D).astype(np.float32)
    table = rng.permutation(NP)[: N * PR].reshape(N, PR).astype(np.int32)
    table[2, 3:] = NP
    return k, v, table


def dense_keys(pool, layer, table):
    """[N, Pr*Ps, K, D] in numpy: each row's pages in table order (a missing page: zeros)."""
    out = np.zeros((N, PR * PS, K, D), np.float32)
    for row in range(N):
        for j, page in enumerate(table[row]):
            if page < NP:
                out[row, j * PS : (j + 1) * PS] = pool[layer, :, page].transpose(1, 0, 2)
    return out


def cache_of(k, v, table, lengths):
    return PagedKVCache(
        k=jnp.asarray(k),
        v=jnp.asarray(v),
        page_table=jnp.asarray(table),
        lengths=jnp.asarray(lengths, jnp.int32),
        end=jnp.asarray(lengths, jnp.int32),
        max_len=PR * PS,
    )


def test_gather_layer_reads_each_rows_pages_in_order():
    k, _, table = pool_and_table()
    got = np.asarray(gather_layer(jnp.asarray(k), 1, jnp.asarray(table)))  # [N, K, S, D]
    want = dense_keys(k, 1, table).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(got[:2], want[:2])
    np.testing.assert_array_equal(got[2, :, : 3 * PS], want[2, :, : 3 * PS])


@pytest.mark.parametrize("layer_major", [False, True])
def test_gather_path_equals_the_dense_attention(layer_major):
    """A one-token chunk written at each row's length, then attention over ``[0, length]``: the
    paged gather path gives exactly the dense attention over the same keys."""
    k, v, table = pool_and_table(1)
    lengths = np.asarray([5, 0, 11], np.int32)
    rng = np.random.RandomState(2)
    q = jnp.asarray(rng.randn(N, 1, H, D), jnp.float32)
    kk, vv = (jnp.asarray(rng.randn(N, 1, K, D), jnp.float32) for _ in range(2))
    cache = cache_of(k, v, table, lengths)
    pages = table[np.arange(N), lengths // PS][:, None]
    write = (jnp.asarray(pages), jnp.asarray((lengths % PS)[:, None]))
    fn = attend_layer_major if layer_major else attend
    out, new = paged_layer(
        q, kk, vv, cache, 1, write, jnp.asarray(lengths[:, None]), jnp.asarray(lengths + 1),
        impl="gather", attend_fn=fn, layer_major=layer_major, dtype=jnp.float32,
    )  # fmt: skip
    keys, values = dense_keys(np.asarray(new.k), 1, table), dense_keys(np.asarray(new.v), 1, table)
    np.testing.assert_array_equal(keys[np.arange(N), lengths], np.asarray(kk)[:, 0])
    visible = jnp.asarray(np.arange(PR * PS)[None, None, :] <= lengths[:, None, None])
    qg = q.reshape(N, 1, K, H // K, D)
    if layer_major:
        ref = fn(qg, jnp.asarray(keys.transpose(0, 2, 3, 1)), jnp.asarray(values.transpose(0, 2, 1, 3)),
                 visible, jnp.float32)  # fmt: skip
    else:
        ref = fn(qg, jnp.asarray(keys), jnp.asarray(values), visible, jnp.float32)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref).reshape(N, 1, H, D))


def test_pallas_gpu_kernel_in_the_interpreter_equals_the_gather_path():
    """JAX's Pallas GPU paged attention (interpret mode) against the gather path: GQA, a row with
    no key, a row whose keys end inside a page, one that fills several pages."""
    k, v, table = pool_and_table(3)
    lengths = np.asarray([7, 0, 12], np.int32)
    rng = np.random.RandomState(4)
    q = jnp.asarray(rng.randn(N, 1, H, D), jnp.float32)
    cache = cache_of(k, v, table, lengths)
    kernel = pallas_gpu(
        q[:, 0], cache.k[0], cache.v[0], cache.page_table, cache.lengths, interpret=True
    )
    qg = q.reshape(N, 1, K, H // K, D)
    keys, values = dense_keys(k, 0, table), dense_keys(v, 0, table)
    visible = jnp.asarray(np.arange(PR * PS)[None, None, :] < lengths[:, None, None])
    ref = attend(qg, jnp.asarray(keys), jnp.asarray(values), visible, jnp.float32)
    got = np.asarray(kernel).reshape(N, H, D)
    np.testing.assert_allclose(got[[0, 2]], np.asarray(ref)[[0, 2], 0].reshape(2, H, D),
                               atol=1e-6, rtol=0)  # fmt: skip
    np.testing.assert_array_equal(got[1], 0.0)  # no key: the kernel's sum is 0, its output 0


def test_pallas_tpu_kernel_in_the_interpreter_equals_the_gather_path():
    """JAX's Pallas TPU paged attention (TPU interpreter) on a bf16 pool against the gather path
    on the same bf16 keys and values (fp32 queries and maths): fp32, 1e-6 (measured ~1e-6: an
    online softmax over blocks of pages, one division at the end). Rows as the GPU test."""
    k, v, table = pool_and_table(3)
    k, v = (np.asarray(jnp.asarray(x, jnp.bfloat16)) for x in (k, v))
    lengths = np.asarray([7, 0, 12], np.int32)
    q = jnp.asarray(np.random.RandomState(4).randn(N, 1, H, D), jnp.float32)
    cache = cache_of(k, v, table, lengths)
    assert tpu_kernel_fits(PS, D, jnp.bfloat16, interpret=True)
    assert not tpu_kernel_fits(PS, D, jnp.float32, interpret=True)  # it would round to bf16
    got = np.asarray(
        pallas_tpu(q[:, 0], cache.k[0], cache.v[0], cache.page_table, cache.lengths, interpret=True)
    )
    qg = q.reshape(N, 1, K, H // K, D)
    keys, values = (dense_keys(x.astype(np.float32), 0, table) for x in (k, v))
    visible = jnp.asarray(np.arange(PR * PS)[None, None, :] < lengths[:, None, None])
    ref = np.asarray(attend(qg, jnp.asarray(keys), jnp.asarray(values), visible, jnp.float32))
    np.testing.assert_allclose(got[[0, 2]], ref[[0, 2], 0].reshape(2, H, D), atol=1e-6, rtol=0)


def test_gpu_kernel_blocks_split_the_pages_into_whole_blocks():
    for pages in (1, 3, 8, 9, 40, 200):
        for page_size in (1, 4, 16, 64):
            per_block, splits, padded = gpu_kernel_blocks(pages, page_size)
            assert per_block & (per_block - 1) == 0 and per_block * page_size >= 16
            assert per_block <= max(8, 16 // page_size)
            assert padded >= pages and padded % (per_block * splits) == 0
            assert padded - pages < per_block * splits
    assert gpu_kernel_fits(16, 64) and not gpu_kernel_fits(12, 64) and not gpu_kernel_fits(16, 8)


@pytest.fixture(scope="module")
def model():
    return mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)


@pytest.mark.parametrize(
    "impl, cache_dtype",
    [("cpu", None), ("portable", None), ("pallas_gpu_interpret", None),
     ("pallas_tpu_interpret", "bfloat16")],
)  # fmt: skip
def test_model_on_a_paged_cache_equals_the_dense_cache(model, impl, cache_dtype):
    """A right/inner-padded prefill, then decode steps with idle rows: the logits of the real
    tokens agree, each row holds its real tokens, and the pages no row owns stay untouched (the
    TPU kernel with a bf16 cache on both sides: it loads keys and values as bf16)."""
    lay = {"cpu": layouts.CPU, "portable": layouts.PORTABLE}.get(impl)
    lay = lay or layouts.Layouts(paged_attention=impl)
    cfg = model.config.replace(layouts=lay)

    @jax.jit
    def apply(tokens, attention_mask, cache):
        return Qwen(cfg).apply(
            {"params": model.params}, tokens, attention_mask=attention_mask, cache=cache
        )

    rng = np.random.RandomState(0)
    toks = jnp.asarray(rng.randint(0, 200, (3, 9)))
    mask = rng.rand(3, 9) < 0.7
    dense = init_cache(cfg, 3, 40, cache_dtype)
    paged = init_paged_cache(cfg, 3, 40, 20, 4, cache_dtype)
    owned = rng.permutation(20)[:15].reshape(3, 5)  # pages 5 of 20 owned by no row
    table = np.pad(owned, ((0, 0), (0, 5)), constant_values=20).astype(np.int32)
    paged = paged.replace(page_table=jnp.asarray(table))
    ld, dense = apply(toks, attention_mask=jnp.asarray(mask), cache=dense)
    lp, paged = apply(toks, attention_mask=jnp.asarray(mask), cache=paged)
    np.testing.assert_allclose(np.asarray(lp)[mask], np.asarray(ld)[mask], atol=1e-5, rtol=0)
    for _ in range(8):  # 20 tokens at most: the rows cross page boundaries
        t = jnp.asarray(rng.randint(0, 200, (3, 1)))
        live = rng.rand(3, 1) < 0.8
        ld, dense = apply(t, attention_mask=jnp.asarray(live), cache=dense)
        lp, paged = apply(t, attention_mask=jnp.asarray(live), cache=paged)
        np.testing.assert_allclose(np.asarray(lp)[live], np.asarray(ld)[live], atol=1e-5, rtol=0)
        np.testing.assert_array_equal(np.asarray(paged.lengths), np.asarray(dense.num_valid))
    np.testing.assert_array_equal(np.asarray(paged.end), np.asarray(dense.end))
    unowned = sorted(set(range(20)) - set(owned.ravel().tolist()))
    assert (
        not np.asarray(paged.k)[:, :, unowned].any()
        and not np.asarray(paged.v)[:, :, unowned].any()
    )


def test_place_rows_packs_the_real_slots_into_the_rows_pages(model):
    """A prefilled dense cache (padding inside) placed into two slots: each slot's pages hold the
    row's real keys from position 0, ``lengths`` its real tokens, ``end`` the chunk width."""
    cfg = model.config.replace(layouts=layouts.PORTABLE)
    rng = np.random.RandomState(5)
    mask = np.asarray([[1, 0, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1, 0]], bool)
    part = init_cache(cfg, 2, 7)
    part = KVCache(
        k=jnp.asarray(rng.randn(*part.k.shape), jnp.float32),
        v=jnp.asarray(rng.randn(*part.v.shape), jnp.float32),
        slot_mask=jnp.asarray(mask), end=jnp.full((2,), 7, jnp.int32),
    )  # fmt: skip
    full = init_paged_cache(cfg, 3, 12, 9, 4)
    table = np.full((3, 3), 9, np.int32)
    table[2, :2], table[0, :2] = [6, 1], [3, 8]
    full = full.replace(page_table=jnp.asarray(table))
    # row 1 of part -> slot 2, row 0 -> slot 0, a dropped placement (slot 3 = N)
    got = place_rows(full, part, jnp.asarray([1, 0, 0]), jnp.asarray([2, 0, 3]))
    np.testing.assert_array_equal(np.asarray(got.lengths), [5, 0, 6])
    np.testing.assert_array_equal(np.asarray(got.end), [7, 0, 7])
    for slot, src in ((2, 1), (0, 0)):
        real = np.asarray(part.k)[:, src][:, mask[src]]  # [L, n_real, K, D]
        keys = np.asarray(gather_layer(got.k, 0, got.page_table))[slot]  # [K, S, D]
        np.testing.assert_array_equal(keys[:, : real.shape[1]], real[0].transpose(1, 0, 2))
    untouched = [p for p in range(9) if p not in (6, 1, 3, 8)]
    assert not np.asarray(got.k)[:, :, untouched].any()


def test_scanned_and_unrolled_layers_write_and_read_the_same_pages(model):
    """A scanned model (the layer index traced) on a stacked pool and its unrolled copy on a
    per-layer pool (``Layouts.decode_per_layer``), under jit: the same logits and pages."""
    assert model.config.scan_layers
    unrolled = mm.unstack_layers(model)
    toks, mask = jnp.asarray([[3, 4, 5, 6, 7]]), jnp.asarray([[1, 1, 0, 1, 1]], bool)
    cfg = model.config.replace(layouts=layouts.PORTABLE)
    table = jnp.asarray([[2, 0]], jnp.int32)

    def run(m, per_layer):
        paged = init_paged_cache(cfg, 1, 8, 3, 4, per_layer=per_layer).replace(page_table=table)
        fn = lambda c: Qwen(m.config.replace(layouts=layouts.PORTABLE)).apply(
            {"params": m.params}, toks, attention_mask=mask, cache=c
        )
        return jax.jit(fn)(paged)

    (ls, cs), (lu, cu) = run(model, False), run(unrolled, True)
    assert isinstance(cu.k, tuple) and len(cu.k) == cfg.num_layers
    np.testing.assert_allclose(np.asarray(ls), np.asarray(lu), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(cs.k), np.stack(cu.k), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(cs.v), np.stack(cu.v), atol=1e-5, rtol=0)
    assert not np.asarray(cs.k)[:, :, 1].any()  # page 1 is no row's
    np.testing.assert_array_equal(np.asarray(cs.lengths), [4])
    with pytest.raises(TypeError, match="per-layer page pool needs unrolled layers"):
        run(model, True)


def test_sharded_pools_write_and_read_each_rows_own_shard():
    """``shards=3`` (one row per shard, each with its own pool of Np / 3 pages and shard-local
    ids): a write lands in the row's shard's pool, and the gather reads it back; the reference is
    numpy indexing of the pools laid end to end with global ids."""
    k, _, _ = pool_and_table()
    per = NP // 3
    rng = np.random.RandomState(1)
    table = np.stack([rng.permutation(per)[:PR] for _ in range(N)]).astype(np.int32)
    table[2, 3:] = per  # "no page" in a shard's pool
    glob = np.where(table < per, table + np.arange(N)[:, None] * per, NP)
    new = rng.randn(N, 2, K, D).astype(np.float32)
    page, offset = table[:, :2], np.asarray([[0, 1]] * N, np.int32)
    got = write_layer(
        jnp.asarray(k), 1, jnp.asarray(new), jnp.asarray(page), jnp.asarray(offset), 3
    )
    want = k.copy()
    for row in range(N):
        for t in range(2):
            want[1, :, glob[row, t], offset[row, t]] = new[row, t]
    np.testing.assert_array_equal(np.asarray(got), want)
    read = np.asarray(gather_layer(got, 1, jnp.asarray(table), 3))  # [N, K, S, D]
    ref = dense_keys(want, 1, glob).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(read[:2], ref[:2])
    np.testing.assert_array_equal(read[2, :, : 3 * PS], ref[2, :, : 3 * PS])
