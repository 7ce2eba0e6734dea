"""A renamed config key (``mojax.infra.config_renames``): an older workdir's ``config.json`` that
holds the old key still resumes, a difference names the new key, export and eval read it, and a
command line that sets the old key is refused naming the new one. Reference: the old tree is
written by hand from the current config (the keys moved back), not by the code under test."""

import copy
import json

import pytest
from mojax_cli import run_cli
from mojax_test_utils import load_config, with_keys

from mojax.infra import config_renames
from mojax.infra import logbook as log_lib
from mojax.infra import workdir as wd

MOVED = {  # the continuous engine's settings left config.rollout (2026-12-07)
    ("rollout", "engine"): ("sampler", "engine"),
    **{
        ("rollout", k): ("continuous", k)
        for k in ("slots", "kv_cache", "page_size", "num_pages", "prefill_prompts", "refill_slots")
    },
}


def _old_tree(config) -> dict:
    """``config``'s ``config.json`` tree as written before the rename: the moved keys under
    ``rollout``, no ``sampler`` / ``continuous`` sections."""
    tree = copy.deepcopy(wd.config_tree(config))
    for (old_sec, old_key), (new_sec, new_key) in MOVED.items():
        tree[old_sec][old_key] = tree[new_sec].pop(new_key)
    for sec in ("sampler", "continuous"):
        assert tree.pop(sec) == {}
    return tree


def _old_run(workdir, config) -> None:
    """A workdir as a run before the rename leaves it: the old ``config.json``, a checkpoint."""
    (workdir / "checkpoints" / "2").mkdir(parents=True)
    (workdir / "config.json").write_text(json.dumps(_old_tree(config)))
    (workdir / "metrics.jsonl").write_text(json.dumps({"step": 2}) + "\n")


def test_the_map_holds_exactly_the_moved_keys():
    want = {f"{a}.{b}": f"{c}.{d}" for (a, b), (c, d) in MOVED.items()}
    assert config_renames.RENAMED == want
    tree = {"rollout": {"slots": 8, "num_samples": 4}, "continuous": {"kv_cache": "paged"}}
    got = config_renames.upgrade(tree)
    assert got == {"rollout": {"num_samples": 4}, "continuous": {"kv_cache": "paged", "slots": 8}}
    assert tree["rollout"]["slots"] == 8  # the input is not changed
    both = {"rollout": {"slots": 8}, "continuous": {"slots": 4}}
    assert config_renames.upgrade(both) == {"rollout": {}, "continuous": {"slots": 4}}


def test_an_older_workdir_resumes_and_a_difference_names_the_new_key(tmp_path):
    c = with_keys(load_config("grpo"), **{"sampler.engine": "continuous", "continuous.slots": 8})
    _old_run(tmp_path, c)
    saved, problem = wd.read_saved_config(str(tmp_path))
    assert problem is None and wd.config_diff(saved, c) == {}
    assert log_lib.read_config(tmp_path).continuous.slots == 8  # export / eval read it too
    assert wd.prepare(c, str(tmp_path)) is None  # resumes: the same config
    _old_run(tmp_path / "b", c)
    with pytest.raises(wd.WorkdirError) as info:
        wd.prepare(with_keys(c, **{"continuous.slots": 4}), str(tmp_path / "b"))
    assert "config.continuous.slots  8 -> 4" in str(info.value)
    assert "rollout.slots" not in str(info.value)


@pytest.mark.parametrize("old, new", [("rollout.slots", "continuous.slots"),
                                      ("rollout.engine", "sampler.engine")])  # fmt: skip
def test_a_command_line_that_sets_an_old_key_names_the_new_one(tmp_path, old, new):
    value = "continuous" if old.endswith("engine") else "8"
    proc = run_cli("--config=configs/grpo.py", f"--config.{old}={value}", f"--workdir={tmp_path}")
    assert proc.returncode == 2
    assert f"config.{old} was renamed: it is config.{new} now" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing was written
