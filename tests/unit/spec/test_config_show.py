"""``--config.mode=show`` (``mojax.spec.show.show``): every leaf key of the resolved config appears with
its value and with the help of the spec field that reads it (field metadata, ``mojax.config.option``);
every key of the base config is read by some spec field, and every spec field reads a base-config key."""

import dataclasses
import json
import typing

import pytest
from mojax_test_utils import load_config


def _leaves(d, prefix=""):
    """Reference flattening over the config's JSON dump (not ``show.flatten``)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _spec_fields():
    """Every ``{config key: help}`` of the spec dataclasses, found by walking ``RunSpec``'s field
    types and the sections the advantage methods and the engines declare."""
    from mojax import spec as spec_lib
    from mojax.sampling import protocol

    out = {}
    hints = typing.get_type_hints(spec_lib.RunSpec)
    classes = [spec_lib.RunSpec, *spec_lib.method_sections().values()]
    classes += protocol.engine_sections().values()
    classes += [t for t in hints.values() if dataclasses.is_dataclass(t)]
    for cls in classes:
        for f in dataclasses.fields(cls):
            if "help" in f.metadata:
                key = f.metadata.get("key") or ".".join(x for x in (cls.SECTION, f.name) if x)
                out[key] = f.metadata["help"]
    return out


@pytest.mark.parametrize("name", ["paretopo", "awpo", "vpo"])
def test_show_lists_every_key_with_value_and_help(name):
    from mojax.spec.show import show

    c = load_config(name)
    rows = {}
    for line in show(c).splitlines():
        key, _, rest = line.partition(" = ")
        value, _, help_ = rest.partition("  # ")
        rows[key] = (value.strip(), help_)
    leaves = _leaves(json.loads(c.to_json()))
    assert set(rows) == set(leaves)
    for key, value in leaves.items():
        shown = rows[key][0]
        if isinstance(value, list):  # JSON turns tuples into lists
            assert shown in (repr(value), repr(tuple(value))), key
        elif value == {}:
            assert shown == "{}", key
        else:
            assert shown == repr(value), key
    fields = _spec_fields()
    for key in rows:
        enclosing = [key] + [key.rsplit(".", i)[0] for i in range(1, key.count(".") + 1)]
        want = next((fields[k] for k in enclosing if k in fields), None)
        assert want, f"{key} has no spec field with help"
        assert rows[key][1] == want, key
    assert rows["rollout.num_samples"][1] == "G: samples per prompt"
    assert rows["dapo.dynamic_sampling"][1].startswith("DAPO:")  # read by DapoSpec


def test_every_base_config_key_is_a_spec_field_and_back():
    from mojax import defaults
    from mojax.spec import help_texts

    keys = set(_leaves(json.loads(defaults.base_config().to_json())))
    helps = help_texts()
    mapping_fields = {k for k in helps if any(x.startswith(k + ".") for x in keys)}
    unread = {
        k for k in keys if k not in helps and not any(k.startswith(m + ".") for m in mapping_fields)
    }
    assert not unread, sorted(unread)
    assert all(isinstance(h, str) and h for h in helps.values())
    extra = {k for k in helps if k not in keys and k not in mapping_fields}
    assert not extra, sorted(extra)
