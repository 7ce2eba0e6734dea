"""One config schema (issue 46, item 3): every key's default is declared once, by the spec field
that reads it or by ``mojax.defaults.RECIPE`` (the embedded run's values that are no field's
default); the generated base config equals the literal one it replaced; a field's path in the run
spec is its config key; one ``RolloutSpec``; ``Task.configure`` returns overrides."""

from __future__ import annotations

import dataclasses

import ml_collections
import pytest
from mojax_test_utils import load_config

from mojax import config as config_lib
from mojax import defaults
from mojax.spec import RunSpec, key_defaults, schema, section_classes, show, validate


class _Declared:
    """Stands in for a spec field's default: a leaf holding it was declared by the spec only."""

    def __init__(self, key):
        self.key = key


def _leaves(c: ml_collections.ConfigDict) -> dict:
    """Dotted key -> value of each schema key (a section's mapping-valued field is one leaf)."""
    run_keys = {f.name for f in config_lib.option_fields(RunSpec)}
    out = {}
    for key in c.keys():
        if key in run_keys:
            out[key] = c[key]
        else:
            out.update({f"{key}.{name}": c[key][name] for name in c[key].keys()})
    return out


def test_every_key_default_is_declared_once(monkeypatch):
    """Each spec field's default is replaced by a marker; the base config then holds the marker
    wherever the spec alone declares the key. Any other value was written a second time in
    ``mojax.defaults``: it must be a ``RECIPE`` entry, for a field without a default or with another
    value than its default (a repeat of the spec's default is a second declaration)."""
    fields = {}
    for cls in schema():
        for f in config_lib.option_fields(cls):
            key = config_lib.field_key(cls, f)
            assert key not in fields, f"config.{key} is read by two spec fields"
            fields[key] = f

    def marker(field):
        default = field.default if field.default_factory is dataclasses.MISSING else {}
        if default is dataclasses.MISSING:
            return default
        return _Declared(next(k for k, f in fields.items() if f is field))

    monkeypatch.setattr(config_lib, "field_default", marker)
    monkeypatch.setattr(defaults, "_leaf", lambda value, annotation: value)
    try:
        leaves = _leaves(defaults.base_config())
    except TypeError as e:  # a literal written over a marker after the schema was generated
        pytest.fail(f"mojax.defaults sets a key its spec field declares: {e}")
    assert set(leaves) == set(fields), "the base config's keys are the schema's"
    twice = []
    for key, value in leaves.items():
        if isinstance(value, _Declared):
            assert value.key == key and key not in defaults.RECIPE
            continue
        f = fields[key]
        declared = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if key not in defaults.RECIPE:
            twice.append(f"{key}: set in mojax.defaults outside RECIPE")
        elif declared is not dataclasses.MISSING and declared == defaults.RECIPE[key]:
            twice.append(f"{key}: RECIPE repeats the spec field's default {declared!r}")
    assert not twice, "\n".join(twice)


def test_recipe_keys_are_schema_keys_and_recipe_is_small():
    keys = {config_lib.field_key(c, f) for c in schema() for f in config_lib.option_fields(c)}
    assert set(defaults.RECIPE) <= keys
    no_default = {k for k in keys if k not in key_defaults()}
    assert no_default == {"estimator", "task.mix", "sft.behaviours"}
    assert no_default <= set(defaults.RECIPE)
    with pytest.raises(
        ValueError, match=r"recipe keys not in the config schema: \['ppo.clip_hihg'\]"
    ):
        defaults.schema_config({**defaults.RECIPE, "ppo.clip_hihg": 0.3})
    with pytest.raises(ValueError, match="config.estimator: its spec field declares no default"):
        defaults.schema_config({})


# The literal base config of mojax/defaults.py before it was generated (main at 56a4c8f), every leaf,
# with the testbed defaults of issue 47 (tool_reward.gate, task.num_validation, paretopo validation);
# optional keys as (value, field type).
LITERAL_BASE = {
    "checkpoint_every": 10,
    "dapo.dynamic_sampling": False,
    "dapo.max_refill_rounds": 2,
    "dapo.overlong_buffer": 0,
    "dapo.overlong_penalty": 1.0,
    "dry_run": False,
    "estimator": "pareto_rank",
    "eval.batch_prompts": 0,
    "eval.checkpoint": "",
    "eval.ks": (1,),
    "eval.num_samples": 1,
    "eval.split": "test",
    "eval.temperature": 0.0,
    "eval_every": 10,
    "judge.batch_deadline_s": 0.0,
    "judge.kind": "overlap",
    "judge.max_failures_in_a_row": 8,
    "judge.model": "",
    "judge.timeout_s": 30.0,
    "judge.url": "",
    "judge.workers": 8,
    "keep_checkpoints": 2,
    "lora.alpha": 16.0,
    "lora.dropout": 0.0,
    "lora.enabled": False,
    "lora.quant": "none",
    "lora.rank": 8,
    "lora.targets": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mesh.data": -1,
    "mesh.fsdp": 1,
    "mesh.sampler": 0,
    "mesh.tensor": 1,
    "mode": "train",
    "model.cache_dtype": "",
    "model.checkpoint": "",
    "model.dtype": "float32",
    "model.param_dtype": "float32",
    "model.remat": "none",
    "model.variant": "tiny-qwen3",
    "optimizer.b1": 0.9,
    "optimizer.b2": 0.999,
    "optimizer.end_lr_ratio": 0.0,
    "optimizer.eps": 1e-08,
    "optimizer.learning_rate": 0.0001,
    "optimizer.max_grad_norm": (1.0, "float"),
    "optimizer.schedule": "constant",
    "optimizer.total_steps": 0,
    "optimizer.warmup_steps": 0,
    "optimizer.weight_decay": 0.0,
    "packing.enabled": False,
    "packing.width": 0,
    "paretopo.dynamic_weighting": True,
    "paretopo.enabled": False,
    "paretopo.gamma": 0.5,
    "paretopo.mode": "global",
    "paretopo.pareto_ranking": True,
    "paretopo.reference": "below_initial",
    "paretopo.reference_margin": 0.1,
    "paretopo.stage1_estimator": "grpo",
    "paretopo.stage1_steps": 10,
    "paretopo.validate_every": 1,
    "paretopo.validation_n_opt": "tracked",
    "paretopo.validation_samples": 4,
    "paretopo.validation_temperature": 1.0,
    "paretopo.weights": (0.6, 0.4),
    "ppo.agg": "token-mean",
    "ppo.clip_high": 0.28,
    "ppo.clip_low": 0.2,
    "ppo.dual_clip": (None, "float"),
    "ppo.entropy_coef": 0.0,
    "ppo.kl_coef": 0.0,
    "ppo.kl_type": "k3",
    "ppo.log_entropy": True,
    "ppo.logprob_chunk": (None, "int"),
    "ppo.logprob_compact": "off",
    "ppo.logprob_remat": True,
    "ppo.max_len": (None, "int"),
    "ppo.microbatch_tokens": (8192, "int"),
    "ppo.num_microbatches": 1,
    "ppo.num_minibatches": 1,
    "ppo.num_seqs": (None, "int"),
    "ppo.old_logprobs": "sampler",
    "ppo.ppo_epochs": 1,
    "ppo.ratio_level": "token",
    "ppo.shuffle": True,
    "preemption_grace_s": 30.0,
    "resume": "",
    "rollout.decode_segment": 0,
    "rollout.draw": "gumbel",
    "sampler.engine": "static",
    "continuous.kv_cache": "dense",
    "rollout.max_new_tokens": 24,
    "rollout.max_prompt_len": 0,
    "rollout.max_response_len": 48,
    "rollout.max_tool_calls": 2,
    "rollout.max_turns": 3,
    "continuous.num_pages": 0,
    "rollout.num_samples": 8,
    "continuous.page_size": 16,
    "continuous.prefill_prompts": 0,
    "rollout.prompts_per_step": 16,
    "continuous.refill_slots": 1,
    "rollout.retrieval_url": "",
    "rollout.sandbox": "bwrap",
    "continuous.slots": 16,
    "rollout.staleness": 0,
    "rollout.temperature": 1.0,
    "rollout.tool_timeout_s": 10.0,
    "rollout.tool_workers": 4,
    "rollout.top_k": 0,
    "rollout.top_p": 1.0,
    "rollout_correction.high": 2.0,
    "rollout_correction.is_cap": 2.0,
    "rollout_correction.is_level": "none",
    "rollout_correction.low": 0.5,
    "rollout_correction.reject": "none",
    "seed": 0,
    "sft.batch_size": 64,
    "sft.behaviours.always": 0.5,
    "sft.behaviours.never": 0.2,
    "sft.behaviours.redundant": 0.0,
    "sft.behaviours.when_hard": 0.3,
    "sft.checkpoint_every": 100,
    "sft.data_path": "",
    "sft.learning_rate": 0.003,
    "sft.num_examples": 4000,
    "sft.steps": 0,
    "sft.think_rate": 0.0,
    "sft.warmup_steps": 20,
    "steps": 40,
    "task.eval_path": "",
    "task.goal_conditioned": False,
    "task.mix.easy": 0.5,
    "task.mix.hard": 0.4,
    "task.mix.medium": 0.1,
    "task.name": "calculator",
    "task.num_answers": 0,
    "task.num_eval": 128,
    "task.num_train": 4000,
    "task.num_validation": 0,
    "task.train_path": "",
    "task.val_path": "",
    "tokenizer.path": "build",
    "tokenizer.vocab_size": 96,
    "tool_reward.alpha": 0.7,
    "tool_reward.gate": "success",
    "tool_reward.n_opt": "tracked",
    "tool_reward.no_success": "zero",
    "transcripts_per_step": 4,
    "wandb.enabled": False,
    "wandb.entity": "",
    "wandb.group": "",
    "wandb.mode": "online",
    "wandb.name": "",
    "wandb.project": "mojax",
}
EMPTY_MAPPINGS = ("advantage", "model.overrides", "task.kwargs", "task.extra_rewards")


def test_generated_base_config_equals_the_literal_one():
    c = defaults.base_config()
    leaves = show.flatten(c)
    refs = {}
    for key in LITERAL_BASE:
        section, _, name = key.rpartition(".")
        node = c
        for part in section.split(".") if section else ():
            node = node[part]
        field = node._fields[name]
        if isinstance(field, ml_collections.FieldReference):
            refs[key] = (field.get(), field.get_type().__name__)
    got = {k: refs.get(k, v) for k, v in leaves.items() if k not in EMPTY_MAPPINGS}
    assert got == LITERAL_BASE
    for key in LITERAL_BASE:  # types too (1 == 1.0 == True in the comparison above)
        assert type(got[key]) is type(LITERAL_BASE[key]), key
    assert {k: leaves[k] for k in EMPTY_MAPPINGS} == dict.fromkeys(EMPTY_MAPPINGS, {})
    c.ppo.dual_clip = 3.0  # an optional key still takes a value from the command line
    with pytest.raises(TypeError):
        c.ppo.dual_clip = "three"


def _at(spec, key):
    """The spec attribute at dotted config ``key`` (a method's section: ``spec.sections[name]``; an
    engine's: ``spec.engines[name]``)."""
    head, _, rest = key.partition(".")
    groups = {**spec.sections, **spec.engines}
    node = groups[head] if head in groups else getattr(spec, head)
    for part in rest.split(".") if rest else ():
        node = getattr(node, part)
    return node


@pytest.mark.parametrize("name", ["paretopo", "dapo"])
def test_spec_path_is_the_config_key(name):
    """Every key of the config is read into the spec attribute of the same path (the seven keys
    that used to change path: dapo.*, tool_reward.alpha, estimator, advantage)."""
    c = load_config(name)
    spec = validate(c, num_devices=None)
    for key in key_defaults() | dict.fromkeys(defaults.RECIPE):
        value = config_lib.lookup(c, key)
        got = _at(spec, key)
        assert got == (tuple(value) if isinstance(got, tuple) else value), key
    for section, cls in section_classes().items():
        assert cls.SECTION == section
    assert spec.dapo.overlong_buffer == c.dapo.overlong_buffer
    assert spec.tool_reward.alpha == c.tool_reward.alpha and spec.estimator == c.estimator
    assert spec.advantage == c.advantage.to_dict()


def test_one_rollout_spec_and_its_keys_come_from_the_config_section():
    import mojax.spec.sections as sections
    from mojax.rollout import spec as rollout_spec

    assert not hasattr(sections, "RolloutSpec") and not hasattr(rollout_spec, "_CONFIG_KEYS")
    shared = {f.name for f in dataclasses.fields(rollout_spec.RolloutSpec)} & {
        f.name for f in config_lib.option_fields(rollout_spec.RolloutConfig)
    }
    assert {"max_new_tokens", "temperature", "draw", "tool_timeout_s", "decode_segment"} <= shared
    for name in shared:
        assert rollout_spec._config_key(name) == f"config.rollout.{name}"
    assert rollout_spec._config_key("cache_dtype") == "config.model.cache_dtype"
    assert rollout_spec._config_key("pad_id") is None
    with pytest.raises(ValueError, match=r"RolloutSpec.decode_segment \(config.rollout.decode"):
        rollout_spec.RolloutSpec(
            max_new_tokens=4, max_response_len=8, eos_ids=(2,), decode_segment=-1
        )


def test_task_configure_returns_overrides_and_a_bad_key_is_named():
    from mojax.tasks.calculator import CalculatorTask

    overrides = CalculatorTask.configure()
    assert overrides["eval.num_samples"] == 4 and overrides["eval.ks"] == (1, 2, 4)
    assert overrides["task.kwargs"]["easy_ops"] == "+"
    c = defaults.base_config()
    before = c.to_dict()
    defaults.apply_overrides(c, overrides, "calculator")
    assert c.eval.num_samples == 4 and c.task.kwargs.easy_ops == "+"
    assert isinstance(c.task.kwargs, ml_collections.ConfigDict)
    assert before["eval"]["num_samples"] == 1  # configure() itself mutated nothing
    with pytest.raises(ValueError, match=r"task 'x'.s configure\(\): config.eval.num_sample is"):
        defaults.apply_overrides(c, {"eval.num_sample": 4}, "task 'x''s configure()")

    class OldStyle(CalculatorTask):
        @classmethod
        def configure(cls, c):
            c.eval.num_samples = 4

    with pytest.raises(ValueError, match="configure\\(\\) takes no argument and returns"):
        defaults._task_overrides(OldStyle)
