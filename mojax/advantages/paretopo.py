"""ParetoPO as a method with hooks (ParetoPO, arXiv:2606.16111, Algorithm 1 and Sec. 3.3).

* **Stage 1** (steps ``< stage1_steps``): scalar ``r_w = w·r`` scaled by ``r_pareto`` (Eqs. 5–6),
  then the Stage-1 estimator (GRPO/DAPO by default). In ``"global"`` mode ``r_pareto`` comes from the
  validation archive (one value per step); in ``"per_trajectory"`` mode each sample's ``ΔHV(r_i, B)``
  against the archive gives its own scale. After each validation, ``v_t`` updates the archive, ``ΔHV̄``
  and ``r_pareto`` (``mojax.pareto.stage1_update``).
* **Stage 2**: Pareto-rank advantages (Eqs. 7–9, ``mojax.advantages.pareto_rank``).

The hooks hold only settings; the Stage-1 state (``mojax.pareto.Stage1State``: archive, reference,
``ΔHV̄``, ``r_pareto``) is passed in and returned as JSON data, so a checkpoint restores it and a
resumed run continues Stage 1 exactly. ``config.paretopo`` (:class:`ParetoPOSpec`) turns it on for
the ``pareto_rank`` estimator; without it ``pareto_rank`` is a plain per-step estimator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from absl import logging

from mojax import pareto
from mojax.advantages._method import EstimatorHooks, MethodContext
from mojax.advantages.grpo import dr_grpo, grpo
from mojax.config import Checker, option

STAGE1_ESTIMATORS = {"grpo": grpo, "dr_grpo": dr_grpo}  # the estimators that take reward_scale
REFERENCES = ("initial", "zeros", "below_initial")


@dataclasses.dataclass(frozen=True)
class ParetoPOSpec:
    """``config.paretopo``: ParetoPO's Stage 1 (HV-guided scalarization) then Stage 2."""

    SECTION: ClassVar[str] = "paretopo"
    enabled: bool = option(False, help="ParetoPO's two stages (estimator pareto_rank in Stage 2)")
    stage1_steps: int = option(10, help="Stage 1 (HV-guided scalarization) steps; -1 = one epoch")
    stage1_estimator: str = option("grpo", help="estimator of the scalarized reward in Stage 1")
    weights: tuple = option((0.6, 0.4), help="w of r_w = w . r (ParetoPO Eq. 5)")
    mode: str = option("global", help='"global" (Algorithm 1) | "per_trajectory" (Eq. 6)')
    gamma: float = option(0.5, help="EMA factor of ΔHV")
    reference: str = option(
        "below_initial",
        help='HV reference: "initial" (v_0) | "zeros" | "below_initial" (v_0 - reference_margin)',
    )
    validate_every: int = option(1, help="Stage-1 validation (archive update) every N steps")
    dynamic_weighting: bool = option(
        True, help='False: ablation "w/o dynamic weighting" (r_pareto = 1)'
    )
    pareto_ranking: bool = option(True, help='False: ablation "w/o Pareto ranking" (Stage 1 only)')
    reference_margin: float = option(
        0.1, help='reference="below_initial": the HV reference is v_0 minus this, per objective'
    )
    validation_samples: int = option(
        4, help="samples per validation problem of the validation vector v_t (mean over them)"
    )
    validation_temperature: float = option(
        1.0, help="sampling temperature of the validation vector's rollouts (0 = greedy)"
    )
    validation_n_opt: str = option(
        "tracked",
        help='r_tool\'s N_opt in the validation vector: "tracked" (the validation table) | '
        '"fixed" (the task\'s rule)',
    )

    def reward_options(self) -> dict[str, dict]:
        """The reward-source options this section sets, by config key (checked against the task by
        ``mojax.rewards.option_errors``)."""
        return {"paretopo.validation_n_opt": {"n_opt": self.validation_n_opt}}

    def __post_init__(self):
        object.__setattr__(self, "weights", tuple(self.weights))
        c = Checker({"paretopo": dataclasses.asdict(self)})
        if self.enabled:
            c.choice("paretopo.mode", pareto.STAGE1_MODES)
            c.choice("paretopo.reference", REFERENCES)
            c.in_range("paretopo.reference_margin", 0.0, low_inclusive=False, finite=True)
            c.in_range("paretopo.validation_samples", 1)
            c.in_range("paretopo.validation_temperature", 0.0, finite=True)
            c.choice("paretopo.validation_n_opt", pareto.N_OPT_SOURCES)
            c.choice("paretopo.stage1_estimator", tuple(STAGE1_ESTIMATORS))
            c.in_range("paretopo.stage1_steps", -1)  # -1: one epoch of the training split
            c.in_range("paretopo.gamma", 0.0, 1.0, high_inclusive=False)
            c.in_range("paretopo.validate_every", 1)
        c.raise_if_any()


def make_hooks(ctx: MethodContext) -> Any:
    """ParetoPO's hooks when ``config.paretopo.enabled``, else the plain estimator's."""
    spec = ctx.sections.get(ParetoPOSpec.SECTION)
    if spec is None or not spec.enabled:
        return EstimatorHooks(ctx)
    return ParetoPOHooks.create(ctx, spec)


@dataclasses.dataclass(frozen=True)
class ParetoPOHooks:
    """Chooses the stage, computes its advantages and folds validation vectors into the archive.

    Attributes:
      stage1_steps: RL steps of Stage 1; weights: ``w`` of ``r_w``; mode: ``"global"`` or
      ``"per_trajectory"``; gamma: EMA factor; reference: ``"initial"`` (v_0) or ``"zeros"``;
      stage1_estimator: ``grpo`` or ``dr_grpo``; stage2: the Stage-2 transform
      (``pareto_rank``) and stage2_kwargs its keywords; validate_every: validations in Stage 1;
      dynamic_weighting / pareto_ranking: the paper's two ablations (Table 3) when False — Stage 1
      without the HV-guided scale (``r_pareto = 1``: a static ``w·r`` scalarization), and Stage 2
      replaced by Stage 1's scalarized estimator.
    """

    stage1_steps: int
    weights: tuple[float, ...]
    stage2: Callable[..., Any]
    mode: str = "global"
    gamma: float = 0.5
    reference: str = "initial"
    stage1_estimator: str = "grpo"
    stage2_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    validate_every: int = 1
    dynamic_weighting: bool = True
    pareto_ranking: bool = True
    reference_margin: float = 0.1
    validation_samples: int = 1
    validation_temperature: float = 0.0
    validation_n_opt: str = "tracked"

    def __post_init__(self):
        warning = pareto.stage1_cancellation_warning(self.mode, self.stage1_estimator)
        if warning and self.stage1_steps > 0:
            logging.warning(warning)

    @classmethod
    def create(cls, ctx: MethodContext, p: ParetoPOSpec) -> ParetoPOHooks:
        """``stage1_steps = -1`` is one epoch, ``ceil(num_train / prompts_per_step)`` (Sec. 4.1)."""
        steps = p.stage1_steps if p.stage1_steps >= 0 else -(-ctx.num_train // ctx.prompts_per_step)
        return cls(
            stage1_steps=steps,
            weights=tuple(p.weights),
            stage2=ctx.method.fn,
            mode=p.mode,
            gamma=p.gamma,
            reference=p.reference,
            stage1_estimator=p.stage1_estimator,
            stage2_kwargs=dict(ctx.kwargs),
            validate_every=p.validate_every,
            dynamic_weighting=p.dynamic_weighting,
            pareto_ranking=p.pareto_ranking,
            reference_margin=p.reference_margin,
            validation_samples=p.validation_samples,
            validation_temperature=p.validation_temperature,
            validation_n_opt=p.validation_n_opt,
        )

    def stage(self, step: int) -> int:
        return 1 if step < self.stage1_steps else 2

    def validation_settings(self) -> dict[str, Any]:
        """The keywords of ``validate(**settings)``: {} for the greedy single-sample vector scored
        with the tracked ``N_optimal`` (mojax's original behaviour), else
        ``num_samples``, ``temperature`` and ``n_opt``."""
        settings = (self.validation_samples, self.validation_temperature, self.validation_n_opt)
        if settings == (1, 0.0, "tracked"):
            return {}
        return dict(zip(("num_samples", "temperature", "n_opt"), settings))

    def reference_point(self, v0: np.ndarray) -> np.ndarray | None:
        """The HV reference: None (``v_0`` itself, Algorithm 1 line 1), zeros, or ``v_0`` minus
        ``reference_margin`` (``"below_initial"``: ``v_0`` then adds volume of its own)."""
        if self.reference == "zeros":
            return np.zeros_like(v0)
        if self.reference == "below_initial":
            return v0 - float(self.reference_margin)
        return None

    def start(self, state, validate) -> tuple[Any, dict[str, float]]:
        """Algorithm 1 lines 1–2 with the initial policy's validation vector ``v_0 [M]``."""
        del state
        v0 = np.asarray(validate(**self.validation_settings()), np.float64)
        s = pareto.stage1_init(v0, ref=self.reference_point(v0), gamma=self.gamma)
        metrics = {
            "pareto/hv": pareto.hypervolume(s.archive, s.ref),
            "pareto/r_pareto": s.r_pareto,
            "pareto/archive_size": 1,
        }
        return s.to_state(), metrics

    def after_step(self, step: int, state, validate) -> tuple[Any, dict[str, float]]:
        """Algorithm 1 lines 13–18 after a Stage-1 update when a validation is due: archive,
        ``ΔHV̄`` and ``r_pareto`` from ``v_t [M]``. ``step``: updates done."""
        if self.stage(step - 1) != 1 or step % self.validate_every != 0:
            return state, {}
        v_t = validate(**self.validation_settings())
        if state is None:
            return self.start(None, lambda **_: v_t)
        s, metrics = pareto.stage1_update(pareto.Stage1State.from_state(state), v_t)
        return s.to_state(), {k: float(v) for k, v in metrics.items()}

    def advantages(self, step: int, state, inputs, key) -> tuple[Any, Any, dict]:
        """The step's advantages ``[P, G]`` from ``rewards [P, G, M]`` and stage metrics."""
        del key
        rewards, valid = inputs.rewards, inputs.valid
        fn = STAGE1_ESTIMATORS[self.stage1_estimator]
        if self.stage(step) == 2:
            if not self.pareto_ranking:  # ablation: the scalarized estimator in Stage 2 too
                return fn(rewards, valid, weights=tuple(self.weights)), state, {"pareto/stage": 2}
            out = self.stage2(rewards, valid, **self.stage2_kwargs)
            return out, state, {"pareto/stage": 2}
        if state is None:
            raise RuntimeError("ParetoPO Stage 1 needs start() with the initial validation vector")
        s = pareto.Stage1State.from_state(state)
        if not self.dynamic_weighting:  # ablation: static w . r, no HV-guided scale
            scale = 1.0
        elif self.mode == "global":
            scale = float(s.r_pareto)
        else:
            scale = pareto.stage1_sample_scales(s, rewards, valid)
        out = fn(rewards, valid, weights=tuple(self.weights), reward_scale=scale)
        metrics = {"pareto/stage": 1, "pareto/r_pareto": float(np.mean(scale))}
        return out, state, metrics
