"""Loaders for the public data formats: JSONL, JSON (list of records) and parquet.

Each loader returns a list of plain ``dict`` records. Errors name the file and, for JSONL, the line,
so a bad row in a 100k-line file is found at once. Nothing is read at import time.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["read_jsonl", "read_json", "read_parquet", "read_records"]


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """One JSON object per non-blank line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg})") from e
            if not isinstance(rec, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}"
                )
            out.append(rec)
    return out


def read_json(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A JSON file holding a list of objects (or ``{"data": [...]}``)."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from e
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: expected a JSON list of objects")
    return data


def read_parquet(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows of a parquet file as dicts (nested structs become nested dicts)."""
    import pyarrow.parquet as pq  # local import: no heavy import at module load

    return pq.read_table(path).to_pylist()


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Dispatch on the extension: ``.jsonl``, ``.json``, ``.parquet``."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"data file not found: {p}")
    if p.endswith(".jsonl"):
        return read_jsonl(p)
    if p.endswith(".json"):
        return read_json(p)
    if p.endswith(".parquet"):
        return read_parquet(p)
    raise ValueError(f"{p}: unknown data format (expected .jsonl, .json or .parquet)")
