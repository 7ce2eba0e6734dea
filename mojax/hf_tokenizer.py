"""The self-built sentencepiece vocabulary as a transformers tokenizer (``tokenizer.json``).

``mojax.tasks.framework.vocab.build_sentencepiece`` trains a BPE model with no normalisation, no dummy
prefix, whitespace escaped as ``▁``, no byte fallback, ``<pad>``/``<unk>``/``</s>`` at ids 0/1/2
and the chat markers and task tags as user-defined (never split) pieces. That model maps exactly
onto a ``tokenizers`` pipeline, which ``transformers.AutoTokenizer`` loads as a
``PreTrainedTokenizerFast`` (no sentencepiece needed at load time):

* normaliser: ``" " -> "▁"`` (nothing else: identity normalisation);
* added tokens: the user-defined pieces (matched in the raw text first, like sentencepiece's
  prefix matcher) and the three special ids;
* model: BPE over the whole text with the sentencepiece vocabulary; the merges are read off the
  vocabulary (a BPE piece of score rank ``r`` is the merge of two shorter pieces, applied in rank
  order, which is sentencepiece's highest-score-first order), unknown characters fused into one
  ``<unk>`` as sentencepiece does;
* decoder: ``"▁" -> " "``;
* the ChatML chat template of ``mojax.models.tokenizer.chatml``.

Ids, encodings and decodings equal sentencepiece's (tested on the task's prompts, transcripts and
random text), with two documented exceptions: the unknown id decodes to ``<unk>`` (sentencepiece:
`` ⁇ ``), and a special id (pad / eos) decodes to its text unless ``skip_special_tokens=True``
(sentencepiece: to nothing). Literal ``</s>`` text encodes as characters in both
(``split_special_tokens``).

Other sentencepiece models (unigram, byte fallback, NFKC normalisation, a dummy prefix) are refused
with a ``ValueError`` saying which setting differs: their exact conversion is not implemented.
"""

from __future__ import annotations

import json
import os
import shutil

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_NORMAL, _UNKNOWN, _CONTROL, _USER = 1, 2, 3, 4  # sentencepiece ModelProto.SentencePiece.Type


def _load_proto(model_file: str):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_file, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def check_convertible(proto, model_file: str = "tokenizer.model") -> None:
    """Raises ``ValueError`` naming the first setting this exact conversion does not handle."""
    t, n = proto.trainer_spec, proto.normalizer_spec
    checks = [
        (t.model_type == 2, f"model_type is {t.model_type} (only BPE = 2 is converted)"),
        (n.name == "identity", f"normaliser {n.name!r} (only 'identity' is converted)"),
        (not n.add_dummy_prefix, "add_dummy_prefix=True"),
        (not n.remove_extra_whitespaces, "remove_extra_whitespaces=True"),
        (n.escape_whitespaces, "escape_whitespaces=False"),
        (not t.byte_fallback, "byte_fallback=True"),
        (not n.precompiled_charsmap, "a precompiled normalisation charsmap"),
    ]
    for ok, what in checks:
        if not ok:
            raise ValueError(
                f"{model_file}: cannot convert to tokenizer.json exactly ({what}); "
                "load the exported tokenizer.model with sentencepiece instead"
            )


def _vocab_and_merges(proto):
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    normal = {p.piece for p in proto.pieces if p.type == _NORMAL}
    ranked = sorted(
        (i for i, p in enumerate(proto.pieces) if p.type == _NORMAL and len(p.piece) > 1),
        key=lambda i: (-proto.pieces[i].score, i),
    )
    merges = []
    for i in ranked:
        piece = proto.pieces[i].piece
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in normal and b in normal:
                merges.append((a, b))
    return vocab, merges


def build_tokenizer_json(model_file: str):
    """A ``tokenizers.Tokenizer`` equal to the sentencepiece model at ``model_file``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    proto = _load_proto(model_file)
    check_convertible(proto, model_file)
    vocab, merges = _vocab_and_merges(proto)
    unk = next(p.piece for p in proto.pieces if p.type == _UNKNOWN)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Replace("\u2581", " ")
    added = []
    for p in proto.pieces:  # in id order, so each keeps its sentencepiece id
        if p.type in (_CONTROL, _UNKNOWN, _USER):
            special = p.type != _USER
            added.append(AddedToken(p.piece, special=special, normalized=False))
    tok.add_tokens([a for a in added if not a.special])
    tok.add_special_tokens([a for a in added if a.special])
    return tok, proto


def _special(proto, piece_id: int) -> str | None:
    if piece_id < 0 or piece_id >= len(proto.pieces):
        return None
    return proto.pieces[piece_id].piece


def save_hf_tokenizer(model_file: str, out_dir: str, *, model_max_length: int) -> list[str]:
    """Writes ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and a copy
    of ``tokenizer.model`` to ``out_dir``; returns the file names.

    Raises:
      ValueError: the model uses a setting the exact conversion does not handle (module docstring).
    """
    tok, proto = build_tokenizer_json(model_file)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    t = proto.trainer_spec
    specials = {
        "bos_token": _special(proto, t.bos_id),
        "eos_token": _special(proto, t.eos_id),
        "unk_token": _special(proto, t.unk_id),
        "pad_token": _special(proto, t.pad_id),
    }
    specials = {k: v for k, v in specials.items() if v is not None}
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,
        "model_max_length": int(model_max_length),
        "chat_template": CHATML_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(specials, f, indent=2)
    shutil.copyfile(model_file, os.path.join(out_dir, "tokenizer.model"))
    return ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"]
