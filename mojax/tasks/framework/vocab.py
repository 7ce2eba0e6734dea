"""Small sentencepiece vocabularies that mojax trains itself (no download), e.g. for the default run.

:func:`build_sentencepiece` trains a BPE model on a task's own text (prompts rendered through the
ChatML layout and SFT transcripts) with settings that make tokenisation exact and segment-composable:
no normalisation, no dummy whitespace prefix and digits split into single pieces (so arithmetic is
written digit by digit), plus the task's tags and the chat markers as single, never-split pieces.
The result is a deterministic function of the texts and settings (single-threaded training).

Every vocabulary also holds each printable ASCII character (``REQUIRED_CHARS``), whether or not the
corpus uses it, so text the model is *shown* but never trained to write still encodes exactly:
tool observations such as the calculator's ``Error: division by zero``, or a name the model wrote
echoed back in ``Error: unknown name 'x'``. ``REQUIRED_CHARS`` also holds ``⁇``, the text
sentencepiece decodes the unknown id to, so an error that quotes a decoded unknown piece
(``unsupported character '⁇' (U+2047)``) encodes too.
"""

from __future__ import annotations

import io
import os
import string
from collections.abc import Iterable, Sequence

CHAT_SYMBOLS = ("<|im_start|>", "<|im_end|>")
UNK_SURFACE = "\u2047"  # "⁇": how sentencepiece decodes the unknown id
REQUIRED_CHARS = "".join(c for c in string.printable if c not in "\x0b\x0c") + UNK_SURFACE
_SPECIAL = 3  # <pad>, <unk>, </s>


def build_sentencepiece(
    texts: Iterable[str],
    out_path: str | os.PathLike,
    *,
    vocab_size: int = 128,
    user_symbols: Sequence[str] = (),
    required_chars: str = REQUIRED_CHARS,
) -> str:
    """Trains a sentencepiece BPE model on ``texts`` and writes it to ``out_path`` (a ``.model``).

    Ids: 0 = pad, 1 = unk, 2 = eos (``</s>``, the end-of-turn token the sampler stops on); no bos.
    ``vocab_size`` bounds the pieces learned from the corpus (``hard_vocab_limit=False``: a tiny
    corpus yields fewer): the 3 special ids, ``user_symbols``, the corpus's characters and the
    merges. The characters of ``required_chars`` the corpus lacks come on top, as single pieces
    that take no merge away (the corpus tokenises exactly as without them), so the vocabulary has
    at most ``vocab_size + len(required_chars)`` pieces.

    Raises:
      ValueError: no non-empty text, or ``vocab_size`` below the special ids + symbols + the
        corpus's characters.

    Returns:
      ``out_path`` as a string, loadable with ``mojax.models.load_tokenizer``.
    """
    import sentencepiece as spm

    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("texts: need at least one non-empty text to train a tokenizer on")
    symbols = list(dict.fromkeys([*CHAT_SYMBOLS, *user_symbols]))
    corpus_chars = set()
    for text in texts:
        for sym in symbols:  # a symbol is one piece: its characters are not corpus characters
            text = text.replace(sym, "")
        corpus_chars.update(text.replace(" ", "\u2581"))  # a space is written as "▁"
    extra = set(required_chars.replace(" ", "\u2581")) - corpus_chars
    needed = _SPECIAL + len(symbols) + len(corpus_chars)
    if int(vocab_size) < needed:
        raise ValueError(
            f"vocab_size={vocab_size} is below the {needed} pieces this corpus needs "
            f"({_SPECIAL} special ids, {len(symbols)} symbols, {len(corpus_chars)} characters)"
        )
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type="bpe",
        vocab_size=int(vocab_size) + len(extra),
        hard_vocab_limit=False,
        character_coverage=1.0,
        split_digits=True,
        user_defined_symbols=symbols,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        byte_fallback=False,
        required_chars="".join(sorted(extra)),
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
