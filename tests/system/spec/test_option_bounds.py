"""Non-finite, absurd or pointless numeric options are refused at validation (issue 49), each
error naming its ``config.`` key and the allowed values: ``rollout.tool_timeout_s`` (finite, in
``(0, MAX_TOOL_TIMEOUT_S]``: ``inf`` raised OverflowError in the sandbox, a huge value a misleading
"no working bubblewrap"), ``steps=0`` on a run that trains nothing, greedy rollouts
(``rollout.temperature=0``) for training, and ``rollout.prompts_per_step`` past what one step's
arrays hold or not divisible over the mesh's row devices. In-process against
``mojax.spec.validate``, plus one ``python -m mojax.main`` run in-process (``mojax_cli``: exit 2,
every error, no traceback)."""

import pytest
from mojax_cli import run_cli
from mojax_test_utils import load_config, run_spec

from mojax.config import ConfigError
from mojax.rollout.spec import MAX_TOOL_TIMEOUT_S, RolloutSpec
from mojax.spec import validate
from mojax.spec.rules import MAX_STEP_TOKENS


def _config(name="grpo", **values):
    c = load_config(name)
    with c.unlocked():
        for key, value in values.items():
            section, _, field = key.rpartition("__")
            (c[section] if section else c)[field] = value
    return c


def _errors(c, num_devices=None):
    with pytest.raises(ConfigError) as info:
        validate(c, num_devices=num_devices)
    return info.value.errors


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e12, MAX_TOOL_TIMEOUT_S + 1, 0.0])
def test_tool_timeout_must_be_finite_positive_and_at_most_an_hour(value):
    (err,) = _errors(_config(rollout__tool_timeout_s=value))
    assert err.startswith(f"config.rollout.tool_timeout_s: {value!r} is not allowed"), err
    assert "a finite number of seconds in (0, 3600]" in err


def test_tool_timeout_of_an_hour_is_accepted():
    assert run_spec(_config(rollout__tool_timeout_s=MAX_TOOL_TIMEOUT_S)).rollout.tool_timeout_s


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e12])
def test_rollout_spec_refuses_a_tool_timeout_it_cannot_enforce(value):
    from mojax.rollout.spec import RolloutSpec as Spec

    with pytest.raises(ValueError, match=r"config.rollout.tool_timeout_s\) must be a finite"):
        Spec(max_new_tokens=4, max_response_len=8, eos_ids=(2,), tool_timeout_s=value)
    assert Spec(max_new_tokens=4, max_response_len=8, eos_ids=(2,), tool_timeout_s=None)
    assert RolloutSpec is Spec


def test_steps_zero_is_refused_unless_the_run_is_sft_only():
    (err,) = _errors(_config(steps=0, sft__steps=0))
    assert err.startswith("config.steps: 0 is not allowed; allowed values: >= 1"), err
    sft_only = load_config("sft")  # steps=0, sft.steps=500: the SFT-only run
    assert sft_only.steps == 0 and run_spec(sft_only).sft.steps == 500


def test_greedy_rollouts_are_refused_for_training():
    (err,) = _errors(_config(rollout__temperature=0.0))
    assert err.startswith("config.rollout.temperature: 0.0 is not allowed for training"), err
    assert "rollout.num_samples=8" in err and "eval.temperature=0" in err
    evaluation = run_spec(_config(mode="eval", rollout__temperature=0.0))
    assert evaluation.rollout.temperature == 0.0  # evaluation decodes with eval.temperature


def test_prompts_per_step_past_one_steps_arrays_is_refused():
    (err,) = _errors(_config(rollout__prompts_per_step=10**9))
    assert err.startswith("config.rollout.prompts_per_step: 1000000000 is too large"), err
    assert f"at most {MAX_STEP_TOKENS}" in err
    # the largest P within the bound is accepted (G = 8, R = 48 on the tiny default)
    largest = MAX_STEP_TOKENS // (8 * 48)
    assert run_spec(_config(rollout__prompts_per_step=largest)).rollout.prompts_per_step == largest


def test_prompts_per_step_must_fill_the_mesh_row_devices():
    c = _config(rollout__prompts_per_step=3, rollout__num_samples=3)  # B = 9 rows
    (err,) = _errors(c, num_devices=2)  # data=-1: 2 devices on the "batch" axes
    assert err.startswith("config.rollout.prompts_per_step: B = prompts_per_step x num_samples")
    assert "= 9 must be a multiple of the 2 devices" in err
    assert validate(c, num_devices=3).rollout.prompts_per_step == 3  # 9 rows over 3 devices
    packed = _config(
        rollout__prompts_per_step=3, rollout__num_samples=3, sampler__engine="continuous"
    )
    with packed.unlocked():
        packed.packing.enabled, packed.continuous.slots = True, 2
    assert validate(packed, num_devices=2).rollout.prompts_per_step == 3  # the rows are rebuilt


def test_cross_section_option_errors_are_reported_together():
    errs = _errors(_config(steps=0, sft__steps=0, rollout__prompts_per_step=10**9))
    assert [e.split(":")[0] for e in errs] == ["config.steps", "config.rollout.prompts_per_step"]


def test_cli_tool_timeout_inf_exits_2_naming_the_key_without_a_traceback(tmp_path):
    """Before: accepted and the run started (with the math task's Python sandbox, an
    ``OverflowError`` from ``math.ceil(inf)`` when the run built its tool)."""
    p = run_cli(
        f"--workdir={tmp_path / 'w'}",
        "--config=configs/grpo.py",
        "--config.rollout.tool_timeout_s=inf",
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "OverflowError" not in p.stderr, p.stderr
    assert "mojax: invalid config" in p.stderr, p.stderr
    assert "config.rollout.tool_timeout_s: inf is not allowed" in p.stderr, p.stderr
    assert "(0, 3600]" in p.stderr, p.stderr
    assert not (tmp_path / "w").exists()
