"""The sampler interface a rollout receives, and its first implementation, the in-graph sampler.

A rollout (``mojax.rollout.run_rollout``) needs three things from a generation engine::

    sampler.update_weights(params)                   # the policy to sample from (after each update)
    out = sampler.generate(prompts, key=..., ...)    # prefill + decode until every row stops
    out = sampler.append_and_continue(out.state, obs, obs_lengths, resume, ...)  # a tool turn

and ``sampler.row_sharding``: how the rows of a call lie over the devices (None: one device), so
each process reads and writes only the rows it holds. :class:`InGraphSampler` is the KV-cached
``lax.while_loop`` sampler of ``mojax.sampling`` on the run's mesh; another engine (continuous
batching, a separate sampler mesh) implements the same three calls.

The model config's execution layouts are resolved when the sampler is built
(``mojax.models.layouts.resolve``), once.
"""

from __future__ import annotations

from typing import Any, Protocol

from mojax import sharding as sharding_lib
from mojax.models import layouts as layouts_lib
from mojax.models.qwen import DEFAULT_LOGICAL_AXIS_RULES, QwenModel
from mojax.sampling import api
from mojax.sampling.state import SamplingOutput, SamplingState


class Sampler(Protocol):
    """What a rollout needs from a generation engine (see the module docstring)."""

    row_sharding: Any

    def update_weights(self, params: Any) -> None: ...

    def generate(self, prompt_tokens, **kwargs) -> SamplingOutput: ...

    def append_and_continue(
        self, state: SamplingState, obs_tokens, obs_lengths, resume, **kwargs
    ) -> SamplingOutput: ...


class InGraphSampler:
    """The in-graph sampler (``mojax.sampling.generate`` / ``append_and_continue``) on a mesh.

    Args:
      config: the policy's ``QwenConfig`` (its layouts are resolved here if unset).
      params: the initial weights (or None until ``update_weights``).
      mesh, rules: the device mesh and logical axis rules the calls shard over (None: one device).
    """

    def __init__(self, config, params=None, *, mesh=None, rules=DEFAULT_LOGICAL_AXIS_RULES):
        self.config = layouts_lib.resolve(config)
        self.mesh, self.rules = mesh, tuple(rules)
        self.model = None if params is None else QwenModel(config=self.config, params=params)

    @classmethod
    def of(cls, model: QwenModel, *, mesh=None, rules=DEFAULT_LOGICAL_AXIS_RULES) -> InGraphSampler:
        """A sampler over an existing model (its class kept: a subclass's forward is used)."""
        sampler = cls(model.config, mesh=mesh, rules=rules)
        sampler.model = model.replace(config=sampler.config)
        return sampler

    @property
    def row_sharding(self):
        """Rows over the mesh's batch axes (None without a mesh)."""
        if self.mesh is None:
            return None
        return sharding_lib.batch_sharding(self.mesh, self.rules, 1)

    def update_weights(self, params) -> None:
        """Samples from ``params`` from the next call on (no copy: the arrays are shared)."""
        if self.model is None:
            self.model = QwenModel(config=self.config, params=params)
        else:
            self.model = self.model.replace(params=params)

    def _model(self) -> QwenModel:
        if self.model is None:
            raise ValueError("InGraphSampler: call update_weights(params) before sampling")
        return self.model

    def generate(self, prompt_tokens, **kwargs) -> SamplingOutput:
        """``mojax.sampling.generate`` with this sampler's weights, mesh and rules."""
        return api.generate(
            self._model(), prompt_tokens, mesh=self.mesh, rules=self.rules, **kwargs
        )

    def append_and_continue(
        self, state, obs_tokens, obs_lengths, resume, **kwargs
    ) -> SamplingOutput:
        """``mojax.sampling.append_and_continue`` with this sampler's weights, mesh and rules."""
        return api.append_and_continue(
            self._model(),
            state,
            obs_tokens,
            obs_lengths,
            resume,
            mesh=self.mesh,
            rules=self.rules,
            **kwargs,
        )
