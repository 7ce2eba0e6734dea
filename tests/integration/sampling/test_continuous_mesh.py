"""The continuous sampler on a mesh (one process, 8 forced CPU devices; ``conftest.run_with_devices``).

Reference: the static in-graph sampler on one device, unsharded, same key. Mesh ("data", "fsdp",
"tensor") = (2, 2, 2): the slots lie over data x fsdp (4 shards), the weights on their learner
shardings. A call and two appended turns at temperature 1 with stop ids, a forced stop and per-row
budgets, with fewer slots than rows, and as many over a paged cache (one pool per shard of
slots; as many unpaged slots as rows run on one device in ``test_continuous.py``): tokens,
lengths, finish reasons and loss masks equal, log-probs within 1e-5 (``same_sampling_output``:
reduction order only). Every decode segment, and every prefill (the prompts, a resumed row's
context), must run on all 8 devices with the rows split over the batch axes.
"""

STOPS = (5, 17, 33)
SHAPES = dict(max_response_len=64, max_total_len=128, num_samples=2)


def mesh_against_static(slot_counts) -> dict:
    """Runs in the 8-device child; asserts there, returns what the segments ran on."""
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from mojax_test_utils import continuous_scene, same_sampling_output

    import mojax.models as mm
    from mojax.models.paged_cache import PagedKVCache
    from mojax.sampling.continuous import engine as continuous
    from mojax.sampling.continuous import slots

    assert jax.device_count() == 8
    model = mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    seen, filled, segment, prefill = [], [], slots.segment, slots.prefill

    pools = []  # paged: (per-device pool shape, whole pool shape, pool-sized all-gathers)

    def recording(m, s, *args, **kwargs):
        seen.append((len(s.done.sharding.device_set), str(s.tokens.sharding.spec)))
        if isinstance(s.cache, PagedKVCache) and not pools:
            pool = s.cache.k[0]  # [K, Np, Ps, D], one layer's
            hlo = segment.lower(m, s, *args, **kwargs).compile().as_text()
            whole = ",".join(str(x) for x in pool.shape)
            gathers = [x for x in hlo.splitlines() if "all-gather" in x and f"[{whole}]" in x]
            pools.append((pool.addressable_shards[0].data.shape, pool.shape, len(gathers)))
        return segment(m, s, *args, **kwargs)

    def recording_prefill(m, tokens, *args, **kwargs):
        filled.append((len(tokens.sharding.device_set), str(tokens.sharding.spec)))
        return prefill(m, tokens, *args, **kwargs)

    slots.segment, slots.prefill = recording, recording_prefill  # the attributes the sampler calls
    toks, kw, turns, refs = continuous_scene(model, STOPS, SHAPES)
    weights = set()
    for n, cache in slot_counts:  # fewer slots than rows (4), as many (8) paged
        sampler = continuous.ContinuousSampler.of(model, slots=n, mesh=mesh, **cache)
        got = sampler.generate(toks, **kw)
        same_sampling_output(got, refs[0])
        for (obs, obs_len, resume, more), ref in zip(turns, refs[1:]):
            got = sampler.append_and_continue(got.state, obs, obs_len, resume, **more)
            same_sampling_output(got, ref)
        weights |= {len(x.sharding.device_set) for x in jax.tree.leaves(sampler.model.params)}
        if cache:
            assert sampler.pages.pool.all_free()
            pools.append(sampler.pages.preemptions)  # of the last call
    return dict(
        segments=seen, prefills=filled, weights=weights, refusals=refusals(mesh), pools=pools
    )


def refusals(mesh) -> list[str]:
    """The settings the mesh path refuses, each one message."""
    import mojax.models as mm
    from mojax.sampling.continuous.engine import ContinuousSampler

    cfg = mm.get_variant("tiny-qwen3")
    out = []
    for kw in (dict(slots=6), dict(slots=8, kv_cache="paged", num_pages=30)):
        try:
            ContinuousSampler(cfg, mesh=mesh, **kw)
        except ValueError as e:
            out.append(str(e))
    return out


def test_continuous_sampler_on_a_mesh_equals_the_static_sampler():
    """4 slots, and 8 slots over a paged cache (4 pools of 16 pages of 4 tokens: rows cross
    pages, and in the last turn a shard's two slots outgrow its pool), on one 8-device child (the
    static references computed once); the mesh's refusals there too."""
    from conftest import run_with_devices

    paged = dict(kv_cache="paged", page_size=4, num_pages=64)
    out = run_with_devices(mesh_against_static, ((4, {}), (8, paged)), devices=8)
    assert out["segments"] and out["weights"] == {8}
    assert len(out["prefills"]) >= 6  # the prompts, and the resumed rows of each turn, twice
    for devices, spec in out["segments"] + out["prefills"]:
        assert devices == 8 and "('data', 'fsdp')" in spec, (devices, spec)
    # each device holds its shard's pool: a quarter of the pages, and no segment gathers the pool
    (local, whole, gathers), preempted = out["pools"]
    assert local[1] * 4 == whole[1] == 64 and gathers == 0, out["pools"]
    assert preempted > 0  # a shard's slots outgrew its pool and a row was preempted
    slots, pages = out["refusals"]
    assert "config.continuous.slots=6 must be a multiple of the 4 devices" in slots
    assert "config.continuous.num_pages=30 must be a multiple of the 4 devices" in pages
