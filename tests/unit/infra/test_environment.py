"""Each run's ``config.json`` records the environment it ran in (``mojax.infra.environment``), and a
resume under other package versions is not refused for it (the record is not compared)."""

import importlib.metadata
import json

from mojax.config import to_dict
from mojax.infra import workdir as wd


def _config():
    from mojax_test_utils import load_config

    return to_dict(load_config("grpo"))


def test_config_json_records_the_package_versions(tmp_path):
    assert wd.prepare(_config(), str(tmp_path)) is None
    saved = json.loads((tmp_path / "config.json").read_text())
    env = saved["environment"]
    assert env["packages"]["jax"] == importlib.metadata.version("jax")
    assert env["packages"]["numpy"] == importlib.metadata.version("numpy")
    assert env["python"].count(".") == 2


def test_another_environment_does_not_refuse_a_resume(tmp_path):
    wd.prepare(_config(), str(tmp_path))
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    saved["environment"]["packages"]["jax"] = "0.0.1"
    path.write_text(json.dumps(saved))
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')  # a run to protect
    assert wd.config_diff(wd.log_lib.read_config(str(path)), _config()) == {}
    assert wd.prepare(_config(), str(tmp_path)) is None
