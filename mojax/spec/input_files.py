"""The run's input files: checked before anything is built, fingerprinted for the workdir.

* **Missing files.** :func:`check_files` raises a ``ConfigError`` naming ``config.task.train_path``,
  ``config.task.eval_path``, ``config.task.val_path`` or ``config.sft.data_path`` when the file is not there (and how
  ``$MOJAX_SHARED_DIR`` locates it when it lies in the shared folder), before the run builds
  anything; ``config.task.train_path`` when a task that reads files has none; and
  ``config.model.checkpoint`` (and the model checkpoints the run spec's sections name,
  ``checkpoint_paths()``, e.g. a reward source's model) when it names no directory with a ``config.json``:
  ``mojax.main`` exits 2. Every process checks on its own, so each stops at once.
* **Fingerprints.** :func:`fingerprints` hashes the contents of the data files and of the tokenizer
  (``tokenizer.path`` when it names a file or directory) and of ``model.checkpoint``;
  ``mojax.infra.workdir.prepare`` keeps them in ``<workdir>/inputs.json``. A resumed run whose data file
  changed is refused, naming the file; a path that moved (another ``$MOJAX_SHARED_DIR``) to the
  same contents is not a change. Process 0 hashes; the values are all-gathered, so every process
  takes the same decision.

A file is hashed whole (sha256). A directory is hashed over its sorted relative paths and sizes,
and the contents of every file up to :data:`WHOLE_BYTES`; of a larger file (the weights of a
checkpoint) only the first and last MiB, so a weight file rewritten in place to the same size
is not noticed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import TYPE_CHECKING, Any

from mojax import distributed
from mojax.config import ConfigError
from mojax.spec.model_config import checkpoint_errors, checkpoint_problem
from mojax.tasks.framework.base import Task
from mojax.tasks.framework.splits import generates

if TYPE_CHECKING:
    from mojax.spec import RunSpec

#: Config keys naming data files (read whole by the task).
DATA_KEYS = ("task.train_path", "task.eval_path", "task.val_path", "sft.data_path")
#: Config keys naming a tokenizer or checkpoint (a file or a directory).
MODEL_KEYS = ("tokenizer.path", "model.checkpoint")
WHOLE_BYTES = 64 << 20
_EDGE = 1 << 20


def _value(spec: RunSpec, key: str) -> str:
    section, name = key.split(".")
    return str(getattr(getattr(spec, section), name) or "")


def _paths(spec: RunSpec) -> dict[str, str]:
    """``{key: path}`` of every input path the spec names (``tokenizer.path="build"`` is none)."""
    out = {k: _value(spec, k) for k in DATA_KEYS + MODEL_KEYS}
    if out["tokenizer.path"] == "build":
        out["tokenizer.path"] = ""
    return {k: os.path.expanduser(v) for k, v in out.items() if v}


def _section_checkpoints(spec: RunSpec) -> dict[str, str]:
    """``{config key: directory}`` of the model checkpoints the spec's sections name
    (``section.checkpoint_paths()``, e.g. a reward source's model)."""
    out = {}
    for f in dataclasses.fields(spec):
        paths = getattr(getattr(spec, f.name), "checkpoint_paths", None)
        if callable(paths):
            out.update(paths())
    return out


def check_files(spec: RunSpec) -> None:
    """Raises ``ConfigError`` naming each data key whose file does not exist, ``task.train_path``
    when a file-backed task has none, ``model.checkpoint`` when it is not a readable HF checkpoint
    (``mojax.spec.model_config.checkpoint_errors``: only config.json and the safetensors headers are
    read, on every process) and each section's ``checkpoint_paths()`` when it
    names no directory with a ``config.json``."""
    from mojax.tasks.framework.data import missing_file_message

    lines = []
    for key in DATA_KEYS:
        path = _paths(spec).get(key)
        if path and not os.path.isfile(path):
            what = "a directory, not a data file" if os.path.isdir(path) else "no such file"
            lines.append(
                f"config.{key}={_value(spec, key)!r}: {what}. "
                + missing_file_message(path, "data file").replace("\n", " ")
            )
    if spec.model.checkpoint:  # config.json, the safetensors headers, the tokenizer files
        lines += checkpoint_errors(spec)
    for key, path in _section_checkpoints(spec).items():
        if checkpoint_problem(path, key):
            lines.append(checkpoint_problem(path, key))
    if not spec.task.train_path and _reads_files(spec.build_task()):
        lines.append(
            f"config.task.train_path: none given; task {spec.task.name!r} reads its examples from "
            "a data file (train_path=..., eval_path=... in the config argument)"
        )
    if lines:
        raise ConfigError.of(lines)


def _reads_files(task: Any) -> bool:
    """Whether ``task`` loads its splits from ``task.train_path`` only: the default
    ``load_splits`` and a ``load(path)`` that generates nothing."""
    return type(task).load_splits is Task.load_splits and not generates(task)


def fingerprint(path: str) -> str:
    """``sha256:<hex>`` of a file's contents, or of a directory (module docstring)."""
    h = hashlib.sha256()
    if os.path.isfile(path):
        _update_file(h, path, whole=True)
        return f"sha256:{h.hexdigest()}"
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            size = os.path.getsize(full)
            h.update(f"{rel}\0{size}\0".encode())
            _update_file(h, full, whole=size <= WHOLE_BYTES)
    return f"sha256:{h.hexdigest()}"


def _update_file(h, path: str, *, whole: bool) -> None:
    with open(path, "rb") as f:
        if whole:
            while chunk := f.read(1 << 20):
                h.update(chunk)
            return
        h.update(f.read(_EDGE))
        f.seek(-_EDGE, os.SEEK_END)
        h.update(f.read(_EDGE))


def fingerprints(spec: RunSpec) -> dict[str, str]:
    """``{config key: fingerprint}`` of every existing input path of ``spec``: hashed on process 0,
    the same dict on every process."""
    out = None
    if distributed.is_leader():
        out = {k: fingerprint(p) for k, p in _paths(spec).items() if os.path.exists(p)}
    return distributed.allgather_objects(out)[0]


def prepare_workdir(spec: RunSpec, workdir: str):
    """``mojax.infra.workdir.prepare`` with the spec's input fingerprints and its absent-key defaults."""
    from mojax.infra import workdir as workdir_lib
    from mojax.spec import key_defaults

    return workdir_lib.prepare(
        spec.resolved, workdir, inputs=fingerprints(spec), defaults=key_defaults()
    )
