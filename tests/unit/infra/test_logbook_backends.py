"""MetricsWriter backends (JSONL, TensorBoard, W&B offline), process-0 gating, run config and
transcript rows."""

import json
import pathlib
import struct

import ml_collections
import numpy as np
import pytest

from mojax.infra import log_backends, plots
from mojax.infra import logbook as log_lib

OBJ = ("r_task", "r_tool")


def _config():
    c = ml_collections.ConfigDict()
    c.seed = 3
    c.estimator = "pareto_rank"
    c.eval = ml_collections.ConfigDict({"ks": (1, 2), "temperature": 1.0})
    return c


def _steps(writer, n=3):
    rows = []
    for t in range(n):
        m = {"reward/r_task/mean": 0.1 * t, "reward/r_tool/mean": 1.0 - 0.1 * t, "loss": 0.5}
        if t == n - 1:
            m.update({"eval/r_task": 0.7, "eval/accuracy": 0.7, "note": "text"})
        writer.write(t, m)
        rows.append(m)
    return rows


class ListBackend:
    def __init__(self):
        self.records, self.closed = [], False

    def write(self, step, record):
        self.records.append((step, dict(record)))

    def close(self):
        self.closed = True


def test_jsonl_and_extra_backend_get_the_same_records(tmp_path):
    extra = ListBackend()
    with log_lib.MetricsWriter(tmp_path, tensorboard=True, backends=[extra], config=_config()) as w:
        _steps(w)
    assert extra.closed
    assert [r for _, r in extra.records] == log_lib.read_metrics(tmp_path)
    assert [s for s, _ in extra.records] == [0, 1, 2]
    assert list(extra.records[0][1])[0] == "step"
    assert any((tmp_path / "tensorboard").iterdir())


def test_only_process_zero_writes(tmp_path, monkeypatch):
    extra = ListBackend()
    with log_lib.MetricsWriter(tmp_path / "a", process_index=1, backends=[extra]) as w:
        _steps(w)
    assert not (tmp_path / "a").exists() and extra.records == []
    import jax

    monkeypatch.setattr(jax, "process_index", lambda: 1)
    with log_lib.MetricsWriter(tmp_path / "b") as w:
        _steps(w)
    log_lib.write_transcripts(tmp_path / "b", 1, [{"prompt": "p"}])
    assert log_lib.write_config(tmp_path / "b", _config()) is None
    assert plots.plot_run(tmp_path / "b", OBJ) == []
    assert not (tmp_path / "b").exists()


def test_config_round_trip(tmp_path):
    c = _config()
    path = log_lib.write_config(tmp_path, c)
    assert json.loads(path.read_text()) == json.loads(c.to_json())
    back = log_lib.read_config(tmp_path)
    assert back.seed == 3 and back.estimator == "pareto_rank" and list(back.eval.ks) == [1, 2]
    with pytest.raises(FileNotFoundError, match="no run config at .*config.json"):
        log_lib.read_config(tmp_path / "missing")


def test_wandb_options_from_config():
    assert log_backends.WandbOptions.from_config(None) is None
    assert log_backends.WandbOptions.from_config({"enabled": False, "project": "x"}) is None
    cfg = ml_collections.ConfigDict({"enabled": True, "mode": "offline", "tags": ["a"]})
    opts = log_backends.WandbOptions.from_config(cfg)
    assert opts.mode == "offline" and opts.tags == ("a",) and opts.project == "mojax"
    with pytest.raises(ValueError, match="wandb.projekt: unknown key"):
        log_backends.WandbOptions.from_config({"projekt": "x"})
    with pytest.raises(ValueError, match="wandb.mode='offlne'"):
        log_backends.WandbOptions(mode="offlne")


def test_objective_panel_keys():
    rec = {"reward/r_task/mean": 1.0, "eval/r_tool": 2.0, "loss": 3.0, "r_task": 4.0}
    assert log_backends.objective_panel_keys(rec, OBJ) == {
        "r_task/reward/mean": 1.0,
        "r_tool/eval": 2.0,
    }


# ------------------------------------------------------------------------------- W&B offline


def read_wandb_records(run_file: pathlib.Path):
    """The protobuf records of an offline ``.wandb`` file.

    Written from the file format (LevelDB log blocks of 32 KiB after a 7-byte ":W&B" header; each
    chunk has a 7-byte header crc32 / length / type with FULL=1, FIRST=2, MIDDLE=3, LAST=4), not
    with wandb's reader (the Python one is gone from wandb >= 0.2x).
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if n == 0 and kind == 0:
            break
        buf += data[pos : pos + n]
        pos += n
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def _history(records):
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            )
    return rows


def _run_config(records):
    cfg = {}
    for r in records:
        kind = r.WhichOneof("record_type")
        items = (
            r.run.config.update if kind == "run" else r.config.update if kind == "config" else []
        )
        cfg.update({i.key: json.loads(i.value_json) for i in items})
    return cfg


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install mojax[wandb])")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return tmp_path


def test_wandb_offline_logs_metrics_config_and_objective_panels(wandb_env):
    workdir = wandb_env / "run"
    opts = {"enabled": True, "mode": "offline", "project": "mojax-test", "group": "g"}
    with log_lib.MetricsWriter(
        workdir, wandb=opts, config=_config(), objectives=OBJ, run_name="calc-paretopo"
    ) as w:
        written = _steps(w)
    run_id = (workdir / log_backends.WANDB_ID_FILE).read_text().strip()
    files = list((workdir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 1, list((workdir / "wandb").iterdir())
    records = read_wandb_records(files[0])
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.display_name == "calc-paretopo" and run.project == "mojax-test"
    assert run.run_group == "g"
    cfg = _run_config(records)
    assert cfg["seed"] == 3 and cfg["estimator"] == "pareto_rank"
    assert cfg["eval"] == {"ks": [1, 2], "temperature": 1.0}
    hist = _history(records)
    assert [h["step"] for h in hist] == [0, 1, 2]
    for h, m in zip(hist, written):
        for k, v in m.items():
            if k != "note":  # text is not a scalar metric
                assert h[k] == pytest.approx(v), k
        assert h["r_task/reward/mean"] == h["reward/r_task/mean"]
        assert h["r_tool/reward/mean"] == h["reward/r_tool/mean"]
        assert "note" not in h
    assert hist[-1]["r_task/eval"] == 0.7


def test_wandb_resume_continues_the_same_run(wandb_env):
    workdir = wandb_env / "run"
    opts = {"mode": "offline", "project": "mojax-test"}
    with log_lib.MetricsWriter(workdir, wandb=opts, tensorboard=False) as w:
        _steps(w, 2)
    first = (workdir / log_backends.WANDB_ID_FILE).read_text()
    with log_lib.MetricsWriter(workdir, wandb=opts, tensorboard=False, resume_step=0) as w:
        w.write(1, {"loss": 0.25})
    assert (workdir / log_backends.WANDB_ID_FILE).read_text() == first
    assert [r["step"] for r in log_lib.read_metrics(workdir)] == [0, 1]
    runs = sorted((workdir / "wandb").glob(f"offline-run-*-{first.strip()}"))
    assert len(runs) >= 1


# ------------------------------------------------------------------------------- transcripts


def test_response_segments_and_marking():
    pieces = {
        1: "<calc>",
        2: "3*4",
        3: "</calc>",
        4: "<output>12</output>",
        5: "<answer>12</answer>",
    }

    def decode(ids):
        return "".join(pieces[i] for i in ids)

    tokens = np.array([1, 2, 3, 4, 5])
    mask = np.array([1, 1, 1, 0, 1], bool)
    segs = log_lib.response_segments(tokens, mask, decode)
    assert segs == [
        ("<calc>3*4</calc>", True),
        ("<output>12</output>", False),
        ("<answer>12</answer>", True),
    ]
    assert log_lib.mark_response(segs) == (
        "<calc>3*4</calc>[[tool]]<output>12</output>[[/tool]]<answer>12</answer>"
    )
    assert log_lib.response_segments([], [], decode) == []
    with pytest.raises(ValueError, match="policy_mask has 2 entries for 3 tokens"):
        log_lib.response_segments([1, 2, 3], [1, 1], decode)


def test_write_transcripts_rich_rows(tmp_path):
    segs = [
        ("<calc>3*4</calc>", True),
        ("<output>12</output>", False),
        ("<answer>12</answer>", True),
    ]
    rows = [
        {
            "prompt_id": "calc/0/train/16",
            "prompt": "<|im_start|>user\nCompute 3*4.<|im_end|>\n<|im_start|>assistant\n",
            "response": "".join(t for t, _ in segs),
            "segments": segs,
            "rewards": np.array([1.0, 0.5], np.float32),
            "advantage": np.float32(0.25),
            "n_calls": np.int32(1),
            "valid": np.bool_(True),
        },
        {
            "prompt_id": "x",
            "prompt": "é ⁇",
            "response": "",
            "rewards": [float("nan"), 0.0],
            "advantage": 0.0,
        },
    ]
    log_lib.write_transcripts(tmp_path, 7, rows, objectives=OBJ)
    text = (tmp_path / "transcripts.jsonl").read_text(encoding="utf-8")
    assert "é ⁇" in text  # written unescaped, readable
    got = log_lib.read_transcripts(tmp_path)
    assert got[0]["step"] == 7 and got[0]["prompt"].startswith("<|im_start|>user\nCompute 3*4.")
    assert got[0]["rewards"] == {"r_task": 1.0, "r_tool": 0.5}
    assert got[0]["advantage"] == 0.25 and got[0]["n_calls"] == 1 and got[0]["valid"] is True
    assert (
        got[0]["response_marked"]
        == "<calc>3*4</calc>[[tool]]<output>12</output>[[/tool]]<answer>12</answer>"
    )
    assert got[0]["segments"][1] == ["<output>12</output>", False]
    assert got[1]["rewards"] == {"r_task": "nan", "r_tool": 0.0}
    with pytest.raises(ValueError, match=r"transcript row 0: 3 rewards for objectives"):
        log_lib.write_transcripts(tmp_path, 8, [{"rewards": [1, 2, 3]}], objectives=OBJ)


def test_no_wandb_or_matplotlib_import_unless_used(tmp_path):
    """W&B is imported only when enabled; importing mojax.infra.logbook loads no plotting library."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from mojax.infra import logbook as L\n"
        "assert 'matplotlib' not in sys.modules\n"
        f"with L.MetricsWriter({str(tmp_path)!r}) as w:\n"
        "    w.write(0, {'loss': 1.0})\n"
        "assert 'wandb' not in sys.modules, 'wandb imported without being enabled'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
