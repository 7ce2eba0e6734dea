"""Loaders for the public data formats: JSONL, JSON (list of records) and parquet.

Each loader returns a list of plain ``dict`` records. Errors name the file and, for JSONL, the line,
so a bad row in a 100k-line file is found at once. A missing file inside the shared data folder
(``$MOJAX_SHARED_DIR``, default ``../shared`` beside the checkout) names that variable and its
value. Nothing is read at import time.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

__all__ = [
    "SHARED_DIR_ENV",
    "DataFileError",
    "missing_file_message",
    "read_json",
    "read_jsonl",
    "read_parquet",
    "read_records",
    "read_text",
    "shared_dir",
]

#: The environment variable naming the shared folder (``data/``, ``assets/``) outside the checkout.
SHARED_DIR_ENV = "MOJAX_SHARED_DIR"


def _default_shared_dir() -> str:
    repo = pathlib.Path(__file__).resolve().parents[3]  # mojax/tasks/framework/data.py
    return os.fspath(repo.parent / "shared")


def shared_dir() -> str:
    """The shared folder: ``$MOJAX_SHARED_DIR``, else ``shared/`` beside the checkout."""
    return os.environ.get(SHARED_DIR_ENV) or _default_shared_dir()


def missing_file_message(path: str | os.PathLike, what: str = "data file") -> str:
    """``"<what> not found: <path>"``, plus how ``$MOJAX_SHARED_DIR`` locates it when ``path`` lies
    in the shared folder (the one set now, or the default one)."""
    p = os.path.normpath(os.path.abspath(os.fspath(path)))
    msg = f"{what} not found: {p}"
    roots = {os.path.normpath(os.path.abspath(r)) for r in (shared_dir(), _default_shared_dir())}
    if not any(p == r or p.startswith(r + os.sep) for r in roots):
        return msg
    value = os.environ.get(SHARED_DIR_ENV)
    now = (
        f"${SHARED_DIR_ENV}={value}"
        if value
        else f"${SHARED_DIR_ENV} is not set, so the default {_default_shared_dir()} is used"
    )
    if not os.path.isdir(shared_dir()):
        now += ", and that folder does not exist"
    return (
        f"{msg}\n  It is in the shared data folder, which the environment variable {SHARED_DIR_ENV} "
        f"points to ({now}). Set {SHARED_DIR_ENV} to the folder that holds data/ and assets/ "
        "(e.g. export MOJAX_SHARED_DIR=/path/to/shared)."
    )


class DataFileError(ValueError):
    """A data file that cannot be read as its format: the message names the file and where."""


def read_text(path: str | os.PathLike) -> str:
    """The file as UTF-8 text (universal newlines, as ``open(path, encoding="utf-8")`` reads it).

    Raises:
      DataFileError: the bytes are not UTF-8, naming the file, the byte offset and its line.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        bad = data[e.start : e.start + 4]
        raise DataFileError(
            f"{os.fspath(path)}: not UTF-8 text: byte offset {e.start} (line {line}) starts "
            f"{bad!r} ({e.reason}); data files must be UTF-8 (convert it, e.g. "
            "iconv -f latin1 -t utf-8)"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """One JSON object per non-blank line."""
    out = []
    for lineno, line in enumerate(read_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{path}:{lineno}: invalid JSON ({e.msg})") from e
        if not isinstance(rec, dict):
            raise DataFileError(
                f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}"
            )
        out.append(rec)
    return out


def read_json(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A JSON file holding a list of objects (or ``{"data": [...]}``)."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from e
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataFileError(f"{path}: expected a JSON list of objects")
    return data


def read_parquet(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows of a parquet file as dicts (nested structs become nested dicts)."""
    import pyarrow as pa  # local import: no heavy import at module load
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, UnicodeDecodeError) as e:
        raise DataFileError(f"{os.fspath(path)}: not a readable parquet file ({e})") from e


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Dispatch on the extension: ``.jsonl``, ``.json``, ``.parquet``."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(missing_file_message(p))
    if p.endswith(".jsonl"):
        return read_jsonl(p)
    if p.endswith(".json"):
        return read_json(p)
    if p.endswith(".parquet"):
        return read_parquet(p)
    raise DataFileError(f"{p}: unknown data format (expected .jsonl, .json or .parquet)")
