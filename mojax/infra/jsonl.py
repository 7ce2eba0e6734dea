"""The workdir's small record files: durable writes, and reading the JSON-lines files a run writes
(``metrics.jsonl``, ``transcripts.jsonl``).

A leaf module: ``mojax.infra.logbook`` (writers), ``mojax.infra.plots`` (readers), ``mojax.infra.workdir`` and
``mojax.infra.workdir_lock`` use it.

* **Durable writes** (:func:`write_durable`): a record (``config.json``, ``inputs.json``, ``done``,
  the lock record's directory entry, a truncated ``metrics.jsonl``) is written to a temporary file,
  fsynced, renamed over the old one, and the directory is fsynced, so a crash or power cut leaves
  either the old or the new file, never an empty or cut one. :func:`append_line` appends one line
  and fsyncs the file (``metrics.jsonl``: a line once written survives a power cut).
* **Reading** (:func:`read_jsonl`): a line that is not JSON (cut by a crash) or not UTF-8 (a
  damaged byte) is skipped; a skipped non-UTF-8 line is logged as a warning naming the file and
  the line number. Only process 0 writes these files.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any

METRICS_FILE = "metrics.jsonl"
_log = logging.getLogger(__name__)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync the directory ``path`` (its entries: a rename or a new file in it); a file system
    that cannot fsync a directory is left alone."""
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durable(path: str | os.PathLike, data: str | bytes) -> None:
    """Replaces ``path`` by ``data`` atomically and durably: ``<path>.tmp`` written and fsynced,
    renamed over ``path``, then the directory fsynced."""
    path = os.fspath(path)
    tmp = f"{path}.tmp"
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with open(tmp, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_json_durable(path: str | os.PathLike, value: Any, **dump_kw) -> None:
    """:func:`write_durable` of ``value`` as indented JSON (``json.dumps`` keywords pass through)."""
    write_durable(path, json.dumps(value, indent=2, **dump_kw) + "\n")


def append_line(f, line: str) -> None:
    """Appends ``line`` and a newline to the open text file ``f``, then fsyncs it."""
    f.write(line + "\n")
    f.flush()
    os.fsync(f.fileno())


def decoded_lines(path: str | os.PathLike) -> list[str | None]:
    """The lines of ``path`` as text; a line that is not UTF-8 is None (logged as a warning
    naming the file and the line)."""
    out: list[str | None] = []
    for i, raw in enumerate(pathlib.Path(path).read_bytes().splitlines(), 1):
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            _log.warning(
                "%s line %d is not UTF-8 text (byte %d of the line: %r); skipped",
                path,
                i,
                e.start,
                raw[e.start : e.start + 1],
            )
            out.append(None)
    return out


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every readable JSON line of ``path`` (a line cut by a crash or not UTF-8 is skipped, the
    latter with a warning); [] if absent."""
    path = pathlib.Path(path)
    records = []
    if path.exists():
        for line in decoded_lines(path):
            try:
                records.append(json.loads(line))
            except (ValueError, TypeError):
                continue
    return records


def read_metrics(workdir: str | os.PathLike, filename: str = METRICS_FILE) -> list[dict[str, Any]]:
    """All records of ``<workdir>/metrics.jsonl`` (skipping unreadable lines)."""
    return read_jsonl(pathlib.Path(workdir) / filename)
