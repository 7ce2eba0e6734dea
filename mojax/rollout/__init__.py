"""Multi-turn rollouts with tools (issue 7). For now: the host-side tools (``mojax.rollout.tools``)."""

from mojax.rollout import tools

__all__ = ["tools"]
