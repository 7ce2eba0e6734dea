"""``continuous.kv_cache`` / ``continuous.page_size`` / ``continuous.num_pages``: impossible settings
are one error naming the key before anything is built; the paged settings reach the continuous
sampler."""

import pytest
from mojax_test_utils import load_config

from mojax import spec as spec_lib
from mojax.config import ConfigError
from mojax.rl import builders

ENGINE_KEYS = ("slots", "kv_cache", "page_size", "num_pages", "prefill_prompts", "refill_slots")


def _config(engine="static", **keys):
    """``grpo`` with ``sampler.engine`` and the keys set in ``config.continuous`` (the engine's own)
    or ``config.rollout``."""
    c = load_config("grpo")
    with c.unlocked():
        c.sampler.engine = engine
        for key, value in keys.items():
            (c.continuous if key in ENGINE_KEYS else c.rollout)[key] = value
    return c


@pytest.mark.parametrize(
    "rollout, says",
    [
        (dict(kv_cache="ragged"), r"config.continuous.kv_cache: 'ragged' is not allowed; allowed "
         r"values: \['dense', 'paged'\]"),
        (dict(kv_cache="paged"), r"config.continuous.kv_cache: 'paged' is set, but sampler.engine"),
        (dict(engine="continuous", kv_cache="paged", page_size=0), r"config.continuous.page_size"),
        (dict(engine="continuous", kv_cache="paged", num_pages=-1), r"config.continuous.num_pages"),
        (
            dict(engine="continuous", kv_cache="paged", num_pages=3, page_size=16,
                 max_prompt_len=40, max_response_len=48),
            r"config.continuous.num_pages: 3 pages of continuous.page_size=16 tokens cannot hold one "
            r"row of rollout.max_prompt_len \+ rollout.max_response_len = 88 tokens",
        ),
    ],
)  # fmt: skip
def test_impossible_paged_settings_name_their_key(rollout, says):
    with pytest.raises(ConfigError, match=says):
        spec_lib.validate(_config(**rollout), num_devices=1)


def test_the_paged_settings_reach_the_continuous_sampler():
    c = _config(engine="continuous", kv_cache="paged", page_size=8, num_pages=6, slots=3,
                max_prompt_len=0, max_response_len=48)  # fmt: skip
    spec = spec_lib.validate(c, num_devices=1)
    import mojax.models as mm

    sampler = builders.build_sampler(spec, mm.get_variant("tiny-qwen3"), None, ())
    assert (sampler.kv_cache, sampler.page_size, sampler.num_pages) == ("paged", 8, 6)
    assert sampler.num_slots == 3
    assert (
        spec_lib.validate(load_config("grpo"), num_devices=1).engines["continuous"].kv_cache
        == "dense"
    )


@pytest.mark.parametrize(
    "rollout, mesh, says",
    [
        (dict(slots=6), dict(data=2, fsdp=2), r"config.continuous.slots: 6 must be a multiple of the 4 "
         r"devices the mesh spreads rows over \(its 'batch' axes, mesh \{'data': 2, 'fsdp': 2, "
         r"'tensor': 2\}\)"),
        (dict(slots=8, kv_cache="paged", num_pages=30), dict(data=-1),
         r"config.continuous.num_pages: 30 must be a multiple of the 8 devices the mesh spreads "
         r"rows over \(one pool of pages per device\)"),
    ],
)  # fmt: skip
def test_the_continuous_engine_on_a_mesh_is_checked_before_anything_is_built(rollout, mesh, says):
    """8 devices (a sweep validating for its cluster): slots over the data x fsdp shards, the
    paged cache's pages per device; 8 slots (a dense cache, or 0 pages: the dense capacity) on
    the same mesh validate."""
    c = _config(engine="continuous", **rollout)
    with c.unlocked():
        c.mesh.update(dict(tensor=2, **mesh) if "fsdp" in mesh else mesh)
    with pytest.raises(ConfigError, match=says):
        spec_lib.validate(c, num_devices=8)
    with c.unlocked():
        c.continuous.slots, c.continuous.num_pages = 8, 0
    assert spec_lib.validate(c, num_devices=8).engine_options.slots == 8


def test_prefill_prompts_reaches_the_continuous_sampler():
    c = _config(engine="continuous", slots=4, prefill_prompts=3)
    spec = spec_lib.validate(c, num_devices=1)
    import mojax.models as mm

    assert builders.build_sampler(spec, mm.get_variant("tiny-qwen3"), None, ()).prefill_prompts == 3
    with pytest.raises(ConfigError, match="config.continuous.prefill_prompts"):
        spec_lib.validate(_config(engine="continuous", prefill_prompts=-1), num_devices=1)


def test_refill_slots_reaches_the_continuous_sampler():
    c = _config(engine="continuous", slots=4, refill_slots=3)
    spec = spec_lib.validate(c, num_devices=1)
    import mojax.models as mm

    assert builders.build_sampler(spec, mm.get_variant("tiny-qwen3"), None, ()).refill == 3
    with pytest.raises(
        ConfigError, match=r"config.continuous.refill_slots: 5 must be <= continuous.slots=4"
    ):
        spec_lib.validate(_config(engine="continuous", slots=4, refill_slots=5), num_devices=1)
    with pytest.raises(ConfigError, match="config.continuous.refill_slots"):
        spec_lib.validate(_config(engine="continuous", refill_slots=0), num_devices=1)
