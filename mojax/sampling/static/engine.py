"""The static engine: the in-graph sampler (``sampler.engine='static'``).

The protocol of every engine is ``mojax.sampling.protocol``; the static engine's sessions
(``mojax.sampling.static.session``) run a rollout in rounds of three calls::

    sampler.update_weights(params)                   # the policy to sample from (after each update)
    out = sampler.generate(prompts, key=..., ...)    # prefill + decode until every row stops
    out = sampler.append_and_continue(out.state, obs, obs_lengths, resume, ...)  # a tool turn

and ``sampler.row_sharding``: how the rows of a call lie over the devices (None: one device), so
each process reads and writes only the rows it holds. :class:`InGraphSampler` is the KV-cached
``lax.while_loop`` sampler of ``mojax.sampling`` on the run's mesh.

The model config's execution layouts are resolved when the sampler is built
(``mojax.models.layouts.resolve``), once.
"""

from __future__ import annotations

from mojax import sharding as sharding_lib
from mojax.models import layouts as layouts_lib
from mojax.models.qwen import DEFAULT_LOGICAL_AXIS_RULES, QwenModel
from mojax.sampling import api
from mojax.sampling.protocol import Sampler
from mojax.sampling.state import SamplingOutput
from mojax.sampling.static.session import StaticSession

__all__ = ["InGraphSampler", "Sampler", "build", "memory_report", "of_model", "round_sampler"]


class InGraphSampler:
    """The in-graph sampler (``mojax.sampling.generate`` / ``append_and_continue``) on a mesh.

    ``open`` returns a ``StaticSession``: a rollout in rounds of ``generate`` /
    ``append_and_continue`` on one KV cache (``mojax.sampling.static.session``).

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

    def open(self, requests, sampling) -> StaticSession:
        """The rows of ``requests`` as a session of rounds (``protocol.Sampler.open``)."""
        return StaticSession(self, requests, sampling)

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


#: The rows of a call lie over the mesh's batch axes (``InGraphSampler.row_sharding``), so the
#: rollout's B rows must divide them (``protocol.splits_rows``, the run spec's batch rule).
SPLITS_ROWS = True


def build(model_config, rollout, options, mesh, rules) -> InGraphSampler:
    """The static engine of a run (``protocol.SAMPLERS['static']``): the in-graph sampler on the
    run's mesh (``rollout``: the ``config.rollout`` section, of which it reads nothing; it has no
    config section of its own, so ``options`` is None). One dense KV cache, sized per call."""
    del rollout, options
    return InGraphSampler(model_config, mesh=mesh, rules=rules)


class _Rounds:
    """``protocol.round_sampler``: an object with the static engine's calls as a ``Sampler``."""

    def __init__(self, inner):
        self.inner = inner

    def update_weights(self, params) -> None:
        self.inner.update_weights(params)

    def open(self, requests, sampling) -> StaticSession:
        return StaticSession(self.inner, requests, sampling)


def round_sampler(inner) -> _Rounds:
    """``inner`` (``generate``, ``append_and_continue``, ``row_sharding``) as a ``Sampler`` whose
    sessions are the static engine's rounds over its calls (``protocol.round_sampler``)."""
    return _Rounds(inner)


def of_model(model: QwenModel, mesh=None, rules=None) -> InGraphSampler:
    """The in-graph sampler over ``model`` (``protocol.in_graph``; ``rules`` None: the default
    logical axis rules)."""
    return InGraphSampler.of(
        model, mesh=mesh, rules=DEFAULT_LOGICAL_AXIS_RULES if rules is None else rules
    )


def memory_report(
    spec, options, mesh, rules, state, model_config, prompt_len, out
) -> tuple[int, int]:
    """``(held, transient)`` bytes per device of the static engine in the dry run
    (``mojax.sampling.memory.static_report``; no ``options``)."""
    from mojax.sampling import memory

    del options
    return memory.static_report(spec, mesh, rules, state, model_config, prompt_len, out)
