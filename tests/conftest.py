"""Shared pytest fixtures: the location of ``../shared`` (real data, the real Qwen2 tokenizer)."""

import os
import pathlib

import pytest

_REPO = pathlib.Path(__file__).resolve().parents[1]


def shared_dir() -> pathlib.Path:
    """``$MOJAX_SHARED_DIR`` or ``../shared`` beside the checkout."""
    return pathlib.Path(os.environ.get("MOJAX_SHARED_DIR", _REPO.parent / "shared"))


@pytest.fixture(scope="session")
def shared():
    path = shared_dir()
    if not (path / "data").is_dir():
        pytest.skip(f"shared data not found at {path} (set MOJAX_SHARED_DIR to the shared/ folder)")
    return path


@pytest.fixture(scope="session")
def qwen2_tokenizer_dir(shared):
    path = shared / "assets" / "qwen2-tokenizer"
    if not (path / "vocab.json").is_file():
        pytest.skip(f"real Qwen2 tokenizer not found at {path}")
    return path
