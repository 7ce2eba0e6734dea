"""Local paths only: a URL (``gs://``, ``s3://``, ``hf://``, ...) given where mojax reads or writes
files is refused before anything is built.

mojax reads and writes its workdir, checkpoints, data and model files with POSIX file operations
(``open``, ``os.rename``), which a URL is not: ``os.path.abspath("gs://b/x")`` is the local folder
``<cwd>/gs:/b/x``, so every host would write its own copy. Multi-host runs need a directory every
host mounts with atomic directory rename (NFS, Filestore, Lustre); gcsfuse does not rename
directories atomically, and orbax commits a checkpoint step by renaming its directory.
"""

from __future__ import annotations

import os
from typing import Any

#: Config keys whose last segment is one of these, or ends in ``_path`` / ``_dir``, are paths.
_PATH_NAMES = ("path", "checkpoint", "dir")
_HOW = (
    "mojax reads and writes local (POSIX) paths only: copy the files to a local or shared "
    "mount first (e.g. `gcloud storage cp -r URL DIR`); a multi-host workdir must be a directory "
    "every host mounts with atomic rename (NFS, Filestore, Lustre; not gcsfuse)"
)


class RemotePathError(ValueError):
    """A URL was given where mojax needs a local path."""


def is_remote(path: Any) -> bool:
    return isinstance(path, (str, os.PathLike)) and "://" in os.fspath(path)


def local_path(path: str | os.PathLike, what: str) -> str:
    """``os.path.abspath(path)``; a URL raises :class:`RemotePathError` naming ``what``."""
    if is_remote(path):
        raise RemotePathError(f"{what}={os.fspath(path)!r} is a URL; {_HOW}")
    return os.path.abspath(os.fspath(path))


def remote_config_paths(values: dict[str, Any]) -> list[str]:
    """One line per path key of a flattened config (``{dotted key: value}``) holding a URL."""
    lines = []
    for key, value in sorted(values.items()):
        last = key.rsplit(".", 1)[-1]
        is_path = last in _PATH_NAMES or last.endswith(("_path", "_dir"))
        if is_path and is_remote(value):
            lines.append(f"config.{key}: {value!r} is a URL; {_HOW}")
    return lines
