"""Reading the JSON-lines files a run writes (``metrics.jsonl``, ``transcripts.jsonl``).

A leaf module: ``mojax.logbook`` (writers) and ``mojax.plots`` (readers) both use it.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

METRICS_FILE = "metrics.jsonl"


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every readable JSON line of ``path`` (a line cut by a crash is skipped); [] if absent."""
    path = pathlib.Path(path)
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def read_metrics(workdir: str | os.PathLike, filename: str = METRICS_FILE) -> list[dict[str, Any]]:
    """All records of ``<workdir>/metrics.jsonl`` (skipping unreadable lines)."""
    return read_jsonl(pathlib.Path(workdir) / filename)
