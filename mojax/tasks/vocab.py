"""Small sentencepiece vocabularies that mojax trains itself (no download), e.g. for the default run.

:func:`build_sentencepiece` trains a BPE model on a task's own text (prompts rendered through the
ChatML layout and SFT transcripts) with settings that make tokenisation exact and segment-composable:
no normalisation, no dummy whitespace prefix and digits split into single pieces (so arithmetic is
written digit by digit), plus the task's tags and the chat markers as single, never-split pieces.
The result is a deterministic function of the texts and settings (single-threaded training).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence

CHAT_SYMBOLS = ("<|im_start|>", "<|im_end|>")


def build_sentencepiece(
    texts: Iterable[str],
    out_path: str | os.PathLike,
    *,
    vocab_size: int = 128,
    user_symbols: Sequence[str] = (),
) -> str:
    """Trains a sentencepiece BPE model on ``texts`` and writes it to ``out_path`` (a ``.model``).

    Ids: 0 = pad, 1 = unk, 2 = eos (``</s>``, the end-of-turn token the sampler stops on); no bos.
    ``vocab_size`` is an upper bound (``hard_vocab_limit=False``): a tiny corpus yields fewer pieces.

    Returns:
      ``out_path`` as a string, loadable with ``mojax.models.load_tokenizer``.
    """
    import sentencepiece as spm

    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("texts: need at least one non-empty text to train a tokenizer on")
    symbols = list(dict.fromkeys([*CHAT_SYMBOLS, *user_symbols]))
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type="bpe",
        vocab_size=int(vocab_size),
        hard_vocab_limit=False,
        character_coverage=1.0,
        split_digits=True,
        user_defined_symbols=symbols,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        byte_fallback=False,
        pad_id=0,
        unk_id=1,
        eos_id=2,
        bos_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    out_path = os.fspath(out_path)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(model.getvalue())
    os.replace(tmp, out_path)
    return out_path
