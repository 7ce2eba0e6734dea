"""Multi-turn rollouts with tools (issue 7); for now only the host-side ``tools``."""

from mojax.rollout import tools

__all__ = ["tools"]
