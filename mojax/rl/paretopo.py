"""ParetoPO's two-stage schedule on the host (ParetoPO, arXiv:2606.16111, Algorithm 1 and Sec. 3.3).

* **Stage 1** (steps ``< stage1_steps``): scalar ``r_w = w·r`` scaled by ``r_pareto`` (Eqs. 5–6),
  then the Stage-1 estimator (GRPO/DAPO by default). In ``"global"`` mode ``r_pareto`` comes from the
  validation archive (one value per step); in ``"per_trajectory"`` mode each sample's ``ΔHV(r_i, B)``
  against the archive gives its own scale. After each validation, ``v_t`` updates the archive, ``ΔHV̄``
  and ``r_pareto`` (``mojax.pareto.stage1_update``).
* **Stage 2**: Pareto-rank advantages (Eqs. 7–9, ``mojax.advantages.pareto_rank``).

The controller holds only settings; its state (``mojax.pareto.Stage1State``: archive, reference, ``ΔHV̄``,
``r_pareto``) lives in ``HostState.stage1`` and is passed in and returned, so a checkpoint restores it and a
resumed run continues Stage 1 exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from absl import logging

from mojax import advantages as adv_lib
from mojax import pareto


@dataclasses.dataclass(frozen=True)
class ParetoPOController:
    """Chooses the stage, computes its advantages and folds validation vectors into the archive.

    Attributes:
      stage1_steps: RL steps of Stage 1; weights: ``w`` of ``r_w``; mode: ``"global"`` or
      ``"per_trajectory"``; gamma: EMA factor; reference: ``"initial"`` (v_0) or ``"zeros"``;
      stage1_estimator: ``grpo`` or ``dr_grpo``; stage2_kwargs: ``pareto_rank`` keyword arguments;
      dynamic_weighting / pareto_ranking: the paper's two ablations (Table 3) when False — Stage 1
      without the HV-guided scale (``r_pareto = 1``: a static ``w·r`` scalarization), and Stage 2
      replaced by Stage 1's scalarized estimator.
    """

    stage1_steps: int
    weights: tuple[float, ...]
    mode: str = "global"
    gamma: float = 0.5
    reference: str = "initial"
    stage1_estimator: str = "grpo"
    stage2_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    dynamic_weighting: bool = True  # False: ablation "w/o dynamic weighting" (r_pareto = 1)
    pareto_ranking: bool = (
        True  # False: ablation "w/o Pareto ranking" (Stage 1's estimator throughout)
    )

    def __post_init__(self):
        warning = pareto.stage1_cancellation_warning(self.mode, self.stage1_estimator)
        if warning and self.stage1_steps > 0:
            logging.warning(warning)

    @classmethod
    def from_spec(cls, spec, num_train: int, prompts_per_step: int) -> ParetoPOController:
        """From an :class:`mojax.rl.spec.AdvantageSpec` with ``paretopo.enabled``;
        ``stage1_steps = -1`` is one epoch, ``ceil(num_train / prompts_per_step)`` (Sec. 4.1)."""
        p = spec.paretopo
        stage1 = p.stage1_steps if p.stage1_steps >= 0 else -(-num_train // prompts_per_step)
        return cls(
            stage1_steps=stage1,
            weights=tuple(p.weights),
            mode=p.mode,
            gamma=p.gamma,
            reference=p.reference,
            stage1_estimator=p.stage1_estimator,
            stage2_kwargs=dict(spec.kwargs),
            dynamic_weighting=p.dynamic_weighting,
            pareto_ranking=p.pareto_ranking,
        )

    def stage(self, step: int) -> int:
        return 1 if step < self.stage1_steps else 2

    def start(self, v0) -> tuple[pareto.Stage1State, dict[str, float]]:
        """Algorithm 1 lines 1–2 with the initial policy's validation vector ``v0 [M]``."""
        v0 = np.asarray(v0, np.float64)
        ref = np.zeros_like(v0) if self.reference == "zeros" else None
        state = pareto.stage1_init(v0, ref=ref, gamma=self.gamma)
        metrics = {
            "pareto/hv": pareto.hypervolume(state.archive, state.ref),
            "pareto/r_pareto": state.r_pareto,
            "pareto/archive_size": 1,
        }
        return state, metrics

    def on_validation(self, state, v_t) -> tuple[pareto.Stage1State, dict[str, float]]:
        """Algorithm 1 lines 13–18: archive, ``ΔHV̄`` and ``r_pareto`` from ``v_t [M]``."""
        if state is None:
            return self.start(v_t)
        state, metrics = pareto.stage1_update(state, v_t)
        return state, {k: float(v) for k, v in metrics.items()}

    def advantages(self, step: int, state, rewards, valid) -> tuple[adv_lib.AdvantageOutput, dict]:
        """The step's advantages ``[P, G]`` from ``rewards [P, G, M]`` and stage metrics."""
        fn = adv_lib.ESTIMATORS[self.stage1_estimator]
        if self.stage(step) == 2:
            if not self.pareto_ranking:  # ablation: the scalarized estimator in Stage 2 too
                return fn(rewards, valid, weights=tuple(self.weights)), {"pareto/stage": 2}
            out = adv_lib.pareto_rank(rewards, valid, **self.stage2_kwargs)
            return out, {"pareto/stage": 2}
        if state is None:
            raise RuntimeError(
                "ParetoPO Stage 1 needs start(v0) with the initial validation vector"
            )
        if not self.dynamic_weighting:  # ablation: static w . r, no HV-guided scale
            scale = 1.0
        elif self.mode == "global":
            scale = float(state.r_pareto)
        else:
            scale = pareto.stage1_sample_scales(state, rewards, valid)
        out = fn(rewards, valid, weights=tuple(self.weights), reward_scale=scale)
        metrics = {"pareto/stage": 1, "pareto/r_pareto": float(np.mean(scale))}
        return out, metrics
