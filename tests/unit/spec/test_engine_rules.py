"""The run spec's rules ask the engine registry (``mojax.sampling.protocol``), never an engine's
name: whether an engine lays a rollout's rows over the mesh's batch axes (its module's
``SPLITS_ROWS``: then ``B = prompts_per_step x num_samples`` must divide them) and which KV caches
it keeps (``KV_CACHES``: ``rollout.kv_cache``). A toy engine registered in the test plugs in
through its module's declarations; before, the rules said ``engine == "static"`` /
``engine == "continuous"`` and refused or let through a third engine by its name."""

import sys
import types

import pytest
from mojax_test_utils import load_config

from mojax.config import ConfigError
from mojax.sampling import protocol
from mojax.spec import validate

NINE_ROWS = r"config.rollout.prompts_per_step: B = prompts_per_step x num_samples = 3 x 3 = 9 "
NINE_ROWS += r"must be a multiple of the 2 devices the mesh spreads rows over"


def _register(monkeypatch, name: str, **declared) -> None:
    """A toy engine module ``toy_engine_<name>`` in ``protocol.SAMPLERS`` (for this test only)."""
    module = types.ModuleType(f"toy_engine_{name}")
    module.build = lambda model_config, rollout, mesh, rules: None
    for key, value in declared.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(protocol.SAMPLERS, name, f"{module.__name__}:build")


def _config(engine: str, packed: bool, kv_cache: str = "dense"):
    c = load_config("grpo")  # mesh data=-1: every device on the batch axes
    with c.unlocked():
        c.rollout.prompts_per_step, c.rollout.num_samples = 3, 3  # B = 9 rows
        c.rollout.engine, c.rollout.kv_cache = engine, kv_cache
        c.packing.enabled = packed
    return c


def test_the_built_in_engines_declare_their_rows_and_caches():
    assert protocol.splits_rows("static") is True
    assert protocol.splits_rows("continuous") is False
    assert protocol.kv_caches("static") == ("dense",)
    assert protocol.kv_caches("continuous") == ("dense", "paged")


@pytest.mark.parametrize("splits", [True, False])
def test_the_batch_rule_asks_the_engine_whether_it_splits_its_rows(monkeypatch, splits):
    """Packed, only an engine that splits its rows needs B to divide the 2 row devices (the
    update rebuilds its rows); unpacked, the update's rows always do."""
    _register(monkeypatch, "toy", SPLITS_ROWS=splits)
    assert protocol.splits_rows("toy") is splits
    if splits:
        with pytest.raises(ConfigError, match=NINE_ROWS):
            validate(_config("toy", packed=True), num_devices=2)
    else:
        assert validate(_config("toy", packed=True), num_devices=2).rollout.engine == "toy"
    with pytest.raises(ConfigError, match=NINE_ROWS):
        validate(_config("toy", packed=False), num_devices=2)
    assert validate(_config("toy", packed=False), num_devices=3).rollout.engine == "toy"


def test_an_engine_that_does_not_say_splits_its_rows_and_keeps_a_dense_cache(monkeypatch):
    _register(monkeypatch, "quiet")
    assert protocol.splits_rows("quiet") is True and protocol.kv_caches("quiet") == ("dense",)
    with pytest.raises(ConfigError, match=NINE_ROWS):
        validate(_config("quiet", packed=True), num_devices=2)
    says = (
        r"config.rollout.kv_cache: 'paged' needs rollout.engine='continuous' \(the quiet engine "
        r"keeps a dense cache\)"
    )
    with pytest.raises(ConfigError, match=says):
        validate(_config("quiet", packed=False, kv_cache="paged"), num_devices=1)


def test_the_kv_cache_rule_asks_the_engine_which_caches_it_keeps(monkeypatch):
    _register(monkeypatch, "pager", SPLITS_ROWS=False, KV_CACHES=("dense", "paged"))
    spec = validate(_config("pager", packed=False, kv_cache="paged"), num_devices=1)
    assert spec.rollout.kv_cache == "paged"
    says = r"'paged' needs rollout.engine=one of \['continuous', 'pager'\] \(the static engine"
    with pytest.raises(ConfigError, match=says):
        validate(_config("static", packed=False, kv_cache="paged"), num_devices=1)
