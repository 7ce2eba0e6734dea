"""The real-data tiny runs read the Qwen2 tokenizer from the shared folder; when it is missing, the
error names ``config.tokenizer.path`` and ``$MOJAX_SHARED_DIR`` with its value (issue 14)."""

import importlib.util
import pathlib

import pytest
from mojax_test_utils import run_spec

from mojax.rl import builders

REPO = pathlib.Path(__file__).resolve().parents[3]


def grpo(arg):
    spec = importlib.util.spec_from_file_location("cfg_grpo", REPO / "configs" / "grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def test_missing_shared_tokenizer_names_the_variable(tmp_path, monkeypatch):
    shared = tmp_path / "elsewhere"
    monkeypatch.setenv("MOJAX_SHARED_DIR", str(shared))
    c = grpo("task=math")
    assert c.tokenizer.path == str(shared / "assets" / "qwen2-tokenizer")
    with pytest.raises(FileNotFoundError) as info:
        builders.build_tokenizer(run_spec(c), None, None, str(tmp_path))
    msg = str(info.value)
    assert msg.startswith("config.tokenizer.path: tokenizer not found: ")
    assert f"$MOJAX_SHARED_DIR={shared}, and that folder does not exist" in msg


def test_default_shared_folder_is_beside_the_checkout(monkeypatch):
    monkeypatch.delenv("MOJAX_SHARED_DIR", raising=False)
    c = grpo("task=math")
    assert c.tokenizer.path == str(REPO.parent / "shared" / "assets" / "qwen2-tokenizer")
