"""Host-side tools a multi-turn rollout calls: Python sandbox, calculator, retrieval, pool.

Every tool has ``run(text) -> ToolResult`` (``output``, ``error``, ``timed_out``, ``exit_reason``,
``truncated``, ``duration_s``; ``observation`` = output plus the error line) and never raises on bad
model input, so a rollout driver can treat them alike::

    sandbox = PythonSandbox(timeout_s=5, memory_mb=512)      # bwrap; SandboxUnavailableError if none
    session = sandbox.session()                              # per trajectory: state by replay
    calc = Calculator()
    search = BM25Retriever(corpus, topk=3)                   # or RetrievalClient(url, topk=3)
    with ToolPool(max_workers=8, timeout_s=30) as pool:
        results = pool.run([(session.run, (code,)), (calc.run, ("2**10",)), (search.run, (q,))])
"""

from mojax.rollout.tools._bwrap import SandboxUnavailableError
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
    "SandboxUnavailableError",
    "ToolPool",
    "ToolResult",
    "format_passages",
]
