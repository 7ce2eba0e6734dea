"""A missing data file inside the shared folder names ``$MOJAX_SHARED_DIR`` and its value.

The paths come from ``mojax.defaults.shared_data``, the resolver the shipped configs use (e.g.
``configs/awpo.py``), so the message is checked on the paths a user actually gets.
"""

import re

import pytest

from mojax import defaults
from mojax.tasks.framework import data
from mojax.tasks.math import MathTask


def test_missing_shared_file_names_the_variable_and_its_value(tmp_path, monkeypatch):
    shared = tmp_path / "elsewhere" / "shared"
    monkeypatch.setenv("MOJAX_SHARED_DIR", str(shared))
    path = defaults.shared_data("toolrl", "test.parquet")
    with pytest.raises(FileNotFoundError) as info:
        data.read_records(path)
    msg = str(info.value)
    assert msg.startswith(f"data file not found: {shared / 'data' / 'toolrl' / 'test.parquet'}\n")
    assert f"$MOJAX_SHARED_DIR={shared}, and that folder does not exist" in msg
    assert "Set MOJAX_SHARED_DIR to the folder that holds data/ and assets/" in msg
    # through a task's loader too
    (shared / "data").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"\$MOJAX_SHARED_DIR=.*shared\)\. Set"):
        MathTask().load(defaults.shared_data("math500", "test.jsonl"))


def test_unset_variable_names_the_default_folder(monkeypatch):
    monkeypatch.delenv("MOJAX_SHARED_DIR", raising=False)
    path = defaults.shared_data("no_such_dataset", "train.jsonl")
    msg = data.missing_file_message(path)
    assert "$MOJAX_SHARED_DIR is not set, so the default" in msg
    assert re.search(r"the default (\S+)/shared is used", msg)
    with pytest.raises(FileNotFoundError, match="MOJAX_SHARED_DIR is not set"):
        data.read_records(path)


def test_files_outside_the_shared_folder_do_not_mention_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MOJAX_SHARED_DIR", str(tmp_path / "shared"))
    with pytest.raises(FileNotFoundError) as info:
        data.read_records(tmp_path / "mine" / "train.jsonl")
    assert str(info.value) == f"data file not found: {tmp_path / 'mine' / 'train.jsonl'}"
