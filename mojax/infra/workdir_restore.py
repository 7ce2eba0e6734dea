"""Rewriting a damaged ``<workdir>/config.json`` from the copy its checkpoints keep.

Every RL checkpoint's host state holds the run's resolved config (``config``, written by
``mojax.rl.warm_start.saved_host``). When ``config.json`` is empty, cut or not UTF-8 (a crash while
an older mojax wrote it, a damaged disk), ``mojax.infra.workdir.prepare`` refuses the rerun and names
this command::

    python -m mojax.infra.workdir_restore WORKDIR

It takes the workdir's lock, keeps the damaged file as ``config.json.damaged`` (``-<n>`` if taken)
and writes the newest committed step's copy (``environment`` records the step it came from). The
rerun then checks its config against it as usual. One process, run by hand; exit 0 done, 2 no
copy to restore (older checkpoints hold none) or the workdir is locked by a live run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mojax.infra import logbook as log_lib
from mojax.infra.workdir import WorkdirError, lock
from mojax.infra.workdir_lock import WorkdirLockedError


def checkpoint_config(workdir: str) -> tuple[int, dict[str, Any]] | None:
    """``(step, config tree)`` of the newest committed RL checkpoint step whose host state holds
    the run's config (``mojax.rl.warm_start.saved_host``), or None (no step holds one)."""
    from mojax.infra import checkpoint as ckpt_lib

    ckpt = os.path.join(workdir, "checkpoints")
    names = os.listdir(ckpt) if os.path.isdir(ckpt) else []
    steps = sorted((int(n) for n in names if n.isdigit()), reverse=True)
    for step in steps:
        try:
            host = ckpt_lib.read_host_state(os.path.join(ckpt, str(step)))
        except Exception:  # noqa: BLE001 - a damaged step holds no usable copy; try an older one
            continue
        if isinstance(host, dict) and isinstance(host.get("config"), dict):
            return step, host["config"]
    return None


def restore_config(workdir: str) -> str:
    """Rewrites ``<workdir>/config.json`` from :func:`checkpoint_config` (holding the workdir's
    lock; one process), keeping a damaged file as ``config.json.damaged`` (``-<n>`` if taken).
    Returns what it did.

    Raises:
      WorkdirError: no checkpoint step holds a copy of the config.
    """
    found = checkpoint_config(workdir)
    if found is None:
        raise WorkdirError(
            f"workdir {workdir}: no committed checkpoint step holds a copy of the config (it was "
            "written by an older mojax, or there is none); use --config.resume=force or "
            "--config.resume=new"
        )
    step, tree = found
    path = os.path.join(workdir, log_lib.CONFIG_FILE)
    with lock(workdir):
        kept = ""
        if os.path.exists(path):
            kept, n = f"{path}.damaged", 0
            while os.path.exists(kept):
                n += 1
                kept = f"{path}.damaged-{n}"
            os.rename(path, kept)
            kept = f" (the old file is kept as {kept})"
        log_lib.write_config(workdir, {**tree, "environment": {"restored_from_step": step}})
    return f"mojax: wrote {path} from the copy in checkpoint step {step}{kept}"


def _main(argv: list[str]) -> int:
    """``python -m mojax.infra.workdir_restore WORKDIR`` (:func:`restore_config`)."""
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: python -m mojax.infra.workdir_restore WORKDIR", file=sys.stderr)
        return 2
    try:
        print(restore_config(argv[1]))
    except (WorkdirError, WorkdirLockedError) as e:
        print(f"mojax: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
