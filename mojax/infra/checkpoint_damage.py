"""What a failed checkpoint read says about the step: damaged, or not known to be damaged.

``mojax.infra.checkpoint.Checkpointer`` moves a step aside only on positive evidence that its files are
damaged. The evidence is of two kinds:

* **files** (:func:`damage`): the step or one of its item directories is missing or empty; a
  metadata file (``state/_METADATA``, the host-state JSON, ``_CHECKPOINT_METADATA``,
  ``state/_sharding``) is missing, empty or not JSON; an OCDBT manifest or data file is empty;
* **the reader's own verdict** (:func:`reader_evidence`): TensorStore read the bytes and reports
  ``DATA_LOSS``, a byte range past the end of a file (``OUT_OF_RANGE``: a short file),
  ``NOT_FOUND`` (a file the index names is missing) or bytes that do not decode
  (``FAILED_PRECONDITION`` from decompression or decoding). An error that carries an OS error
  other than a missing file (TensorStore reports EIO, ESTALE, EMFILE, ... as
  ``FAILED_PRECONDITION ... [OS error ...]``) is no verdict on the bytes.

Everything else -- an ``OSError`` such as EIO, ESTALE or EMFILE, a ``MemoryError``, TensorStore's
``RESOURCE_EXHAUSTED`` / ``UNAVAILABLE``, orbax's "tree structures do not match" -- is no evidence:
the files may be fine, so nothing is moved and the run stops with :func:`not_damaged_message`.
"""

from __future__ import annotations

import errno
import json
import os
import re

STATE, HOST = "state", "host"
#: The file ``orbax.checkpoint.JsonCheckpointHandler`` writes in the host item.
HOST_FILE = "metadata"
#: JSON files every committed step has (relative to the step directory).
_REQUIRED_JSON = (f"{STATE}/_METADATA", f"{HOST}/{HOST_FILE}")
#: JSON files that are checked when present.
_OPTIONAL_JSON = ("_CHECKPOINT_METADATA", f"{STATE}/_sharding")

_READER_EVIDENCE = (
    (re.compile(r"\bDATA_LOSS:"), "the reader reports data loss"),
    (
        re.compile(r"\bOUT_OF_RANGE:.*byte range.*not valid for value of size", re.S),
        "a file is shorter than the checkpoint's index says",
    ),
    (re.compile(r"\bNOT_FOUND:"), "a file the checkpoint's index names is missing"),
    (
        re.compile(r"\bFAILED_PRECONDITION:.*(Truncated .*stream|decompress|Error decoding)", re.S),
        "a file's bytes do not decode",
    ),
)
#: TensorStore's text for an OS error (EIO, ESTALE, EMFILE, ... become FAILED_PRECONDITION).
_OS_ERROR = "[OS error"


def damage(step_dir: str) -> str | None:
    """Positive evidence that the files of the step in ``step_dir`` are damaged, or None.

    Raises:
      OSError: a file could not be inspected for another reason than being missing (an I/O
        error, a stale NFS handle, too many open files): no verdict either way.
    """
    if not os.path.isdir(step_dir):
        return f"directory {step_dir} does not exist"
    for item in (STATE, HOST):
        sub = os.path.join(step_dir, item)
        try:
            names = os.listdir(sub)
        except FileNotFoundError:
            names = []
        if not names:
            return f"item {item!r} is missing or empty ({sub})"
    for rel in _REQUIRED_JSON + _OPTIONAL_JSON:
        found = _json_damage(os.path.join(step_dir, rel), required=rel in _REQUIRED_JSON)
        if found:
            return found
    return _ocdbt_damage(os.path.join(step_dir, STATE))


def _json_damage(path: str, *, required: bool) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return f"metadata file {path} is missing" if required else None
    if not data:
        return f"metadata file {path} is empty"
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        return f"metadata file {path} is not JSON ({e})"
    return None


def _ocdbt_damage(state_dir: str) -> str | None:
    """An empty OCDBT manifest or data file, or a missing root manifest (when the state item
    is an OCDBT database)."""
    if not any(n.startswith("ocdbt.process_") for n in os.listdir(state_dir)):
        return None
    if not os.path.exists(os.path.join(state_dir, "manifest.ocdbt")):
        return f"OCDBT manifest {state_dir}/manifest.ocdbt is missing"
    for root, _, files in os.walk(state_dir):
        for name in files:
            if name == "manifest.ocdbt" or os.path.basename(root) == "d":
                path = os.path.join(root, name)
                if os.path.getsize(path) == 0:
                    return f"file {path} is empty"
    return None


def _chain(err: BaseException) -> list[BaseException]:
    out = [err]
    while (nxt := out[-1].__cause__ or out[-1].__context__) is not None and nxt not in out:
        out.append(nxt)
    return out


def reader_evidence(err: BaseException) -> str | None:
    """What the reader's error chain says is damaged (module docstring), or None."""
    for e in _chain(err):
        text = str(e)
        if _OS_ERROR in text and "NOT_FOUND:" not in text:
            continue  # the OS refused a read: no verdict on the bytes
        for pattern, what in _READER_EVIDENCE:
            if pattern.search(text):
                return f"{what}: {_short(text)}"
    return None


def describe(err: BaseException) -> str:
    """The error chain, one short line per exception (TensorStore specs cut off)."""
    return " <- ".join(f"{type(e).__name__}: {_short(str(e))}" for e in _chain(err)[:4])


def _short(text: str, limit: int = 400) -> str:
    text = text.split(" [tensorstore_spec=")[0].split("See full TensorStore details")[0]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _likely_cause(err: BaseException) -> str:
    chain = _chain(err)
    text = " ".join(str(e) for e in chain)
    if any(isinstance(e, MemoryError) for e in chain) or "RESOURCE_EXHAUSTED" in text:
        return "out of memory or another resource (a transient condition)"
    for e in chain:
        if isinstance(e, OSError) and e.errno is not None:
            name = errno.errorcode.get(e.errno, str(e.errno))
            return f"an OS error ({name}: {os.strerror(e.errno)}), usually transient"
    if _OS_ERROR in text:
        return "an OS error reported by the array reader, usually transient"
    if "tree structures do not match" in text or "pytree structure" in text:
        return (
            "the saved tree differs from the restore target (a renamed parameter, or an "
            "optimizer setting such as max_grad_norm switched between None and a value)"
        )
    return "unknown (the files show no damage)"


def not_damaged_message(where: str, err: BaseException) -> str:
    """The message of a read that failed although the step's files show no damage."""
    return (
        f"{where} could not be restored, but its files show no damage, so nothing was moved "
        f"aside and the run stops here.\n  likely cause: {_likely_cause(err)}\n"
        f"  error: {describe(err)}\n"
        "  A storage or memory fault: rerun once it is fixed. A changed model or optimizer: "
        "rerun with the config that wrote the checkpoint, or start over with "
        "--config.resume=new (the old workdir is kept)."
    )
