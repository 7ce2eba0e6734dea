"""Every ``configs/*.py`` loads and validates (``mojax.spec.validate``) with no argument and with
every ``:arg`` its docstring documents; nothing is built or compiled."""

import ast
import importlib.util
import pathlib
import re

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
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
    from mojax.spec import validate

    config = load(path, arg)
    axes = [config.mesh.data, config.mesh.fsdp, config.mesh.tensor]
    devices = int(np.prod(axes)) if min(axes) > 0 else "auto"  # the mesh the command is for
    spec = validate(config, num_devices=devices)
    assert spec.steps >= 0
    if arg and "paper=true" in arg:
        assert spec.optimizer.learning_rate == pytest.approx(1e-6)
        # a 1e-6 AdamW step is below a bf16 weight's resolution: the master weights are fp32
        assert config.model.param_dtype == "float32", config.model.param_dtype


def test_unknown_arg_is_rejected_naming_it():
    with pytest.raises(ValueError, match="'modle' is unknown"):
        load(REPO / "configs" / "grpo.py", "modle=tiny")


@pytest.mark.parametrize(
    ("name", "arg"),
    [
        ("saw", "paper=true"),
        ("awpo", "paper=true,task=calculator"),
        ("vpo", "paper=true,task=bandit"),
    ],
)
def test_paper_recipe_on_another_task_is_refused_naming_the_task(name, arg):
    with pytest.raises(ValueError, match=r"paper=true is .* task="):
        load(REPO / "configs" / f"{name}.py", arg)


BAD = [  # (config, arg, overrides, the key the error must name) — issue 14's list
    ("grpo", None, {"rollout.num_samples": 1}, "config.rollout.num_samples"),
    ("grpo", None, {"rollout.draw": "multinomial"}, "config.rollout.draw"),
    ("grpo", None, {"eval.ks": (1, 8)}, "config.eval.ks"),
    ("grpo", None, {"advantage.weights": (0.2, 0.3, 0.5)}, "config.advantage.weights"),
    ("awpo", None, {"sft.steps": 10}, "config.sft.steps"),
    ("paretopo", None, {"mesh.tensor": 3}, "config.mesh"),
    ("grpo", None, {"sft.think_rate": 1.5}, "config.sft.think_rate"),
    ("awpo", None, {"sft.think_rate": 0.5}, "config.sft.think_rate"),  # no plans off the calculator
    ("awpo", None, {"judge.kind": "http"}, "config.judge.url"),  # a served judge needs its URL
    ("awpo", None, {"judge.kind": "model"}, "config.judge.model"),  # a local judge: its HF dir
    # VPO's answer sets on a task whose r_tool a reward source fills per completion (before: r_tool
    # was silently the task's per-answer placeholder)
    ("vpo", None, {"task.name": "calculator"}, "config.task.num_answers: 2 (answer sets) cannot"),
]


@pytest.mark.parametrize(("name", "arg", "overrides", "key"), BAD, ids=[b[3] for b in BAD])
def test_impossible_combination_is_rejected_before_anything_is_built(name, arg, overrides, key):
    import time

    from mojax.config import ConfigError
    from mojax.spec import validate

    config = load(REPO / "configs" / f"{name}.py", arg)
    with config.unlocked():
        for k, v in overrides.items():
            section, field = k.split(".")
            config[section][field] = v
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert time.perf_counter() - t0 < 5.0  # pure host checks: nothing is built or compiled
    assert key in str(e.value), str(e.value)


def test_mode_show_prints_every_key_with_help_and_builds_nothing(tmp_path, capsys):
    from mojax.rl import trainer

    config = load(REPO / "configs" / "saw.py", "mode=gdpo")
    with config.unlocked():
        config.mode = "show"
    assert trainer.run(config, str(tmp_path / "w")) == {}
    out = capsys.readouterr().out
    assert "estimator = 'saw_gdpo'" in out
    assert "rollout.num_samples = 8" in out and "# G" in out  # the help from defaults.py
    assert "optimizer.learning_rate = 0.0001" in out
    assert not (tmp_path / "w").exists()  # nothing built, no workdir


@pytest.mark.parametrize("name", ["grpo", "gdpo", "dr_grpo", "mo_grpo", "dapo", "paretopo", "saw"])
def test_think_adds_r_format_and_a_weight_per_objective(name):
    from mojax.spec import validate
    from mojax.tasks import build_task

    plain, think = (
        load(REPO / "configs" / f"{name}.py", None),
        load(REPO / "configs" / f"{name}.py", "think=0.1"),
    )
    assert build_task(plain.task).objective_names == ("r_task", "r_tool")
    task = build_task(think.task)
    assert task.objective_names == ("r_task", "r_tool", "r_format")
    assert tuple(task.scalar_weights) == (0.6, 0.4, 0.4)
    assert think.sft.think_rate == 0.1 and plain.sft.think_rate == 0.0
    weights = dict(think.advantage).get("weights")
    if weights is not None:
        assert tuple(weights) == (0.6, 0.4, 0.4)
        assert tuple(dict(plain.advantage)["weights"]) == (0.6, 0.4)
    validate(think)


@pytest.mark.parametrize("arg", ["think=0.1,task=math", "think=1.5"])
def test_think_off_the_calculator_or_out_of_range_is_rejected(arg):
    with pytest.raises(ValueError, match="think="):
        load(REPO / "configs" / "grpo.py", arg)


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_config_dry_runs_in_one_process(path, capsys):
    """Each config's embedded default is compiled (its PPO update and its engine's sampler, on
    one device; ``mojax.rl.dry_run``) in this one process, allocating nothing: the configs CI
    does not train (``tests/system/rl/test_e2e.py`` trains three) still lower and compile. The
    memory it reports adds up against the parameter count and the dtypes."""
    from mojax.rl.dry_run import GIB, dry_run
    from mojax.spec import validate

    spec = validate(load(path, None), num_devices=1)
    out = dry_run(spec)
    report = capsys.readouterr().out
    assert "train step lowered with explicit shardings: OK (compiled)" in report, report
    assert out["devices"] == 1.0
    bytes_per_param = np.dtype(spec.model.param_dtype).itemsize
    assert not spec.lora.enabled  # the tiny defaults train every weight
    assert out["params_gib_per_device"] * GIB == out["params_total"] * bytes_per_param
    # AdamW's two fp32 moments per parameter, and its step count
    assert out["optimizer_gib_per_device"] * GIB >= 2 * out["params_total"] * 4
    assert out["optimizer_gib_per_device"] * GIB < 2 * out["params_total"] * 4 + 2**20
    held = out["params_gib_per_device"] + out["optimizer_gib_per_device"]
    assert out["peak_gib_per_device"] >= held + out["train_transient_gib_per_device"] - 1e-9
