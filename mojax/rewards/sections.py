"""The config sections of the reward sources (``mojax.rewards``): ``config.tool_reward``,
``config.dapo`` (DAPO's overlong shaping and dynamic sampling) and ``config.judge``. Frozen dataclasses of
``mojax.config.option`` fields, each checking its own fields in ``__post_init__`` (every error names
its ``config.`` key and the allowed values); the run spec (``mojax.spec.RunSpec``) holds them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from mojax import pareto
from mojax.config import option, spec_checker

JUDGE_KINDS = ("overlap", "http", "model")


@dataclasses.dataclass(frozen=True)
class ToolRewardSpec:
    """``config.tool_reward``: the tool-efficiency objective ``r_tool`` (``mojax.rewards.ToolEfficiency``)."""

    SECTION: ClassVar[str] = "tool_reward"
    alpha: float = option(0.7, help="r_tool = exp(-alpha |N_call - N_opt|) (ParetoPO Eq. 4)")
    no_success: str = option("zero", help='r_tool without a success: "zero" | "group_min" | ...')
    gate: str = option(
        "success",
        help='who is paid r_tool: "success"-ful samples only (a failure gets 0; ParetoPO Eq. 4, OTC) '
        '| "all" samples',
    )
    n_opt: str = option(
        "tracked",
        help='r_tool\'s N_opt: "tracked" (fewest calls of a success so far) | "fixed" (the '
        "task's rule, e.g. the calculator's optimal_calls)",
    )

    def __post_init__(self):
        c = spec_checker("tool_reward", self)
        if self.no_success not in pareto.NO_SUCCESS_MODES:
            c.fail(
                "tool_reward.no_success",
                f"{self.no_success!r} is not allowed; allowed values: {list(pareto.NO_SUCCESS_MODES)}",
            )
        c.choice("tool_reward.gate", pareto.TOOL_GATES)
        c.choice("tool_reward.n_opt", pareto.N_OPT_SOURCES)
        c.in_range("tool_reward.alpha", 0)
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class DapoSpec:
    """``config.dapo``: DAPO's reward shaping (the soft overlong penalty, Eq. 13) and its dynamic
    sampling (groups without signal dropped and refilled, ``mojax.rewards.groups_with_signal``)."""

    SECTION: ClassVar[str] = "dapo"
    dynamic_sampling: bool = option(
        False, help="DAPO: drop groups with no variance in any objective, refill"
    )
    max_refill_rounds: int = option(2, help="DAPO: refill rounds per step at most")
    overlong_buffer: int = option(
        0, help="DAPO: tokens before the max length where the soft penalty ramps up (0 = off)"
    )
    overlong_penalty: float = option(1.0, help="DAPO: penalty at the max length")
    max_response_len: int = 0  # rollout.max_response_len (the overlong ramp ends there)

    def __post_init__(self):
        c = spec_checker("dapo", self)
        c.in_range("dapo.max_refill_rounds", 0)
        if not 0 <= self.overlong_buffer <= self.max_response_len:
            c.fail(
                "dapo.overlong_buffer",
                f"{self.overlong_buffer} must be in [0, rollout.max_response_len]",
            )
        c.raise_if_any()


@dataclasses.dataclass(frozen=True)
class JudgeSpec:
    """``config.judge``: AWPO's reasoning-reward judge."""

    SECTION: ClassVar[str] = "judge"
    kind: str = option(
        "overlap", help='"overlap" (offline) | "http" (OpenAI-compatible) | "model" (local)'
    )
    url: str = option("", help="the http judge's endpoint")
    model: str = option("", help="the http judge's model name, or the local judge's HF directory")
    timeout_s: float = option(30.0, help="deadline of one judge call")
    workers: int = option(8, help="judge calls in flight at once, per process")
    max_failures_in_a_row: int = option(
        8, help="after this many failed calls in a row, skip the batch's other rows (0 = never)"
    )
    batch_deadline_s: float = option(
        0.0, help="one deadline for each batch of judge calls, per process (0 = none)"
    )

    def __post_init__(self):
        c = spec_checker("judge", self)
        c.choice("judge.kind", JUDGE_KINDS)
        if self.kind == "http" and not self.url:
            c.fail("judge.url", "judge.kind='http' needs the server's base URL (http://host:port)")
        if self.kind == "model" and not self.model:
            c.fail("judge.model", "judge.kind='model' needs the judge's HF checkpoint directory")
        c.in_range("judge.timeout_s", 0.0, low_inclusive=False)
        c.in_range("judge.workers", 1)
        c.in_range("judge.max_failures_in_a_row", 0)
        c.in_range("judge.batch_deadline_s", 0.0, finite=True)
        c.raise_if_any()

    def checkpoint_paths(self) -> dict[str, str]:
        """The model checkpoint this section names, by config key (``mojax.spec.input_files``)."""
        return {"judge.model": self.model} if self.kind == "model" else {}

    def budget(self):
        """The ``mojax.tasks.framework.judge.JudgeBudget`` of one batch of judge calls."""
        from mojax.tasks.framework.judge import JudgeBudget

        return JudgeBudget(
            workers=int(self.workers),
            deadline_s=float(self.batch_deadline_s) or None,
            max_failures_in_a_row=int(self.max_failures_in_a_row),
        )
