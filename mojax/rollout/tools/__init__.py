"""Host-side tools a multi-turn rollout calls: Python sandbox, calculator, retrieval, pool."""

from mojax.rollout.tools.python_sandbox import PythonSandbox, PythonSession
from mojax.rollout.tools.result import EXIT_REASONS, ToolResult

__all__ = ["EXIT_REASONS", "PythonSandbox", "PythonSession", "ToolResult"]
