"""Tool-efficiency reward of ParetoPO with its N_optimal tracker (host-side, checkpointable).

ParetoPO, arXiv:2606.16111, Eq. 4: ``r_tool = exp(-alpha |N_call - N_optimal|)`` with ``alpha = 0.7``.
``N_optimal(prompt)`` is the fewest tool calls among the *successful* trajectories seen so far for
that prompt (Sec. 2.3: the current group is included, and it is tracked across epochs). It is
non-increasing over training, so the reward is stationary once it settles.

No success seen yet for a prompt (methods.md switch ``no_success``):
  * ``"zero"`` (default): ``r_tool = 0`` for its samples;
  * ``"group_min"``: ``N_optimal`` = fewest calls in the current group (successful or not);
  * ``"assume_zero_calls"``: ``N_optimal = 0``.

Two readings of Eq. 4 that the paper leaves open (methods.md "Tool-efficiency reward"):

* who is paid (``TOOL_GATES``, :func:`gate_by_success`): ``"all"`` (mojax's original behaviour:
  every sample, a wrong answer included) or ``"success"`` (``N_optimal`` is defined over
  successful trajectories with ``N_call >= N_optimal``, and OTC pays its tool reward to correct
  answers: a failed sample gets 0);
* which ``N_optimal`` (``N_OPT_SOURCES``, :func:`fixed_tool_reward`): ``"tracked"`` (the table
  above) or ``"fixed"`` (the task's rule, e.g. ``CalculatorTask.optimal_calls``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

import numpy as np

__all__ = [
    "NOptimalTracker",
    "tool_efficiency_reward",
    "gate_by_success",
    "fixed_tool_reward",
    "NO_SUCCESS_MODES",
    "TOOL_GATES",
    "N_OPT_SOURCES",
]

NO_SUCCESS_MODES = ("zero", "group_min", "assume_zero_calls")
TOOL_GATES = ("all", "success")
N_OPT_SOURCES = ("tracked", "fixed")


def tool_efficiency_reward(n_calls, n_opt, *, alpha: float = 0.7) -> np.ndarray:
    """``exp(-alpha |n_calls - n_opt|)`` elementwise (ParetoPO Eq. 4), float32."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0; got {alpha}")
    diff = np.abs(np.asarray(n_calls, dtype=np.float64) - np.asarray(n_opt, dtype=np.float64))
    return np.exp(-alpha * diff).astype(np.float32)


def gate_by_success(r_tool, success, gate: str) -> np.ndarray:
    """``r_tool [P, G]`` paid as ``gate`` says: ``"all"`` as is, ``"success"`` 0 where the sample
    failed (``success`` bool ``[P, G]``), float32."""
    if gate not in TOOL_GATES:
        raise ValueError(f"gate must be one of {TOOL_GATES}; got {gate!r}")
    r = np.asarray(r_tool, np.float32)
    if gate == "all":
        return r
    ok = np.asarray(success, bool)
    if ok.shape != r.shape:
        raise ValueError(f"success must have shape {r.shape}; got {ok.shape}")
    return np.where(ok, r, np.float32(0.0)).astype(np.float32)


def fixed_tool_reward(n_calls, n_opt, *, alpha: float = 0.7) -> np.ndarray:
    """Eq. 4 against a fixed ``N_optimal`` per prompt: ``n_calls [P, G]``, ``n_opt [P]`` (the
    task's rule) -> float32 ``[P, G]``."""
    n_calls = np.asarray(n_calls)
    n_opt = np.asarray(n_opt, np.float64)
    if n_calls.ndim != 2 or n_opt.shape != n_calls.shape[:1]:
        raise ValueError(
            f"n_calls [P, G] and n_opt [P] expected; got {n_calls.shape}, {n_opt.shape}"
        )
    return tool_efficiency_reward(n_calls, n_opt[:, None], alpha=alpha)


def _check_batch(prompt_ids, n_calls, success=None):
    n_calls = np.asarray(n_calls)
    if n_calls.ndim != 2:
        raise ValueError(f"n_calls must have shape [P, G]; got {n_calls.shape}")
    if not np.issubdtype(n_calls.dtype, np.integer):
        if not np.all(np.isfinite(n_calls)) or np.any(n_calls != np.round(n_calls)):
            raise ValueError("n_calls must hold whole numbers of tool calls")
        n_calls = n_calls.astype(np.int64)
    if np.any(n_calls < 0):
        raise ValueError("n_calls must be >= 0")
    prompt_ids = list(prompt_ids)
    if len(prompt_ids) != n_calls.shape[0]:
        raise ValueError(
            f"prompt_ids must have P = {n_calls.shape[0]} entries; got {len(prompt_ids)}"
        )
    if success is not None:
        success = np.asarray(success, dtype=bool)
        if success.shape != n_calls.shape:
            raise ValueError(f"success must have shape {n_calls.shape}; got {success.shape}")
    return prompt_ids, n_calls, success


@dataclasses.dataclass(frozen=True)
class NOptimalTracker:
    """``N_optimal`` per prompt id (immutable; every update returns a new tracker).

    Attributes:
      table: mapping prompt id -> fewest tool calls of a successful trajectory seen so far.
    """

    table: dict = dataclasses.field(default_factory=dict)

    def get(self, prompt_id: Hashable) -> int | None:
        return self.table.get(prompt_id)

    def update(self, prompt_ids: Sequence[Hashable], n_calls, success) -> NOptimalTracker:
        """Folds in the successful trajectories of one batch.

        Args:
          prompt_ids: ``P`` hashable ids (str or int), one per group.
          n_calls: int ``[P, G]`` tool calls per trajectory.
          success: bool ``[P, G]`` task success per trajectory.
        """
        prompt_ids, n_calls, success = _check_batch(prompt_ids, n_calls, success)
        table = dict(self.table)
        for pid, calls, ok in zip(prompt_ids, n_calls, success):
            if ok.any():
                best = int(calls[ok].min())
                old = table.get(pid)
                table[pid] = best if old is None else min(old, best)
        return NOptimalTracker(table)

    def rewards(
        self,
        prompt_ids: Sequence[Hashable],
        n_calls,
        *,
        alpha: float = 0.7,
        no_success: str = "zero",
    ) -> np.ndarray:
        """``r_tool`` float32 ``[P, G]`` for a batch (call :meth:`update` with it first).

        Args:
          prompt_ids: ``P`` ids.
          n_calls: int ``[P, G]``.
          alpha: penalty severity of Eq. 4.
          no_success: behaviour for prompts without a recorded success (see module docstring).
        """
        if no_success not in NO_SUCCESS_MODES:
            raise ValueError(f"no_success must be one of {NO_SUCCESS_MODES}; got {no_success!r}")
        prompt_ids, n_calls, _ = _check_batch(prompt_ids, n_calls)
        out = np.zeros(n_calls.shape, dtype=np.float32)
        for i, (pid, calls) in enumerate(zip(prompt_ids, n_calls)):
            n_opt = self.table.get(pid)
            if n_opt is None:
                if no_success == "zero":
                    continue
                n_opt = int(calls.min()) if no_success == "group_min" else 0
            out[i] = tool_efficiency_reward(calls, n_opt, alpha=alpha)
        return out

    def step(
        self,
        prompt_ids: Sequence[Hashable],
        n_calls,
        success,
        *,
        alpha: float = 0.7,
        no_success: str = "zero",
    ) -> tuple[NOptimalTracker, np.ndarray]:
        """:meth:`update` with the batch, then :meth:`rewards` (the current group is included)."""
        new = self.update(prompt_ids, n_calls, success)
        return new, new.rewards(prompt_ids, n_calls, alpha=alpha, no_success=no_success)

    def to_state(self) -> dict:
        """Plain data for a checkpoint: ids and values as parallel lists (keeps int/str ids)."""
        ids = list(self.table)
        return {"prompt_ids": ids, "n_optimal": [int(self.table[k]) for k in ids]}

    @classmethod
    def from_state(cls, state: dict) -> NOptimalTracker:
        """Inverse of :meth:`to_state`."""
        if set(state) != {"prompt_ids", "n_optimal"}:
            raise ValueError(
                "NOptimalTracker state must have keys ['n_optimal', 'prompt_ids']; "
                f"got {sorted(state)}"
            )
        ids, vals = list(state["prompt_ids"]), list(state["n_optimal"])
        if len(ids) != len(vals):
            raise ValueError("NOptimalTracker state: prompt_ids and n_optimal differ in length")
        return cls({(tuple(k) if isinstance(k, list) else k): int(v) for k, v in zip(ids, vals)})
