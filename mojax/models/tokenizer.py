"""Tokenizers behind one small interface: HF checkpoints (transformers) and sentencepiece models.

Both wrappers expose ``encode(text) -> list[int]``, ``decode(ids) -> str``, ``eos_token_id``,
``pad_token_id``, ``bos_token_id`` (or None), ``vocab_size`` and
``apply_chat_template(messages, ...)``, so the rollout code does not care where a tokenizer came
from. Everything is local and offline.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

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

    def apply_chat_template(
        self, messages: list[dict], *, add_generation_prompt: bool = True, tokenize: bool = False
    ):
        text = chatml(messages, add_generation_prompt)
        return self.encode(text) if tokenize else text


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
