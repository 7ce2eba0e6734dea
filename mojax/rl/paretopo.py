"""ParetoPO's two-stage schedule on the host (000, Algorithm 1 and Sec. 3.3).

* **Stage 1** (steps ``< stage1_steps``): scalar ``r_w = w·r`` scaled by ``r_pareto`` (000 Eqs. 5–6),
  then the Stage-1 estimator (GRPO/DAPO by default). In ``"global"`` mode ``r_pareto`` comes from the
  validation archive (one value per step); in ``"per_trajectory"`` mode each sample's ``ΔHV(r_i, B)``
  against the archive gives its own scale. After each validation, ``v_t`` updates the archive, ``ΔHV̄``
  and ``r_pareto`` (``mojax.pareto.stage1_update``).
* **Stage 2**: Pareto-rank advantages (000 Eqs. 7–9, ``mojax.advantages.pareto_rank``).

The controller's whole state (archive, reference, ``ΔHV̄``, ``r_pareto``) is plain data saved in
checkpoints (``state_dict`` / ``load_state_dict``), so a resumed run continues Stage 1 exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from absl import logging

from mojax import advantages as adv_lib
from mojax import pareto


@dataclasses.dataclass
class ParetoPOController:
    """Chooses the stage, computes its advantages and folds validation vectors into the archive.

    Attributes:
      stage1_steps: RL steps of Stage 1; weights: ``w`` of ``r_w``; mode: ``"global"`` or
      ``"per_trajectory"``; gamma: EMA factor; reference: ``"initial"`` (v_0) or ``"zeros"``;
      stage1_estimator: ``grpo`` or ``dr_grpo``; stage2_kwargs: ``pareto_rank`` keyword arguments.
    """

    stage1_steps: int
    weights: tuple[float, ...]
    mode: str = "global"
    gamma: float = 0.5
    reference: str = "initial"
    stage1_estimator: str = "grpo"
    stage2_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    state: pareto.Stage1State | None = None

    def __post_init__(self):
        if self.mode not in pareto.STAGE1_MODES:
            raise ValueError(f"paretopo.mode={self.mode!r} is not one of {pareto.STAGE1_MODES}")
        if self.stage1_estimator not in ("grpo", "dr_grpo"):
            raise ValueError(
                f"paretopo.stage1_estimator={self.stage1_estimator!r} is not one of "
                "['grpo', 'dr_grpo'] (the estimators that take reward_scale)"
            )
        warning = pareto.stage1_cancellation_warning(self.mode, self.stage1_estimator)
        if warning and self.stage1_steps > 0:
            logging.warning(warning)

    def stage(self, step: int) -> int:
        return 1 if step < self.stage1_steps else 2

    @property
    def started(self) -> bool:
        return self.state is not None

    def start(self, v0) -> dict[str, float]:
        """Algorithm 1 lines 1–2 with the initial policy's validation vector ``v0``."""
        v0 = np.asarray(v0, np.float64)
        ref = np.zeros_like(v0) if self.reference == "zeros" else None
        self.state = pareto.stage1_init(v0, ref=ref, gamma=self.gamma)
        return {
            "pareto/hv": pareto.hypervolume(self.state.archive, self.state.ref),
            "pareto/r_pareto": self.state.r_pareto,
            "pareto/archive_size": 1,
        }

    def on_validation(self, v_t) -> dict[str, float]:
        """Algorithm 1 lines 13–18: archive, ``ΔHV̄`` and ``r_pareto`` from ``v_t``."""
        if self.state is None:
            return self.start(v_t)
        self.state, metrics = pareto.stage1_update(self.state, v_t)
        return {k: float(v) for k, v in metrics.items()}

    def advantages(self, step: int, rewards, valid) -> tuple[adv_lib.AdvantageOutput, dict]:
        """The step's advantages ``[P, G]`` and stage metrics."""
        if self.stage(step) == 2:
            out = adv_lib.pareto_rank(rewards, valid, **self.stage2_kwargs)
            return out, {"pareto/stage": 2}
        if self.state is None:
            raise RuntimeError(
                "ParetoPO Stage 1 needs start(v0) with the initial validation vector"
            )
        if self.mode == "global":
            scale = float(self.state.r_pareto)
        else:
            scale = pareto.stage1_sample_scales(self.state, rewards, valid)
        fn = adv_lib.ESTIMATORS[self.stage1_estimator]
        out = fn(rewards, valid, weights=tuple(self.weights), reward_scale=scale)
        metrics = {"pareto/stage": 1, "pareto/r_pareto": float(np.mean(scale))}
        return out, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"stage1": None if self.state is None else self.state.to_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        s = state.get("stage1")
        self.state = None if s is None else pareto.Stage1State.from_state(s)
