"""The one result type every host-side tool returns (Python sandbox, calculator, retrieval, pool).

A rollout driver needs the same four facts from any tool call: what to show the model, whether the
call failed and why (short, machine-readable), whether it ran out of time, and how it ended. Keeping
them in one frozen dataclass lets the worker pool treat all tools alike and lets the driver count
failures by ``exit_reason`` without parsing text.
"""

import dataclasses

# Every value ``ToolResult.exit_reason`` can take.
EXIT_REASONS = (
    "ok",  # ran to completion
    "error",  # the tool input failed (exception in the code, bad expression, HTTP error, ...)
    "timeout",  # wall-clock limit hit; the whole process group / sandbox was killed
    "cpu_limit",  # RLIMIT_CPU hit (SIGXCPU / SIGKILL from the kernel)
    "memory_limit",  # RLIMIT_AS hit (MemoryError in the sandbox)
    "output_limit",  # more output than ``max_output_bytes``; the sandbox was killed
    "killed",  # died from a signal we did not send (e.g. the kernel's OOM killer)
    "sandbox_error",  # the sandbox itself could not start (bwrap failure, bad interpreter path)
    "exception",  # the tool's host-side code raised (a bug); the pool caught it
)


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """Outcome of one tool call.

    Attributes:
      output: text for the model's observation (stdout then stderr for Python, the formatted value
        for the calculator, the formatted passages for retrieval). Already truncated to the tool's
        limit.
      error: ``None`` on success, else a one-line reason, e.g. ``"ZeroDivisionError: division by
        zero"`` (the last line of a traceback), ``"timeout: exceeded 5 s wall clock"``, ``"memory
        limit: exceeded 256 MB"``.
      timed_out: the call hit a wall-clock or CPU-time limit.
      exit_reason: one of ``EXIT_REASONS``.
      truncated: ``output`` was cut to the tool's output limit.
      duration_s: host wall-clock seconds the call took.
    """

    output: str
    error: str | None = None
    timed_out: bool = False
    exit_reason: str = "ok"
    truncated: bool = False
    duration_s: float = 0.0

    def __post_init__(self):
        if self.exit_reason not in EXIT_REASONS:
            raise ValueError(f"exit_reason={self.exit_reason!r} is not one of {EXIT_REASONS}")

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def observation(self) -> str:
        """``output`` plus the error line when the output does not already end with it.

        What a driver appends inside ``<output>...</output>``: the model sees its printed text and,
        for a failed call, why it failed (a timeout leaves no traceback, so the reason is added
        here).
        """
        if self.error is None or self.output.rstrip().endswith(self.error):
            return self.output
        sep = "" if not self.output or self.output.endswith("\n") else "\n"
        return f"{self.output}{sep}{self.error}"
