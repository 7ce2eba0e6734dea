"""Every ``configs/*.py`` loads and validates (``mojax.rl.spec.validate``) with no argument and with
every ``:arg`` its docstring documents; nothing is built or compiled."""

import ast
import importlib.util
import pathlib
import re

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.py"))


def documented_args(path: pathlib.Path) -> list[str | None]:
    """``None`` plus every ``configs/<name>.py:<arg>`` written in the file's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    found = re.findall(rf"configs/{path.stem}\.py:(\S+)", doc)
    return [None] + sorted(set(a.rstrip("\\`") for a in found))


def load(path: pathlib.Path, arg):
    spec = importlib.util.spec_from_file_location(f"cfg_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


CASES = [(p, a) for p in CONFIGS for a in documented_args(p)]


def test_every_config_documents_its_commands():
    assert len(CONFIGS) >= 10
    assert {p.stem for p, a in CASES if a and "paper=true" in a} >= {"paretopo", "saw", "vpo"}


@pytest.mark.parametrize(("path", "arg"), CASES, ids=[f"{p.stem}:{a}" for p, a in CASES])
def test_config_loads_and_validates(path, arg):
    from mojax.rl.spec import validate

    config = load(path, arg)
    axes = [config.mesh.data, config.mesh.fsdp, config.mesh.tensor]
    devices = int(np.prod(axes)) if min(axes) > 0 else "auto"  # the mesh the command is for
    spec = validate(config, num_devices=devices)
    assert spec.steps >= 0
    if arg and "paper=true" in arg:
        assert spec.optimizer.learning_rate == pytest.approx(1e-6)


def test_unknown_arg_is_rejected_naming_it():
    with pytest.raises(ValueError, match="'modle' is unknown"):
        load(REPO / "configs" / "grpo.py", "modle=tiny")
