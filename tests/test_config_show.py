"""``mojax.config_show.show`` (issue 16 item 4): every leaf key of the resolved config appears with
its value, and with the trailing comment of the line in ``defaults.base_config`` that sets it."""

import inspect
import json
import re

from mojax_test_utils import load_config


def _leaves(d, prefix=""):
    """Reference flattening over the config's JSON dump (not ``config_show.flatten``)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _reference_help():
    """``c.a.b = value  # help`` on one source line of base_config, by regular expression."""
    from mojax import defaults

    pattern = re.compile(r"^\s*c\.([\w.]+)\s*=[^#]*?#\s*(.*?)\s*$")
    out = {}
    for line in inspect.getsource(defaults.base_config).splitlines():
        m = pattern.match(line)
        if m and line.count('"') % 2 == 0 and line.count("'") % 2 == 0:
            out[m.group(1)] = m.group(2)
    return out


def test_show_lists_every_key_with_value_and_help():
    from mojax import config_show

    c = load_config("paretopo")
    text = config_show.show(c)
    rows = {}
    for line in text.splitlines():
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
    ref = _reference_help()
    assert len(ref) > 40
    for key, help_ in ref.items():
        if key in rows:
            assert rows[key][1] == help_, key
    assert rows["rollout.num_samples"][1] == "G"
    # a multi-line assignment takes its comment from inside the parentheses
    assert rows["rollout.sandbox"][1].startswith("math's Python tool")
    # keys set without a comment show no help
    assert rows["seed"][1] == "" and rows["checkpoint_every"][1] == ""


def test_help_texts_only_from_base_config_assignments():
    from mojax import config_show

    def f():
        c = object()
        c.a = 1  # one
        c.b.x = (  # two
            2
        )
        c.d = 3
        x = 4  # not a key
        return c, x

    assert config_show.help_texts(f) == {"a": "one", "b.x": "two"}
