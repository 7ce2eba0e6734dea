"""Config validation messages and the metrics writer (truncation on resume, plots)."""

import json

import ml_collections
import pytest

from mojax import config as cfg_lib
from mojax.infra import logbook as log_lib
from mojax.infra import plots


def _config():
    c = ml_collections.ConfigDict()
    c.steps = 4
    c.ppo = ml_collections.ConfigDict({"agg": "token-mean", "clip_low": 0.2})
    c.advantage = ml_collections.ConfigDict({"beta": 0.5, "betta": 1.0})
    return c


def _estimator(rewards, valid, *, beta=0.5, normalize="none"):
    return rewards, valid, beta, normalize


def test_checker_reports_every_problem_with_key_and_allowed_values():
    c = _config()
    c.ppo.agg = "token-meen"
    c.steps = -1
    chk = cfg_lib.Checker(c)
    chk.choice("ppo.agg", ["token-mean", "seq-mean-token-mean"])
    chk.in_range("steps", 1)
    chk.kwargs_for("advantage", _estimator)
    chk.get("mesh.data")
    with pytest.raises(cfg_lib.ConfigError) as e:
        chk.raise_if_any()
    msg = str(e.value)
    assert "4 problem(s)" in msg
    assert (
        "config.ppo.agg: 'token-meen' is not allowed" in msg and "did you mean 'token-mean'" in msg
    )
    assert "config.steps: -1 is out of range [1, inf)" in msg
    assert "config.advantage.betta: unknown keyword of _estimator" in msg and "'beta'" in msg
    assert "config.mesh.data: missing" in msg


def test_checker_types_and_booleans():
    c = {"ppo": {"clip_low": True}}  # a bool is not a number for a clip radius
    chk = cfg_lib.Checker(c)
    chk.in_range("ppo.clip_low", 0.0, 1.0)
    assert chk.errors == ["config.ppo.clip_low: expected int or float, got bool True"]


def test_metrics_writer_truncates_on_resume_and_plots(tmp_path):
    with log_lib.MetricsWriter(tmp_path, tensorboard=True) as w:
        for step in range(1, 6):
            w.write(
                step,
                {
                    "reward/task/mean": step / 10,
                    "reward/tool/mean": 1 - step / 10,
                    "loss": float("nan") if step == 3 else 0.5,
                    "pareto/hv": step,
                },
            )
            w.write(step, {"eval/task": step / 10, "eval/tool": 1 - step / 20})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 10 and json.loads(lines[4])["loss"] == "nan"
    with log_lib.MetricsWriter(tmp_path, resume_step=3, tensorboard=False) as w:
        w.write(4, {"loss": 0.25})
    steps = [r["step"] for r in log_lib.read_metrics(tmp_path)]
    assert steps == [1, 1, 2, 2, 3, 3, 4]
    paths = plots.plot_run(tmp_path, ["task", "tool"])
    assert {p.name for p in paths} == {"rewards.png", "hypervolume.png", "pareto_front.png"}
    assert all(p.stat().st_size > 1000 for p in paths)
    assert any((tmp_path / "tensorboard").iterdir())


def test_progress_line():
    line = log_lib.format_progress(5, 10, {"loss": 0.123456, "n": 3}, ["loss", "n", "missing"])
    assert line.startswith("[ 5/10 ") and "loss=0.1235" in line and "n=3" in line
