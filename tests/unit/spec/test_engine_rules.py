"""The run spec's rules ask the engine registry (``mojax.sampling.protocol``), never an engine's
name: whether an engine lays a rollout's rows over the mesh's batch axes (its module's
``SPLITS_ROWS``: then ``B = prompts_per_step x num_samples`` must divide them) and which config
section is its own (``CONFIG``: ``config.continuous`` is the continuous engine's). A toy engine
registered in the test plugs in through its module's declarations; before, the rules said
``engine == "static"`` / ``engine == "continuous"`` and refused or let through a third engine by its
name. A value set in the section of an engine that does not run is refused, not ignored."""

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
    module.build = lambda model_config, rollout, options, mesh, rules: None
    for key, value in declared.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(protocol.SAMPLERS, name, f"{module.__name__}:build")


def _config(engine: str, packed: bool, kv_cache: str = "dense"):
    c = load_config("grpo")  # mesh data=-1: every device on the batch axes
    with c.unlocked():
        c.rollout.prompts_per_step, c.rollout.num_samples = 3, 3  # B = 9 rows
        c.sampler.engine, c.continuous.kv_cache = engine, kv_cache
        c.packing.enabled = packed
    return c


def test_the_built_in_engines_declare_their_rows_and_sections():
    from mojax.sampling.continuous.config import ContinuousConfig

    assert protocol.splits_rows("static") is True
    assert protocol.splits_rows("continuous") is False
    assert protocol.engine_sections() == {"continuous": ContinuousConfig}
    sections = {"continuous": ContinuousConfig(slots=4)}
    assert protocol.options("static", sections) is None
    assert protocol.options("continuous", sections) == ContinuousConfig(slots=4)


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
        assert validate(_config("toy", packed=True), num_devices=2).sampler.engine == "toy"
    with pytest.raises(ConfigError, match=NINE_ROWS):
        validate(_config("toy", packed=False), num_devices=2)
    assert validate(_config("toy", packed=False), num_devices=3).sampler.engine == "toy"


def test_an_engine_that_does_not_say_splits_its_rows_and_has_no_section(monkeypatch):
    _register(monkeypatch, "quiet")
    assert protocol.splits_rows("quiet") is True
    assert "quiet" not in protocol.engine_sections()
    with pytest.raises(ConfigError, match=NINE_ROWS):
        validate(_config("quiet", packed=True), num_devices=2)
    assert validate(_config("quiet", packed=False), num_devices=1).engine_options is None
    says = (
        r"config.continuous.kv_cache: 'paged' is set, but sampler.engine='quiet' runs \(config."
        r"continuous applies to the continuous engine only\); allowed: the default 'dense', or "
        r"sampler.engine='continuous'"
    )
    with pytest.raises(ConfigError, match=says):
        validate(_config("quiet", packed=False, kv_cache="paged"), num_devices=1)


def test_the_static_engine_refuses_the_continuous_engines_settings():
    """Before, ``rollout.slots=64`` with the static engine was silently ignored."""
    with pytest.raises(ConfigError, match=r"config.continuous.kv_cache: 'paged' is set, but "):
        validate(_config("static", packed=False, kv_cache="paged"), num_devices=1)
    spec = validate(_config("continuous", packed=False, kv_cache="paged"), num_devices=1)
    assert (
        spec.engine_options.kv_cache == "paged" and spec.engines["continuous"].kv_cache == "paged"
    )
