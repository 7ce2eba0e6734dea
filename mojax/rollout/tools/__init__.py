"""Host-side tools a multi-turn rollout calls: Python sandbox, calculator, retrieval, pool."""

from mojax.rollout.tools.calculator import Calculator, CalculatorError
from mojax.rollout.tools.pool import ToolPool
from mojax.rollout.tools.python_sandbox import PythonSandbox, PythonSession
from mojax.rollout.tools.result import EXIT_REASONS, ToolResult
from mojax.rollout.tools.retrieval import (
    BM25Retriever,
    Passage,
    RetrievalClient,
    RetrievalError,
    format_passages,
)

__all__ = [
    "EXIT_REASONS",
    "BM25Retriever",
    "Calculator",
    "CalculatorError",
    "Passage",
    "PythonSandbox",
    "PythonSession",
    "RetrievalClient",
    "RetrievalError",
    "ToolPool",
    "ToolResult",
    "format_passages",
]
