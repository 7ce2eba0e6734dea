"""Tokenizers behind one small interface: HF checkpoints (transformers) and sentencepiece models.

Both wrappers expose ``encode(text) -> list[int]``, ``decode(ids) -> str``, ``eos_token_id``,
``pad_token_id``, ``bos_token_id`` (or None), ``vocab_size`` and
``apply_chat_template(messages, ...)``, so the rollout code does not care where a tokenizer came
from. Everything is local and offline.

Text that neither the framework nor the policy wrote (tool and retrieval output) is encoded with
``encode_plain``: it never yields one of ``control_ids``, the ids that structure a conversation
(an HF tokenizer's special tokens such as Qwen's ``<|im_start|>``, ``<|im_end|>`` and
``<|endoftext|>``, its other added tokens but whitespace runs, and a sentencepiece model's control
pieces and user-defined symbols: the chat markers and the task's tags of a vocabulary mojax built).
Such a token's text there is spelled with ordinary pieces and decodes back to the same text.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence

_SP_SUFFIX = ".model"
_HF_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")


class HFTokenizer:
    """A checkpoint's own tokenizer via ``transformers.AutoTokenizer`` (chat template included)."""

    def __init__(self, path: str):
        import transformers

        self.hf = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.path = path

    @property
    def eos_token_id(self) -> int | None:
        return self.hf.eos_token_id

    @property
    def pad_token_id(self) -> int | None:
        """The tokenizer's pad id, else its eos id (a pad id is needed to build batches)."""
        return self.hf.pad_token_id if self.hf.pad_token_id is not None else self.eos_token_id

    @property
    def bos_token_id(self) -> int | None:
        return self.hf.bos_token_id

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can emit (base vocab + added tokens)."""
        return len(self.hf)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @functools.cached_property
    def control_ids(self) -> frozenset[int]:
        """Ids that ``encode_plain`` never yields: every added token (the special ones such as
        ``<|im_end|>``, and the others, e.g. a converted vocabulary's tags) except the unknown
        token and tokens that are only whitespace."""
        return frozenset(
            i
            for i, t in self.hf.added_tokens_decoder.items()
            if (t.special or t.content.strip()) and i != self.hf.unk_token_id
        )

    @functools.cached_property
    def _plain_backend(self):
        """A copy of the fast tokenizer that never matches special tokens in text (``None`` for a
        slow tokenizer). A copy, not the shared one's ``split_special_tokens`` switch, which a
        concurrent ``encode`` on another thread would see."""
        backend = getattr(self.hf, "backend_tokenizer", None)
        if backend is None:
            return None
        from tokenizers import Tokenizer

        plain = Tokenizer.from_str(backend.to_str())
        plain.encode_special_tokens = True
        return plain

    def encode_plain(self, text: str) -> list[int]:
        """``text`` as plain text: no id of ``control_ids`` (module docstring). Special tokens are
        split the way ``split_special_tokens=True`` splits them; the other added tokens are cut
        one character in."""
        backend = self._plain_backend
        if backend is None:
            enc = lambda t: self.hf.encode(t, add_special_tokens=False, split_special_tokens=True)
        else:
            enc = lambda t: backend.encode(t, add_special_tokens=False).ids
        added = self.hf.added_tokens_decoder
        cut = [added[i].content for i in self.control_ids if not added[i].special]
        return _plain(enc, text, cut, self.control_ids)

    def apply_chat_template(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **kwargs,
    ):
        """``messages`` rendered by the checkpoint's chat template (text; ids if ``tokenize``)."""
        if not getattr(self.hf, "chat_template", None):
            raise ValueError(f"tokenizer at {self.path!r} has no chat_template")
        out = self.hf.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=tokenize, **kwargs
        )
        if tokenize and not isinstance(out, list):  # transformers 5 returns a BatchEncoding
            out = list(out["input_ids"])
        return out


def chatml(messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """``messages`` in the ChatML layout Qwen uses (``<|im_start|>role\\ncontent<|im_end|>\\n``),
    ending with an open assistant turn when ``add_generation_prompt``."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class SentencePieceTokenizer:
    """A sentencepiece ``.model`` (small self-trained vocabularies for toy tasks).

    It has no chat template of its own; ``apply_chat_template`` renders the ChatML layout Qwen uses
    (``<|im_start|>role\\ncontent<|im_end|>\\n``) as text, which the model sees as ordinary pieces.
    """

    def __init__(self, path: str):
        import sentencepiece

        self.sp = sentencepiece.SentencePieceProcessor(model_file=path)
        self.path = path

    @property
    def eos_token_id(self) -> int | None:
        i = self.sp.eos_id()
        return None if i < 0 else i

    @property
    def pad_token_id(self) -> int | None:
        i = self.sp.pad_id()
        return self.eos_token_id if i < 0 else i

    @property
    def bos_token_id(self) -> int | None:
        i = self.sp.bos_id()
        return None if i < 0 else i

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = list(self.sp.encode(text))
        if add_special_tokens and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            special = {self.eos_token_id, self.bos_token_id, self.sp.pad_id()}
            ids = [i for i in ids if i not in special]
        return self.sp.decode(ids)

    @functools.cached_property
    def _user_defined(self) -> dict[str, int]:
        """The user-defined pieces (matched in raw text, never split) by text."""
        from sentencepiece import sentencepiece_model_pb2

        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(self.sp.serialized_model_proto())
        return {p.piece: i for i, p in enumerate(proto.pieces) if p.type == _SP_USER_DEFINED}

    @functools.cached_property
    def control_ids(self) -> frozenset[int]:
        """Ids that ``encode_plain`` never yields: the control pieces (pad, eos, bos) and the
        user-defined symbols (a mojax vocabulary's chat markers and task tags)."""
        control = (i for i in range(self.vocab_size) if self.sp.is_control(i))
        return frozenset(control) | frozenset(self._user_defined.values())

    def encode_plain(self, text: str) -> list[int]:
        """``text`` as plain text: no id of ``control_ids`` (module docstring). Control pieces
        never match text in sentencepiece; each user-defined symbol is cut one character in."""
        return _plain(self.sp.encode, text, list(self._user_defined), self.control_ids)

    def apply_chat_template(
        self, messages: list[dict], *, add_generation_prompt: bool = True, tokenize: bool = False
    ):
        text = chatml(messages, add_generation_prompt)
        return self.encode(text) if tokenize else text


_SP_USER_DEFINED = 4  # sentencepiece ModelProto.SentencePiece.Type


def _cut_encode(encode: Callable[[str], Sequence[int]], text: str, strings) -> list[int]:
    """``encode`` of ``text`` in pieces, cut one character into every occurrence of each of
    ``strings`` (two characters or more), so that no piece holds a whole occurrence."""
    cuts = set()
    for s in strings:
        if len(s) > 1:
            i = text.find(s)
            while i >= 0:
                cuts.add(i + 1)
                i = text.find(s, i + 1)
    bounds = [0, *sorted(cuts), len(text)]
    return [int(t) for a, b in zip(bounds, bounds[1:]) for t in encode(text[a:b])]


def _plain(encode, text: str, cut, control: frozenset[int]) -> list[int]:
    """``_cut_encode``, checked: should a control id still come out (a tokenizer that matches a
    token only after normalising the text), the text is encoded one character at a time, and any
    control id left is dropped (never seen with a real tokenizer)."""
    ids = _cut_encode(encode, text, cut)
    if control.isdisjoint(ids):
        return ids
    ids = [int(t) for ch in text for t in encode(ch)]
    return [t for t in ids if t not in control]


def load_tokenizer(path: str | os.PathLike) -> HFTokenizer | SentencePieceTokenizer:
    """The tokenizer at ``path``: an HF checkpoint/tokenizer dir or a sentencepiece ``.model``.

    A directory holding only ``tokenizer.model`` (no HF tokenizer files) is read with sentencepiece.

    Raises:
      FileNotFoundError: ``path`` is neither (naming what was looked for).
    """
    path = os.fspath(path)
    if os.path.isfile(path) and path.endswith(_SP_SUFFIX):
        return SentencePieceTokenizer(path)
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, f)) for f in _HF_FILES):
            return HFTokenizer(path)
        sp = os.path.join(path, "tokenizer.model")
        if os.path.isfile(sp):
            return SentencePieceTokenizer(sp)
    raise FileNotFoundError(
        f"no tokenizer at {path!r}: expected a sentencepiece '*.model' file or a directory with "
        f"one of {_HF_FILES} (or tokenizer.model)"
    )
