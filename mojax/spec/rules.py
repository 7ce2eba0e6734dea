"""Rules of a run spec that span its sections: the task's declared objectives against the method, the
rollout and evaluation shapes, SFT demonstrations, the batch split of the update and the mesh.

``run_errors(spec)`` builds the task object (its constructor only: no data is loaded) and returns
every problem as a ``config.<key>: ...`` line; ``mojax.spec.validate`` runs it once every section
validated on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mojax import sharding
from mojax.advantages import METHODS
from mojax.config import Checker, field_defaults
from mojax.sampling import protocol
from mojax.spec.model_config import qwen_config
from mojax.tasks.framework import extra_rewards, registry

if TYPE_CHECKING:
    from mojax.spec import RunSpec


def run_errors(spec: RunSpec, num_devices: int | str | None) -> list[str]:
    """Every cross-section problem of ``spec`` (see the module docstring)."""
    errors = _name_errors(spec)
    if errors:
        return errors
    errors = extra_rewards.config_errors(spec.task.extra_rewards)
    if errors:
        return errors
    try:
        task = spec.build_task()
    except ValueError as e:
        added = str(e).startswith(extra_rewards.KEY)
        return [str(e) if added else f"config.task.kwargs: {e}"]
    errors = _shape_errors(spec) + _method_errors(spec, task) + _goal_errors(spec, task)
    errors += _sft_errors(spec, task) + task.config_errors(spec) + _offpolicy_errors(spec)
    errors += _packing_errors(spec) + _mesh_errors(spec, num_devices) + _n_opt_errors(spec, task)
    errors += _training_errors(spec) + _batch_errors(spec, num_devices)
    return errors + _other_engine_errors(spec) + _engine_errors(spec, num_devices)


#: The most response-token slots one RL step may hold, ``prompts_per_step x num_samples x
#: max_response_len`` (B x R): 2^31 - 1. Past it one of the step's [B, R] int32 arrays (tokens,
#: masks, positions) alone is over 8 GiB, and the host batch holds several of them plus fp32
#: log-probs: far beyond what one step's memory allows (the paper recipes use 1024 x 8 x 3072 =
#: 2.5e7).
MAX_STEP_TOKENS = 2**31 - 1


def _training_errors(spec: RunSpec) -> list[str]:
    """A training run that trains something: ``steps >= 1`` (``steps=0`` only for an SFT-only run,
    ``sft.steps > 0``, as ``configs/sft.py``), and no greedy rollouts (``rollout.temperature=0``):
    the G samples of a prompt would be one response, every group has zero variance and every
    advantage is 0 (as with ``num_samples=1``). Greedy decoding is for evaluation
    (``eval.temperature=0``)."""
    c, r = Checker({}), spec.rollout
    if spec.mode != "train":
        return []
    c.require(
        spec.steps >= 1 or spec.sft.steps > 0,
        "steps",
        f"{spec.steps} is not allowed; allowed values: >= 1 RL steps (0 only for an SFT-only run, "
        "with sft.steps > 0: it would train nothing)",
    )
    c.require(
        spec.steps == 0 or r.temperature > 0,
        "rollout.temperature",
        f"{r.temperature!r} is not allowed for training; allowed values: > 0. Greedy rollouts "
        f"make the rollout.num_samples={r.num_samples} samples of a prompt one response: every "
        "group has zero variance and trains nothing (greedy decoding is for evaluation: "
        "eval.temperature=0)",
    )
    return c.errors


def _batch_errors(spec: RunSpec, num_devices: int | str | None) -> list[str]:
    """``rollout.prompts_per_step``: ``B x R`` within :data:`MAX_STEP_TOKENS`, and ``B = P x G``
    rows a multiple of the devices the learner's mesh spreads rows over (its "batch" axes) when the
    sampler's rows or the update's are split over them: an engine that lays its rows over the
    batch axes (``protocol.splits_rows``: the static one; the continuous engine pads its slots),
    or an unpacked update (packing rebuilds the update's rows to a multiple). ``num_devices``
    None: the mesh is not checked."""
    c, r = Checker({}), spec.rollout
    rows = r.prompts_per_step * r.num_samples
    c.require(
        rows * r.max_response_len <= MAX_STEP_TOKENS,
        "rollout.prompts_per_step",
        f"{r.prompts_per_step} is too large: prompts_per_step x num_samples x max_response_len = "
        f"{rows} x {r.max_response_len} = {rows * r.max_response_len:.3g} response tokens per "
        f"step; allowed: at most {MAX_STEP_TOKENS} (2^31 - 1, one [B, R] int32 array of 8 GiB)",
    )
    shards = _batch_shards(spec, num_devices)
    if shards > 1 and (protocol.splits_rows(spec.sampler.engine) or not spec.packing.enabled):
        c.require(
            rows % shards == 0,
            "rollout.prompts_per_step",
            f"B = prompts_per_step x num_samples = {r.prompts_per_step} x {r.num_samples} = {rows} "
            f"must be a multiple of the {shards} devices the mesh spreads rows over (its 'batch' "
            "axes); allowed: prompts_per_step such that B is",
        )
    return c.errors


def _batch_shards(spec: RunSpec, num_devices: int | str | None) -> int:
    """Devices the learner's mesh splits the rows over (1: unknown or an invalid mesh, which
    ``_mesh_errors`` reports)."""
    import math

    if num_devices is None:
        return 1
    m = spec.mesh
    try:  # the learner's devices, as mojax.sharding.mesh_errors counts them
        if num_devices == "auto":
            learner = len(sharding.split_devices(m.sampler)[0])
        else:
            learner = int(num_devices) - m.sampler
        shape = sharding.resolve_mesh_shape(m.data, m.fsdp, m.tensor, num_devices=learner)
    except ValueError:
        return 1
    sizes = dict(zip(sharding.MESH_AXES, shape))
    axes = dict(spec.rules).get("batch") or ()
    return math.prod(sizes[a] for a in ((axes,) if isinstance(axes, str) else axes))


def _other_engine_errors(spec: RunSpec) -> list[str]:
    """A value set in the section of an engine that does not run (``config.continuous.slots=64``
    with ``sampler.engine='static'``) is refused by name: it would change nothing."""
    own = getattr(spec.engine_options, "SECTION", None)
    c = Checker({})
    for name, section in spec.engines.items():
        if name == own:
            continue
        for key, default in field_defaults(type(section)).items():
            value = getattr(section, key.rpartition(".")[2])
            if value != default:
                c.fail(
                    key,
                    f"{value!r} is set, but sampler.engine={spec.sampler.engine!r} runs (config."
                    f"{name} applies to the {name} engine only); allowed: the default {default!r}, "
                    f"or sampler.engine={name!r}",
                )
    return c.errors


def _engine_errors(spec: RunSpec, num_devices: int | str | None) -> list[str]:
    """The engine's own rules on the run's mesh (``protocol.config_errors``: e.g. the continuous
    engine's slots over the devices its rows spread over). With several processes each runs its own
    engine on its own devices (all on "data"), so its rules see one process's devices.
    ``num_devices`` None: only the rules that need no devices (no devices known)."""
    if num_devices is None:
        return _engine_shard_errors(spec, None)
    import jax

    if num_devices == "auto":
        if jax.process_count() > 1:  # one engine per process, over its devices on "data"
            local = {"data": jax.local_device_count(), "fsdp": 1, "tensor": 1}
            return _engine_shard_errors(spec, local)
        num_devices = jax.device_count()
    m = spec.mesh
    try:
        shape = sharding.resolve_mesh_shape(
            m.data, m.fsdp, m.tensor, num_devices=int(num_devices) - m.sampler
        )
    except ValueError:  # the mesh's own error is reported by _mesh_errors
        return _engine_shard_errors(spec, None)
    return _engine_shard_errors(spec, dict(zip(sharding.MESH_AXES, shape)))


def _engine_shard_errors(spec: RunSpec, sizes: dict[str, int] | None) -> list[str]:
    """The engine's rules on its mesh ``sizes`` (axis -> devices; None: unknown), as config
    errors."""
    c = Checker({})
    for key, message in protocol.config_errors(
        spec.sampler.engine, spec.rollout, spec.engine_options, spec.rules, sizes
    ):
        c.fail(key, message)
    return c.errors


def _packing_errors(spec: RunSpec) -> list[str]:
    """Packed rows hold several sequences: the sequence-level ratio (one per row) cannot apply."""
    c = Checker({})
    if spec.packing.enabled and spec.ppo.ratio_level != "token":
        c.fail("packing.enabled", "needs ppo.ratio_level='token' (one ratio per row otherwise)")
    return c.errors


def _name_errors(spec: RunSpec) -> list[str]:
    c = Checker({"task": {"name": spec.task.name}})
    if ":" not in spec.task.name:  # built-in tasks; "package.module:Class" imports a custom one
        c.choice("task.name", registry.TASKS)
    else:
        try:
            registry.task_class(spec.task.name)
        except ValueError as e:
            detail = str(e).removeprefix(f"config.task.name={spec.task.name!r}: ")
            c.fail("task.name", f"{spec.task.name!r}: {detail}")
    c.require(
        spec.tokenizer.path != "" or bool(spec.model.checkpoint),
        "tokenizer.path",
        "'' (the checkpoint's tokenizer) needs model.checkpoint; use 'build' or a path",
    )
    c.require(
        not (spec.tokenizer.path == "build" and spec.model.checkpoint),
        "tokenizer.path",
        f"'build' (a vocabulary trained for this run) cannot feed config.model.checkpoint="
        f"{spec.model.checkpoint!r}, whose embeddings belong to the tokenizer it was trained "
        "with: set --config.tokenizer.path='' (the checkpoint's own tokenizer) or the path of "
        "that tokenizer",
    )
    return c.errors


def _shape_errors(spec: RunSpec) -> list[str]:
    """Groups of at least 2 samples, ``eval.ks`` within the pool, the update's batch split."""
    c = Checker({})
    g = spec.rollout.num_samples
    c.require(
        g >= 2,
        "rollout.num_samples",
        f"{g}: every estimator normalises within a group of G samples "
        "(G >= 2 needed; G = 1 trains nothing)",
    )
    pool = spec.eval.num_samples * max(1, spec.task.num_answers)
    too_big = [k for k in spec.eval.ks if k > pool]
    c.require(
        not too_big,
        "eval.ks",
        f"{tuple(spec.eval.ks)}: k={too_big} exceed the eval pool of eval.num_samples x "
        f"answers = {pool}; raise eval.num_samples or drop those k",
    )
    rows = spec.rollout.prompts_per_step * g
    div = spec.ppo.num_minibatches * spec.ppo.num_microbatches
    c.require(
        rows % div == 0,
        "ppo.num_minibatches",
        f"B = prompts_per_step * num_samples = {rows} must be divisible by "
        f"num_minibatches * num_microbatches = {div}",
    )
    return c.errors


def _method_errors(spec: RunSpec, task) -> list[str]:
    """The method's input kind against ``task.num_answers``, its objectives, and every weight
    vector's length against the task's objectives."""
    c = Checker({})
    method = spec.method
    sets = spec.task.num_answers > 0
    if sets != (method.inputs == "sets"):
        need = "needs task.num_answers > 0 (multi-answer sets)"
        if method.inputs != "sets":
            need = "needs task.num_answers = 0 (single answers)"
        c.fail("task.num_answers", f"{method.name!r} {need}")
    external = list(task.external_objectives)
    if sets and external:  # a source fills one value per completion (rewards.batch.score_sets)
        c.fail(
            "task.num_answers",
            f"{spec.task.num_answers} (answer sets) cannot score the task's external objectives "
            f"{external}: their reward sources fill one value per completion, not one per answer; "
            "allowed: a task without external objectives, or task.num_answers = 0",
        )
    c.errors += method.objective_errors(task.objective_names)
    weights = {"advantage.weights": spec.advantage.get("weights")}
    for name in spec.enabled_sections():
        w = getattr(spec.sections[name], "weights", None)
        if w is not None:
            weights[f"{name}.weights"] = w
    m = task.num_objectives
    for key, w in weights.items():
        if w is not None and len(tuple(w)) != m:
            names = list(task.objective_names)
            c.fail(key, f"{tuple(w)} has {len(tuple(w))} entries; task objectives are {names}")
    return c.errors


def _n_opt_errors(spec: RunSpec, task) -> list[str]:
    """The reward-source options of the config (``tool_reward.*`` and those an enabled method
    section sets, ``reward_options()``) against the task (``mojax.rewards.option_errors``)."""
    from mojax.rewards import option_errors

    options = {"tool_reward.n_opt": {"n_opt": spec.tool_reward.n_opt}}
    for section in spec.sections.values():
        if getattr(section, "enabled", False) and hasattr(section, "reward_options"):
            options.update(section.reward_options())
    return option_errors(task, options)


def _goal_errors(spec: RunSpec, task) -> list[str]:
    """Goal-conditioned training (arXiv:2605.22817, App. E.5) trains on the per-prompt scalar
    ``w . r``: a method that takes per-prompt weights, no method section on, no fixed
    ``advantage.weights``, and a canonical ``w*`` (``task.scalar_weights``) for evaluation."""
    if not spec.task.goal_conditioned:
        return []
    key = "config.task.goal_conditioned"
    errs = []
    on = spec.enabled_sections()
    if not spec.method.per_prompt_weights or on:
        takers = sorted(n for n, m in METHODS.items() if m.per_prompt_weights)
        errs.append(
            f"{key}=True: needs an estimator that takes per-prompt weights {takers} without "
            f"method sections on (got estimator={spec.estimator!r}, enabled sections={on})"
        )
    if spec.advantage.get("weights") is not None:
        errs.append(f"{key}=True: the weights are drawn per prompt; unset advantage.weights")
    m = task.num_objectives
    if len(tuple(task.scalar_weights)) != m:
        errs.append(
            f"{key}=True: task {task.name!r} needs scalar_weights of length M={m} "
            f"(the canonical w* evaluation conditions on); has {tuple(task.scalar_weights)}"
        )
    return errs


def _sft_errors(spec: RunSpec, task) -> list[str]:
    c = Checker({})
    c.require(
        spec.sft.steps == 0 or task.has_demonstrations(spec.sft),
        "sft.steps",
        f"{spec.sft.steps} > 0 needs demonstrations: task {spec.task.name!r} generates none, "
        "set sft.data_path (or sft.steps=0)",
    )
    return c.errors


def _offpolicy_errors(spec: RunSpec) -> list[str]:
    """A correction needs π_old from the learner (with the sampler's log-probs as π_old the ratio
    ``π_old / μ`` it corrects is 1)."""
    c = Checker({})
    rc = spec.rollout_correction
    c.require(
        not rc.enabled or spec.ppo.old_logprobs == "recompute",
        "rollout_correction",
        f"is_level={rc.is_level!r}, reject={rc.reject!r} needs ppo.old_logprobs='recompute' "
        f"(got {spec.ppo.old_logprobs!r}: π_old is then the sampler's and the ratio is 1)",
    )
    return c.errors


def _mesh_errors(spec: RunSpec, num_devices: int | str | None) -> list[str]:
    """``mojax.sharding.mesh_errors``: the mesh against ``num_devices`` and the model (variant +
    overrides or the checkpoint's config.json; a self-built vocabulary is checked once built)."""
    try:
        model, rules = qwen_config(spec, None), spec.rules
    except Exception:  # noqa: BLE001 - a missing checkpoint is reported when the run builds it
        model = rules = None
    build = spec.tokenizer.path == "build" and not spec.model.checkpoint
    skip = ("vocab",) if build and "vocab_size" not in spec.model.overrides else ()
    sizes = spec.mesh.as_dict()
    return sharding.mesh_errors(sizes, num_devices, model, rules, skip=skip)
