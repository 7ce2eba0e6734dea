"""Per-row host state of a rollout (``Row``, ``Turn``) and the first phase after each step.

After every step of the sampler's session the host reads its rows (``DecodeView``) and ``settle``
sorts each row whose decode ended into one of:

* **finished** -- an eos id (``stop``), a used-up turn or response buffer (``length``), a full
  cache (``budget``); the row's last ``Turn`` is closed with that reason;
* **tool** -- it stopped on a confirmed tool stop: its call is parsed next (``mojax.rollout.calls``);
* **false stop** -- a multi-token stop candidate the host rejected: it is requeued and resumes
  the same turn with what is left of its budget.

(A row paused at a decode segment's end never reaches the host: its engine resumes it,
``mojax.sampling.static.session``.)

Shape words as in ``mojax.rollout.spec`` (B rows, response slots, cache slots).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from mojax.rollout.observations import decode_ids
from mojax.rollout.spec import RolloutSpec
from mojax.sampling.protocol import LENGTH, STOP

# what a row that is not finished waits for between decode calls
WAIT_TOOL, WAIT_FALSE_STOP = "tool", "false_stop"


@dataclasses.dataclass(frozen=True)
class Turn:
    """One model turn of one row and the tool call that ended it (if any).

    Attributes:
      index: 0-based turn of the row.
      start, end: response slots ``[start, end)`` of the policy tokens of the turn.
      ended_by: ``"tool"`` (a confirmed tool stop), ``"stop"``, ``"length"``, ``"budget"``,
        ``"max_turns"``, ``"max_tool_calls"``.
      call: the parsed tool input (None when there was no call or it was malformed).
      malformed: the turn stopped on the tool stop but ``parse_tool_call`` found no call.
      executed: the tool ran (or the malformed-call error was shown) and the observation was
        appended.
      observation: the observation appended after the turn, decoded from its tokens (what the
        model saw; "" if none).
      tool_output: the tool's full text (``ToolResult.observation``) before formatting and
        truncation.
      obs_tokens: its number of tokens.
      obs_truncated: the observation was cut to ``max_obs_tokens``.
      exit_reason, error, timed_out, output_truncated, duration_s: from the ``ToolResult``.
      false_stops: candidate stops in this turn that the host rejected (multi-token stops only).
    """

    index: int
    start: int
    end: int
    ended_by: str
    call: str | None = None
    malformed: bool = False
    executed: bool = False
    observation: str = ""
    tool_output: str = ""
    obs_tokens: int = 0
    obs_truncated: bool = False
    exit_reason: str | None = None
    error: str | None = None
    timed_out: bool = False
    output_truncated: bool = False
    duration_s: float = 0.0
    false_stops: int = 0


@dataclasses.dataclass
class Row:
    """Host state of one row between decode calls.

    Attributes:
      turns: the closed ``Turn`` records, in order.
      finish: the row's ``FINISH_REASONS`` value once it has ended (None while it is live).
      waiting: ``WAIT_TOOL`` / ``WAIT_FALSE_STOP`` while it waits for the round's append, else
        None (decoding, or finished).
      length: used response slots when the host last saw the row.
      n_calls: calls answered with an observation (``N_call`` of ParetoPO's ``r_tool``,
        arXiv:2606.16111).
      turn_start: response slot where the current turn began.
      turn_used: policy tokens of the current turn so far.
      call_start: response length when the row's latest decode call began.
      call_budget: the token budget the row got in that call.
      false_stops: rejected stop candidates in the current turn.
      text: the decoded text of the turn that ended on a tool stop (while waiting on the tool).
      call: its parsed tool input (None: malformed).
      local: the row is held by this process (``mojax.distributed.RowLayout.local``); the host
        work of other rows is done by the processes holding them.
    """

    turns: list[Turn] = dataclasses.field(default_factory=list)
    finish: str | None = None
    waiting: str | None = None
    length: int = 0
    n_calls: int = 0
    turn_start: int = 0
    turn_used: int = 0
    call_start: int = 0
    call_budget: int = 0
    false_stops: int = 0
    text: str = ""
    call: str | None = None
    local: bool = True

    @property
    def decoding(self) -> bool:
        return self.local and self.finish is None and self.waiting is None

    def close_turn(self, end: int, ended_by: str, **fields) -> None:
        """Records the current turn ``[turn_start, end)``."""
        self.turns.append(
            Turn(
                index=len(self.turns),
                start=self.turn_start,
                end=int(end),
                ended_by=ended_by,
                false_stops=self.false_stops,
                **fields,
            )
        )

    def end(self, reason: str, **fields) -> None:
        """Finishes the row with ``reason`` (a ``FINISH_REASONS`` value), closing its turn."""
        self.finish, self.waiting = reason, None
        self.close_turn(self.length, reason, **fields)

    def start_call(self, start: int, budget: int) -> None:
        """The row is resumed by a decode call at response slot ``start`` with ``budget``."""
        self.waiting, self.call_start, self.call_budget = None, int(start), int(budget)


@dataclasses.dataclass(frozen=True)
class DecodeView:
    """Host copies of a session's rows (``protocol.Session.view``) this process works on.

    Attributes:
      tokens: int32 [B, max_response_len] response tokens.
      lengths: int64 [B] used response slots.
      reasons: int32 [B] the sampler's finish codes (``STOP``, ``LENGTH``).

    Only the rows this process works on (``RowLayout.local``) are filled in; the others are 0.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    reasons: np.ndarray

    @classmethod
    def of(cls, progress) -> DecodeView:
        """The view of a ``protocol.Progress``."""
        lengths = np.asarray(progress.lengths).astype(np.int64)
        return cls(progress.tokens, lengths, progress.finish_reason)


def settle(
    spec: RolloutSpec,
    rows: list[Row],
    view: DecodeView,
    tokenizer,
    counters: collections.Counter,
    only=None,
) -> list[int]:
    """Sorts every row that was decoding (see the module docstring); ends the finished ones.
    ``only``: the rows to sort (row order; default every decoding row): the rows whose decode a
    session's step ended (``mojax.rollout.continuous_agent``).

    Returns:
      The tool rows, in row order (``waiting == WAIT_TOOL``, the turn's text in ``Row.text``);
      false stops have ``waiting == WAIT_FALSE_STOP``.
    """
    tool_rows = []
    for i in range(len(rows)) if only is None else only:
        row = rows[i]
        if not row.decoding:
            continue
        n = int(view.lengths[i])
        row.turn_used += n - row.call_start
        row.length = n
        kind = _classify(spec, row, view, i, tokenizer)
        if kind == WAIT_TOOL:
            tool_rows.append(i)
        elif kind == "false_stop":
            counters["false_stops"] += 1
            row.false_stops += 1
            if row.turn_used < spec.max_new_tokens and n + 1 <= spec.max_response_len:
                row.waiting = WAIT_FALSE_STOP
            else:
                row.end("length")  # the turn's tokens or the response buffer are used up
        else:
            row.end(kind)
    return tool_rows


def _classify(spec: RolloutSpec, row: Row, view: DecodeView, i: int, tokenizer) -> str:
    """What the decode that just ended did to row ``i``: a finish reason, ``WAIT_TOOL`` (sets
    ``row.waiting`` and ``row.text``) or ``"false_stop"``."""
    n, reason = row.length, view.reasons[i]
    last = int(view.tokens[i, n - 1]) if n else -1
    if reason == STOP and last in spec.tool_ids and last not in spec.eos_ids:
        text = decode_ids(tokenizer, view.tokens[i, row.turn_start : n])
        if not spec.stop.confirm(text):
            return "false_stop"
        row.waiting, row.text = WAIT_TOOL, text
        return WAIT_TOOL
    if reason == STOP:
        return "stop"
    if reason == LENGTH:
        if n >= spec.max_response_len or row.turn_used >= spec.max_new_tokens:
            return "length"
        return "budget"  # the cache ran out
    return "budget"  # not reachable: the sampler returns with every row done
