"""Method descriptors: what the RL loop needs to know to call an advantage transform.

Each ``advantages/<method>.py`` exports a :class:`Method` beside its function: the function, its input
kind (reward vectors ``[P, G, M]`` or answer sets ``[P, G, S, M]``), whether it carries state across
steps, whether it needs a PRNG key, the keyword arguments it takes from the task, the objectives it
needs, the config sections it owns and, for a method that is more than one call per step (ParetoPO's
two stages), its hooks. The loop (``mojax.rl.step``, ``mojax.rl.trainer``) calls every method through
its hooks and names none.

Hooks protocol (``EstimatorHooks`` is the one every plain estimator gets)::

    state, metrics = hooks.start(state, validate)                 # before step 0
    out, state, metrics = hooks.advantages(step, state, inputs, key)
    state, metrics = hooks.after_step(step, state, validate)      # after each update

``state`` is the method's carried state as JSON data (it lives in the checkpointed host state);
``validate()`` rolls out the validation split with the current policy and returns its mean reward
vector ``[M]`` (only called when a method asks for it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from mojax.config import keyword_names

INPUT_KINDS = ("vectors", "sets")


def to_json_tree(tree: Any) -> Any:
    """A pytree of arrays / scalars as nested lists, dicts and Python numbers (JSON-safe)."""
    if tree is None:
        return None
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x)).tolist(), tree)


@dataclasses.dataclass(frozen=True)
class AdvantageInputs:
    """One step's scored episodes, as the transforms read them.

    Attributes:
      rewards: float32 ``[P, G, M]``; valid: bool ``[P, G]``.
      set_rewards / set_valid: ``[P, G, S, M]`` / ``[P, G, S]`` for multi-answer sets (else None).
      sample: per-sample extra inputs by keyword, None values dropped.
      goal_weights: float32 ``[P, M]``: goal-conditioned GRPO's per-prompt ``w`` (else None).
      objective_valid: bool ``[P, G, M]``: the per-objective validity mask (False where a reward
        source could not score that objective of a sample; else None).
    """

    rewards: np.ndarray
    valid: np.ndarray
    set_rewards: np.ndarray | None = None
    set_valid: np.ndarray | None = None
    sample: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    goal_weights: np.ndarray | None = None
    objective_valid: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class MethodContext:
    """What a method's hooks are built from (once per run).

    Attributes:
      method: the descriptor; kwargs: ``config.advantage`` completed with the task's facts;
      sections: the method's config sections by name (``{"paretopo": ParetoPOSpec}``);
      num_train: training examples; prompts_per_step: P.
    """

    method: Method
    kwargs: Mapping[str, Any]
    sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_train: int = 0
    prompts_per_step: int = 1


@dataclasses.dataclass(frozen=True)
class Method:
    """An advantage transform as the loop sees it (see the module docstring).

    Attributes:
      name: the ``config.estimator`` value.
      fn: the pure transform.
      inputs: ``"vectors"`` (``rewards, valid``) or ``"sets"`` (``set_rewards, set_valid``).
      stateful: takes ``state=`` and returns ``out.state`` to carry to the next step.
      needs_key: takes a PRNG ``key=`` (drawn from the step's key).
      task_facts: ``task -> {keyword: value}`` taken from the task's declared objectives (keys the
        config sets win).
      objectives: objective names the task must declare, in this order.
      requirement: how a config meets ``objectives`` (said in the error).
      sample_inputs: per-sample keyword inputs the episodes carry (``AdvantageInputs.sample``).
      validity_inputs: ``(keyword, objective)`` pairs: the keyword gets the per-objective validity
        mask's column of that objective, bool ``[P, G]`` (AWPO: ``("reason_valid", "r_reason")``);
        the objective must be one of ``objectives``.
      reward_sources: the reward sources the method reads (``mojax.rewards.SOURCES``' names); a
        run whose task gives it neither the source nor its objective is refused.
      per_prompt_weights: accepts ``weights [P, M]`` per prompt (goal-conditioned GRPO).
      sections: config section specs the method owns (each has ``SECTION`` and ``enabled``).
      hooks: ``MethodContext -> hooks`` for a method that is more than one call per step; the
        default is :class:`EstimatorHooks`.
    """

    name: str
    fn: Callable[..., Any]
    inputs: str = "vectors"
    stateful: bool = False
    needs_key: bool = False
    task_facts: Callable[[Any], dict] | None = None
    objectives: tuple[str, ...] = ()
    requirement: str = ""
    sample_inputs: tuple[str, ...] = ()
    validity_inputs: tuple[tuple[str, str], ...] = ()
    reward_sources: tuple[str, ...] = ()
    per_prompt_weights: bool = False
    sections: tuple[type, ...] = ()
    hooks: Callable[[MethodContext], Any] | None = None

    def __post_init__(self):
        if self.inputs not in INPUT_KINDS:
            raise ValueError(f"Method {self.name!r}: inputs must be one of {INPUT_KINDS}")
        for _, objective in self.validity_inputs:
            if objective not in self.objectives:
                raise ValueError(
                    f"Method {self.name!r}: validity input of {objective!r}, not among its "
                    f"objectives {self.objectives}"
                )

    @property
    def data_args(self) -> tuple[str, ...]:
        """The arguments the loop fills (never ``config.advantage`` keys)."""
        data = ("set_rewards", "set_valid") if self.inputs == "sets" else ("rewards", "valid")
        extra = ("key",) * self.needs_key + ("state",) * self.stateful + self.sample_inputs
        extra += tuple(kw for kw, _ in self.validity_inputs)
        return data + extra

    def hyperparameters(self) -> set[str]:
        """The keyword arguments a config may set in ``config.advantage``."""
        return keyword_names(self.fn, skip=self.data_args)

    def make_hooks(self, ctx: MethodContext) -> Any:
        return (self.hooks or EstimatorHooks)(ctx)

    def objective_errors(self, names: tuple[str, ...]) -> list[str]:
        """``config.task`` errors when the task's objectives ``names`` do not fit."""
        if not self.objectives or tuple(names[: len(self.objectives)]) == self.objectives:
            return []
        need = ", ".join(self.objectives)
        how = f": {self.requirement}" if self.requirement else ""
        return [
            f"config.task: estimator {self.name!r} needs objectives ({need}){how}; the task "
            f"declares {list(names)}"
        ]


class EstimatorHooks:
    """One call of the method's transform per step on the step's rewards (every plain estimator)."""

    def __init__(self, ctx: MethodContext):
        self.method = ctx.method
        self.kwargs = dict(ctx.kwargs)

    def start(self, state: Any, validate: Callable[[], np.ndarray]) -> tuple[Any, dict]:
        del validate
        return state, {}

    def advantages(self, step: int, state: Any, inputs: AdvantageInputs, key) -> tuple:
        """``(AdvantageOutput, new state, metrics)`` of one step."""
        del step
        m, kwargs = self.method, dict(self.kwargs)
        if m.needs_key:
            kwargs["key"] = key
        if m.stateful:
            kwargs["state"] = state
        if inputs.goal_weights is not None:  # goal-conditioned GRPO: per-prompt w [P, M]
            kwargs["weights"] = inputs.goal_weights
        for name in m.sample_inputs:
            if inputs.sample.get(name) is not None:
                kwargs[name] = inputs.sample[name]
        if inputs.objective_valid is not None:
            for kw, objective in m.validity_inputs:
                kwargs[kw] = inputs.objective_valid[..., m.objectives.index(objective)]
        if m.inputs == "sets":
            out = m.fn(inputs.set_rewards, inputs.set_valid, **kwargs)
        else:
            out = m.fn(inputs.rewards, inputs.valid, **kwargs)
        return out, (to_json_tree(out.state) if m.stateful else state), {}

    def after_step(self, step: int, state: Any, validate: Callable[[], np.ndarray]) -> tuple:
        del step, validate
        return state, {}
