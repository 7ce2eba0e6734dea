"""Tool stop strings as stop token ids: exact single-token stops and the multi-token fallback.

The sampler stops in-graph on token ids, while a task names its tool stop as a string (``</calc>``,
``</search>``, ``</code>``, ``` ```output ```, ``</tool_call>``). Two cases:

* **exact** — the string is one token of the tokenizer (the tags of mojax's self-built
  sentencepiece vocabularies, ``mojax.tasks.framework.vocab``; Qwen2.5's ``</tool_call>`` special token). The
  sampler stops on that id and a stop on it *is* a tool call. Other spellings of the same text in
  several pieces are not stops: the model is trained (SFT, ``tokenize_demo``) on the single piece.
* **fallback** — the string takes several tokens (``</code>`` with the Qwen tokenizer: ``</``,
  ``code``, ``>``). The sampler stops on every *candidate* id, a token that can end the string:
  one whose text (trailing whitespace aside) is a non-empty suffix of the string (``>``,
  ``code>``) or ends with the whole string. The host then confirms a stop by checking that the decoded
  text of the turn ends with the string; a false candidate (a ``>`` in ``a > b``, the ``>`` of an
  opening ``<code>``) resumes with an empty append and the rest of the turn's token budget.

Cost of a false candidate. A decode call runs until every row in it has stopped, so a row that
stops on a false candidate idles (as after a real call) until the slowest row of the call is done;
then it costs one more host round trip (fetch tokens / lengths, decode the turn's text) and one more
``append_and_continue`` dispatch, whose empty append takes ``false_stop_bucket`` cache slots (1 by
default; the write position is shared, so for every row) -- plus one compile of that bucket. The
fallback's cache default adds ``max_new_tokens`` slots of slack; rows that exhaust the cache end
with ``budget``. Candidate sets measured with the Qwen2 tokenizer: ``</code>``, ``</search>``,
``</calc>``, ``</tool_call>`` -> {``>``}; ``` ```output ``` -> {``t``, ``ut``, ``put``, ``output``}
(frequent pieces: prefer a single-token stop or ``</code>`` there), each plus its variants with
trailing whitespace (``>\n``, ``>\n\n``, ...). A stop string followed in the same token by other
text (``>(``) is not detected; the row then continues as if no call was made.

Shapes: V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

MODES = ("auto", "token", "text")


@dataclasses.dataclass(frozen=True)
class StopSpec:
    """How a rollout detects one tool stop string.

    Attributes:
      text: the stop string.
      token_ids: the ids the sampler stops on for it (one id when ``exact``, else candidates).
      exact: a stop on ``token_ids`` is a stop on ``text`` (no host-side confirmation needed).
    """

    text: str
    token_ids: tuple[int, ...]
    exact: bool

    def confirm(self, turn_text: str) -> bool:
        """Host-side check that a turn that stopped on a candidate id really ends a tool call
        (trailing whitespace of the last token, as in ``>\n``, allowed)."""
        return self.exact or turn_text.rstrip().endswith(self.text)


def _token_texts(tokenizer) -> list[str]:
    """Decoded text of every single id of ``tokenizer`` (index = id)."""
    n = int(tokenizer.vocab_size)
    hf = getattr(tokenizer, "hf", None)
    if hf is not None and hasattr(hf, "batch_decode"):  # one call into the Rust tokenizer
        return list(hf.batch_decode([[i] for i in range(n)], skip_special_tokens=False))
    return [tokenizer.decode([i]) for i in range(n)]


def candidate_end_ids(tokenizer, text: str, exclude: Sequence[int] = ()) -> tuple[int, ...]:
    """Ids whose text can end ``text``: non-empty suffixes of it, or texts ending with all of it,
    either optionally followed by whitespace (``>\n``: a model trained on ``</code>\n`` writes it).

    Args:
      tokenizer: the ``mojax.models.tokenizer`` interface (``vocab_size``, ``decode``).
      text: the stop string.
      exclude: ids never returned (e.g. the eos ids, which already stop the row).
    """
    skip = {int(i) for i in exclude}
    out = [
        i
        for i, piece in enumerate(_token_texts(tokenizer))
        if (core := piece.rstrip())
        and i not in skip
        and (text.endswith(core) or core.endswith(text))
    ]
    return tuple(out)


def tool_stop_spec(tokenizer, text: str, *, mode: str = "auto", exclude: Sequence[int] = ()):
    """The ``StopSpec`` of a tool stop string for ``tokenizer``.

    Args:
      tokenizer: the ``mojax.models.tokenizer`` interface.
      text: the stop string (``task.tool_stop``).
      mode: ``"auto"`` (exact when ``text`` encodes to one token that decodes back to it, else
        the fallback), ``"token"`` (require a single token; ValueError otherwise) or ``"text"``
        (always the candidate fallback, e.g. when a model also writes the tag in pieces).
      exclude: ids that are never candidates (the rollout's eos ids).

    Raises:
      ValueError: empty ``text``, unknown ``mode``, ``mode="token"`` for a multi-token string, or
        no token of the vocabulary can end ``text``.
    """
    if mode not in MODES:
        raise ValueError(f"stop_mode must be one of {MODES}, got {mode!r}")
    if not isinstance(text, str) or not text:
        raise ValueError(f"tool_stop must be a non-empty string, got {text!r}")
    ids = list(tokenizer.encode(text))
    single = len(ids) == 1 and tokenizer.decode(ids) == text
    if mode == "token" and not single:
        raise ValueError(
            f"stop_mode='token' but tool_stop {text!r} encodes to {len(ids)} tokens {ids}"
        )
    if single and mode != "text":
        return StopSpec(text, (int(ids[0]),), True)
    cands = candidate_end_ids(tokenizer, text, exclude)
    if not cands:
        raise ValueError(f"no token of the vocabulary can end tool_stop {text!r}")
    return StopSpec(text, cands, False)


def stop_ids_array(spec: StopSpec | None, stop_token_ids: Sequence[int]) -> np.ndarray:
    """int32 [number of stop ids]: the eos ids followed by the tool stop ids (no duplicates)."""
    ids = [int(i) for i in stop_token_ids]
    if spec is not None:
        ids += [i for i in spec.token_ids if i not in ids]
    return np.asarray(ids, np.int32)
