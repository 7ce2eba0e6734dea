"""The policy's ``QwenConfig`` from a run spec: a checkpoint's ``config.json`` or a variant.

A self-built vocabulary (``tokenizer.path="build"``) gets ``vocab_size`` rounded up to a multiple
of 128 model rows, and ``real_vocab_size`` = its pieces: the padding rows are never sampled and take
no probability mass (``mojax.models.QwenConfig.real_vocab_size``).

``qwen_config(spec, tokenizer)`` is also called with ``tokenizer=None`` before anything is built (the
mesh checks of ``mojax.spec`` and dry runs): a self-built vocabulary then counts as the largest
one the build can make.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from mojax import models
from mojax.config import ConfigError

if TYPE_CHECKING:
    from mojax.spec import RunSpec

#: The files ``mojax.models.load_tokenizer`` reads a directory's tokenizer from (any one of them).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json", "tokenizer.model")

#: A self-built vocabulary's model rows are padded to a multiple of this (as every released model
#: pads its own; Qwen: 151,936): any tensor-parallel size that divides 128 divides it.
VOCAB_MULTIPLE = 128


def padded_vocab_size(pieces: int) -> int:
    """``pieces`` rounded up to a multiple of :data:`VOCAB_MULTIPLE`."""
    return -(-int(pieces) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def qwen_config(spec: RunSpec, tokenizer: Any = None) -> models.QwenConfig:
    """The policy's ``QwenConfig`` (``spec``: a ``RunSpec``): ``eval.checkpoint``'s config.json in
    ``mode=eval``, else ``model.checkpoint``'s, else the variant with ``model.overrides`` (the
    vocabulary sized to a self-built tokenizer), with the spec's execution dtypes, remat and LoRA
    adapters (``config.lora``)."""
    m = spec.model
    execution = dict(dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat)
    lora = getattr(spec, "lora", None)
    execution["lora"] = None if lora is None else lora.model_lora()
    if spec.mode == "eval" and spec.eval.checkpoint:
        return _eval_checkpoint_config(spec, tokenizer).replace(**execution)
    if m.checkpoint:
        cfg = checkpoint_config(m.checkpoint)
        if tokenizer is not None:
            _check_tokenizer_fits(spec, tokenizer, cfg)
        return cfg.replace(**execution)
    overrides = dict(m.overrides)
    build = spec.tokenizer.path == "build"
    if build and tokenizer is None:  # the largest vocabulary the build can make
        from mojax.tasks.framework.vocab import REQUIRED_CHARS

        pieces = int(spec.tokenizer.vocab_size) + len(REQUIRED_CHARS)
        overrides.setdefault("vocab_size", padded_vocab_size(pieces))
    if build and tokenizer is not None:
        overrides.setdefault("vocab_size", padded_vocab_size(int(tokenizer.vocab_size)))
        overrides.setdefault("real_vocab_size", int(tokenizer.vocab_size))
        overrides.setdefault("eos_token_id", int(tokenizer.eos_token_id))
        overrides.setdefault("bos_token_id", None)
        overrides.setdefault("pad_token_id", int(tokenizer.pad_token_id))
    try:
        cfg = models.get_variant(m.variant, **overrides)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"config.model.variant / config.model.overrides: {e}") from e
    if tokenizer is not None and tokenizer.vocab_size > cfg.vocab_size:
        raise ConfigError(
            f"config.model.overrides.vocab_size: {cfg.vocab_size} < the vocabulary of "
            f"config.tokenizer.path={spec.tokenizer.path!r} ({tokenizer.vocab_size} tokens); "
            "allowed: at least the tokenizer's"
        )
    return cfg.replace(**execution)


def checkpoint_problem(ckpt: str, key: str = "model.checkpoint") -> str:
    """``""`` when ``ckpt`` (the value of ``config.<key>``) names a directory with a
    ``config.json``, else the error line naming the key."""
    path = os.path.expanduser(ckpt)
    if os.path.isfile(os.path.join(path, "config.json")):
        return ""
    what = "no config.json in it" if os.path.isdir(path) else "no such directory"
    return (
        f"config.{key}={ckpt!r}: {what} (an HF checkpoint directory: config.json, "
        "*.safetensors and the tokenizer files)"
    )


def checkpoint_config(ckpt: str, key: str = "model.checkpoint") -> models.QwenConfig:
    """The architecture of the HF directory ``config.<key>`` (its ``config.json``); a missing,
    unparsable or unsupported ``config.json`` is a ``ConfigError`` naming the key and the file."""
    problem = checkpoint_problem(ckpt, key)
    if problem:
        raise ConfigError(problem)
    path = os.path.join(os.path.expanduser(ckpt), "config.json")
    try:
        return models.QwenConfig.from_hf(path)
    except json.JSONDecodeError as e:
        raise ConfigError(f"config.{key}={ckpt!r}: {path}: not valid JSON ({e})") from e
    except KeyError as e:
        raise ConfigError(f"config.{key}={ckpt!r}: {path}: lacks the key {e}") from e
    except AttributeError as e:
        raise ConfigError(f"config.{key}={ckpt!r}: {path}: not a JSON object ({e})") from e
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"config.{key}={ckpt!r}: {path}: {e}") from e


def check_checkpoint_files(ckpt: str, key: str = "model.checkpoint") -> models.QwenConfig:
    """The architecture of the HF directory ``config.<key>``, checked against its weight files;
    only ``config.json`` and the safetensors headers are read (every process reads them; nothing
    is written). A ``ConfigError`` naming the key, the file and what is wrong: a missing,
    unparsable or unsupported ``config.json``; no ``model.safetensors`` (nor an index), a file the
    index lists that is missing, a truncated or corrupt safetensors file; a ``vocab_size`` that is
    not the embedding's row count; any tensor missing, unexpected or mis-shaped for the config."""
    cfg = checkpoint_config(ckpt, key)
    path = os.path.expanduser(ckpt)
    try:
        files = models.hf.open_checkpoint(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"config.{key}={ckpt!r}: {e}") from e
    embed = "model.embed_tokens.weight"
    rows = files[embed].shape(embed)[0] if embed in files else cfg.vocab_size
    if rows != cfg.vocab_size:
        raise ConfigError(
            f"config.{key}={ckpt!r}: {path}/config.json has vocab_size {cfg.vocab_size}, but "
            f"{embed} in {files[embed].path} has {rows} rows (the embedding of {rows} tokens): "
            "the config.json and the weights are of different models"
        )
    try:
        models.hf.check_checkpoint(cfg, files)
    except ValueError as e:
        raise ConfigError(f"config.{key}={ckpt!r}: {e}") from e
    return cfg


def checkpoint_errors(spec: RunSpec) -> list[str]:
    """The problems of ``config.model.checkpoint`` (``check_checkpoint_files``) and, when the run
    reads the checkpoint's tokenizer (``tokenizer.path=''``), a directory without tokenizer
    files; ``[]`` when it is a readable checkpoint. Every process checks on its own (the same
    files, read only)."""
    ckpt = spec.model.checkpoint
    try:
        check_checkpoint_files(ckpt)
    except ConfigError as e:
        return e.errors
    path = os.path.expanduser(ckpt)
    if spec.tokenizer.path == "" and not any(
        os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES
    ):
        return [
            f"config.tokenizer.path='' reads the tokenizer of config.model.checkpoint={ckpt!r}, "
            f"but {path} holds no tokenizer file (one of {list(TOKENIZER_FILES)}); copy the "
            "model's tokenizer files there or set --config.tokenizer.path to its tokenizer"
        ]
    return []


def _check_tokenizer_fits(spec: RunSpec, tokenizer: Any, cfg: models.QwenConfig) -> None:
    """Refuses a tokenizer that can emit ids the checkpoint's embedding has no row for (its largest
    id, eos or pad id ``>= vocab_size``): they would reach the model at the first rollout."""
    bad = _ids_out_of_range(tokenizer, cfg.vocab_size)
    if bad:
        ckpt, own = spec.model.checkpoint, spec.tokenizer.path == ""
        fix = (
            f"the tokenizer files in {ckpt} are not the ones its weights were trained with: "
            "replace them, or set --config.tokenizer.path to the right tokenizer"
            if own
            else "use the checkpoint's own tokenizer (--config.tokenizer.path='') or the one it "
            "was trained with"
        )
        raise ConfigError(
            f"config.tokenizer.path={spec.tokenizer.path!r}: the tokenizer "
            f"({tokenizer.vocab_size} tokens) does not fit config.model.checkpoint={ckpt!r}, "
            f"whose config.json has vocab_size {cfg.vocab_size}: {bad} out of range [0, "
            f"{cfg.vocab_size}); {fix}"
        )


def _ids_out_of_range(tokenizer: Any, vocab_size: int) -> dict[str, int]:
    """The tokenizer's largest id, eos and pad ids that are ``>= vocab_size``."""
    ids = {
        "largest token id": tokenizer.vocab_size - 1,
        "eos_token_id": getattr(tokenizer, "eos_token_id", None),
        "pad_token_id": getattr(tokenizer, "pad_token_id", None),
    }
    return {k: int(v) for k, v in ids.items() if v is not None and int(v) >= vocab_size}


def _eval_checkpoint_config(spec: RunSpec, tokenizer: Any) -> models.QwenConfig:
    """The architecture of the HF checkpoint ``eval.checkpoint`` (its ``config.json``), checked
    against the run's tokenizer."""
    ckpt = spec.eval.checkpoint
    path = os.path.expanduser(ckpt)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            f"config.eval.checkpoint={ckpt!r}: no config.json in {path} (it must "
            "be an HF checkpoint directory, e.g. written by python -m mojax.export)"
        )
    try:
        cfg = models.QwenConfig.from_hf(path)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"config.eval.checkpoint: {path}/config.json: {e}") from e
    if tokenizer is not None:
        bad = _ids_out_of_range(tokenizer, cfg.vocab_size)
        if bad:
            raise ValueError(
                f"config.eval.checkpoint={ckpt!r}: the run's tokenizer "
                f"(config.tokenizer.path={spec.tokenizer.path!r}, {tokenizer.vocab_size} tokens) "
                f"does not fit the checkpoint's vocab_size {cfg.vocab_size} (config.json): {bad} "
                f"out of range. Evaluate with the tokenizer the checkpoint was trained with: "
                f"--config.tokenizer.path={path} when that directory holds its tokenizer files, "
                "or the training run's config."
            )
    return cfg
