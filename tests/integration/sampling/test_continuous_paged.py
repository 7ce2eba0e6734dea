"""The continuous sampler on a paged KV cache (``ContinuousSampler(kv_cache="paged")``,
``mojax.models.paged_cache``, ``mojax.sampling.continuous.pages``).

References: the static in-graph sampler and the dense continuous sampler on the same key. Tokens,
lengths, finish reasons and loss masks must be equal; log-probs agree to 1e-5 (as in
``test_continuous.py``: XLA CPU's matmuls round differently for different row counts, and the
paged rows hold their real keys packed where a dense row holds padding slots between them, so
the softmax sums run in another order). The page log is checked against the allocator's rule:
a running slot owns at most the pages of its live tokens plus one segment's budget.
"""

import jax
import numpy as np
import pytest
from mojax_test_utils import continuous_prompts as prompts
from mojax_test_utils import continuous_scene
from mojax_test_utils import same_sampling_output as assert_same

import mojax.models as mm
import mojax.sampling as ms
from mojax.sampling.continuous.engine import ContinuousSampler
from mojax.sampling.continuous.pages import PagePool, pages_for

SHAPES = dict(max_response_len=64, max_total_len=128, num_samples=2)
STOPS = (5, 17, 33)
PAGE = 4  # rows of 4..10 prompt tokens and up to 40 new ones cross many page boundaries


@pytest.fixture(scope="module")
def model():
    return mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)


def assert_pages_follow_live_tokens(sampler, num_slots):
    """Each segment: pages in use <= ceil(live / Ps) + headroom, where headroom is one segment's
    pages plus one partly filled page per running slot; at the end every page is free."""
    pages = sampler.pages
    ahead = int(pages_for(pages.budget, PAGE)) + 1
    assert pages.log
    for in_use, live, running in pages.log:
        assert running <= num_slots
        assert in_use <= int(pages_for(live, PAGE)) + running * ahead, (in_use, live, running)
    assert pages.pool.all_free()
    return pages


@pytest.fixture(scope="module")
def scene(model):
    """A call and two appended turns (per-row budgets, stop ids, a forced stop, temperature 1,
    top-p on the turns) and the static sampler's outputs, computed once for every slot count."""
    toks, kw, turns, refs = continuous_scene(model, STOPS, SHAPES)
    assert len(set(np.asarray(refs[0].lengths).tolist())) > 3  # rows of many lengths
    return toks, kw, turns, refs


def run_turns(sampler, toks, kw, turns):
    outs = [sampler.generate(toks, **kw)]
    for obs, obs_len, resume, more in turns:
        outs.append(sampler.append_and_continue(outs[-1].state, obs, obs_len, resume, **more))
    return outs


@pytest.mark.parametrize("num_slots", [1, 8])  # 3 slots: the dense test
def test_paged_equals_static_over_turns(model, scene, num_slots):
    """Fewer (or as many) slots than rows, page size 4 (rows cross many page boundaries), a pool
    of 24 pages that makes rows wait for pages at 8 slots: the static sampler's tokens, and the
    page rule at every segment of every turn."""
    toks, kw, turns, refs = scene
    paged = ContinuousSampler.of(model, slots=num_slots, kv_cache="paged", page_size=PAGE,
                                 num_pages=24)  # fmt: skip
    got = paged.generate(toks, **kw)
    assert_same(got, refs[0])
    log = assert_pages_follow_live_tokens(paged, num_slots).log
    if num_slots == 8:  # 24 pages cannot hold the 8 rows' bounds at once: some rows waited
        assert max(running for _, _, running in log) < 8
    for (obs, obs_len, resume, more), ref in zip(turns, refs[1:]):
        got = paged.append_and_continue(got.state, obs, obs_len, resume, **more)
        assert_same(got, ref)
        assert_pages_follow_live_tokens(paged, num_slots)


def test_paged_equals_the_dense_continuous_sampler(model, scene):
    """Both caches on 3 slots over the call and its two turns: the same tokens."""
    toks, kw, turns, refs = scene
    dense = run_turns(ContinuousSampler.of(model, slots=3), toks, kw, turns)
    paged_sampler = ContinuousSampler.of(model, slots=3, kv_cache="paged", page_size=PAGE)
    paged = run_turns(paged_sampler, toks, kw, turns)
    for got, den, ref in zip(paged, dense, refs):
        assert_same(got, den)
        assert_same(got, ref)
    assert_pages_follow_live_tokens(paged_sampler, 3)


def test_a_long_tailed_batch_uses_pages_for_its_live_tokens(model, monkeypatch):
    """One long row among short ones: the pages in use follow the live tokens, far below the
    dense slots x cache width, and a pool smaller than the dense cache gives the same tokens.
    The call builds its pool once: the one checked before the prefill is the one it runs on."""
    toks, lens = prompts(2)
    max_new = np.asarray([60, 3, 4, 2, 3, 5, 2, 4])
    kw = dict(key=jax.random.key(7), temperature=1.0, prompt_lengths=lens, max_new_tokens=max_new)
    kw.update(SHAPES)
    ref = ms.generate(model, toks, **kw)
    paged = ContinuousSampler.of(model, slots=4, kv_cache="paged", page_size=PAGE, num_pages=30)
    built, init = [], PagePool.__init__
    monkeypatch.setattr(
        PagePool, "__init__", lambda self, *a: (built.append(self), init(self, *a))[1]
    )
    assert_same(paged.generate(toks, **kw), ref)
    assert len(built) == 1 and built[0] is paged.pages.pool
    pages = assert_pages_follow_live_tokens(paged, 4)
    dense_pages = 4 * int(pages_for(SHAPES["max_total_len"], PAGE))  # 128 pages
    assert pages.pool.peak <= 30 < dense_pages
    tail = [in_use for in_use, _, running in pages.log if running == 1]
    assert tail and max(tail) <= int(pages_for(10 + 60, PAGE))  # the long row alone


def test_a_row_that_cannot_fit_the_pool_is_one_clear_error(model, monkeypatch):
    """Before anything compiles (the prompt prefill is not reached)."""
    toks, lens = prompts()
    paged = ContinuousSampler.of(model, slots=2, kv_cache="paged", page_size=PAGE, num_pages=5)

    def no_prefill(*args, **kwargs):
        raise AssertionError("the prompts were prefilled before the pool was checked")

    monkeypatch.setattr("mojax.sampling.continuous.slots.prefill", no_prefill)
    with pytest.raises(ValueError, match=r"config.continuous.num_pages=5 .* cannot hold row 0"):
        paged.generate(toks, key=jax.random.key(0), max_new_tokens=20, prompt_lengths=lens,
                       **SHAPES)  # fmt: skip


def test_bad_paged_settings_fail_at_construction(model):
    for bad in (dict(kv_cache="ragged"), dict(kv_cache="paged", page_size=0),
                dict(kv_cache="paged", num_pages=-1)):  # fmt: skip
        with pytest.raises(ValueError, match="kv_cache must be one of"):
            ContinuousSampler.of(model, slots=2, **bad)


def test_preempted_rows_go_on_with_the_same_tokens(model):
    """20 pages for 4 slots of rows that grow to 13 pages each: the newest rows are preempted
    (recompute) and placed again from their context; every row samples the static tokens."""
    toks, lens = prompts(3)
    kw = dict(key=jax.random.key(9), temperature=1.0, prompt_lengths=lens, max_new_tokens=40)
    kw.update(SHAPES)
    ref = ms.generate(model, toks, **kw)
    paged = ContinuousSampler.of(model, slots=4, kv_cache="paged", page_size=PAGE, num_pages=20)
    assert_same(paged.generate(toks, **kw), ref)
    assert paged.pages.preemptions > 0
    assert_pages_follow_live_tokens(paged, 4)
    assert paged.pages.pool.peak <= 20


def test_page_pool_opens_grows_and_releases():
    pool = PagePool(num_pages=6, page_size=4, slots=3, max_len=20)  # 5 pages per slot at most
    pool.open(0, 9)  # 9 tokens: 3 pages at most
    pool.grow(0, 5)
    np.testing.assert_array_equal(pool.table[0], [0, 1, 6, 6, 6])
    pool.grow(0, 100)  # capped by the row's bound
    assert pool.owned[0] == 3 and pool.in_use == 3 and pool.need(0, 100) == 0
    pool.open(1, 40)  # capped at the 5 pages of a slot's table
    assert pool.need(1, 20) == 5
    with pytest.raises(ValueError, match="slot 1 needs 5 pages, 3 are free"):
        pool.grow(1, 20)
    assert pool.owned[1] == 0  # nothing taken
    pool.grow(1, 12)
    np.testing.assert_array_equal(pool.table[1], [3, 4, 5, 6, 6])
    pool.release(0)
    assert pool.in_use == 3 and pool.free_pages == 3
    pool.open(2, 8)
    pool.grow(2, 8)
    assert sorted(pool.table[2, :2].tolist()) == [0, 1]  # the released pages, reused
    with pytest.raises(ValueError, match="release it first"):
        pool.open(2, 4)
    pool.release(1), pool.release(2)
    assert pool.all_free() and pool.peak == 6


def test_page_pool_shards_keep_each_slot_in_its_shards_pool():
    """Two shards (a mesh): slots 0-1 take pages of pool 0, slots 2-3 of pool 1, by shard-local
    ids; a shard runs short on its own while the other has pages."""
    pool = PagePool(num_pages=8, page_size=4, slots=4, max_len=16, shards=2)
    assert pool.local_pages == 4 and (pool.table == 4).all()  # 4: "no page"
    for slot in (0, 2):
        pool.open(slot, 16)
        pool.grow(slot, 12)  # 3 pages
    np.testing.assert_array_equal(pool.table[[0, 2], :3], [[0, 1, 2], [0, 1, 2]])
    assert (pool.free_in(0), pool.free_in(1), pool.free_pages) == (1, 1, 2)
    pool.open(1, 16)
    with pytest.raises(ValueError, match="slot 1 needs 2 pages, 1 are free in its shard"):
        pool.grow(1, 8)
    pool.release(2)
    assert (pool.free_in(0), pool.free_in(1)) == (1, 4)  # back to its own shard's pool
    pool.release(0)
    assert pool.all_free()
    with pytest.raises(ValueError, match="must split evenly into the 2 shards"):
        PagePool(num_pages=7, page_size=4, slots=4, max_len=16, shards=2)
