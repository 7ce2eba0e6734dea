"""The workdir contract: a workdir holds one run, and rerunning it never silently runs something else.

* **Name.** The default workdir is ``workdir/<config name>`` plus the config argument, made safe for
  the file system: ``configs/saw.py`` -> ``workdir/saw``, ``configs/saw.py:mode=gdpo`` ->
  ``workdir/saw_mode=gdpo`` (:func:`default_workdir`). Characters other than letters, digits and
  ``. _ = + -`` become ``_``; a name over 100 characters is cut and ends in a hash of the argument.
* **Saved config.** At the start of training, process 0 writes the resolved config to
  ``<workdir>/config.json`` (``mojax.infra.logbook.read_config`` and ``python -m mojax.export`` read it).
  It, ``inputs.json`` and ``done`` are written durably (``mojax.infra.jsonl.write_durable``: the file and
  its directory fsynced), and every RL checkpoint keeps a copy of the config in its host state.
* **Damaged config.json.** An empty, cut or non-UTF-8 ``config.json`` in a workdir with run outputs
  is refused (:class:`WorkdirError`, naming the file and what is wrong) with the choices:
  ``python -m mojax.infra.workdir_restore WORKDIR`` (rewrite it from the newest checkpoint's copy),
  ``--config.resume=force`` or ``--config.resume=new``, which both work on it.
* **Refusal.** A training run in a workdir whose ``config.json`` differs from the new config in any
  key outside :data:`RESUMABLE` (run length and checkpoint / eval cadence) or :data:`LOGGING_ONLY`
  stops before anything is built, with a :class:`WorkdirError` that lists each differing key as
  ``old -> new``. A workdir with run outputs (checkpoints, metrics) but no ``config.json`` is refused
  the same way, since what it ran cannot be checked. A workdir whose run stopped before any output
  (e.g. on a bad data path) holds nothing to resume: its ``config.json`` is simply replaced.
* **Overrides** (``config.resume``): ``""`` (default) applies the check; ``"force"`` continues from
  the workdir's checkpoints under the new config and overwrites ``config.json`` (and removes
  ``done``) only once the checkpoint restored (:class:`Deferred`), so a force that fails leaves
  them as they were; ``"new"`` renames
  the old workdir to ``<workdir>.old-<n>`` (the first free ``n``) and starts from scratch.
* **A rerun of a ``resume=new`` command resumes.** ``config.json`` records ``resume="new"``; when
  the workdir holds a committed checkpoint of a run started by ``resume=new`` with the same
  config, running the command again (what the preemption message says, what a SLURM requeue
  does) resumes that run instead of moving it aside again.
* **Damaged checkpoints.** A workdir whose ``checkpoints/`` holds steps moved aside as damaged
  (``<step>.corrupt``) and no committed step is refused: a fresh start would train from step 0
  and empty ``metrics.jsonl``. ``--config.resume=new`` starts over (the old workdir is kept);
  renaming a ``.corrupt`` directory back retries that step.
* **Lock.** Training holds the workdir's lock (:func:`lock`, ``mojax.infra.workdir_lock``) around
  :func:`prepare` and the run, so a second training job in the same workdir is refused.
* **Local paths.** :func:`check_paths` refuses a URL workdir or a URL in a path key of the config
  (``mojax.infra.paths``) before anything is built.
* **Finished runs.** A workdir whose ``done`` file records at least ``config.steps`` steps is
  finished: :func:`prepare` returns a :class:`Finished` whose message says so and how to extend it
  (a larger ``--config.steps`` resumes from the last checkpoint); nothing is trained and the exit
  code is 0.

``mode=eval`` and ``dry_run`` neither check nor write ``config.json``. Multi-host: every process reads
and checks (all refuse together), then process 0 alone moves or writes files, between barriers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from mojax.config import ConfigError
from mojax.infra import config_renames, environment, paths
from mojax.infra import logbook as log_lib
from mojax.infra.jsonl import fsync_dir, write_json_durable
from mojax.infra.workdir_lock import LOCK_FILE, WorkdirLock

#: Keys that may change between runs of one workdir: the run continues under the new values.
RESUMABLE = (
    "steps",
    "eval_every",
    "checkpoint_every",
    "keep_checkpoints",
    "transcripts_per_step",
    "resume",
    "preemption_grace_s",
    "sft.checkpoint_every",
)
#: Keys (and sections, ending in ``.``) that only change what is logged.
LOGGING_ONLY = ("wandb.", "environment.")  # not compared on resume
RESUME_MODES = ("", "force", "new")
DONE_FILE = "done"
INPUTS_FILE = "inputs.json"
_CHECKPOINT_DIRS = ("checkpoints", "checkpoints_sft")
_MAX_NAME = 100


class WorkdirError(Exception):
    """The workdir holds a different run (the message lists the differing keys and the overrides)."""


@dataclasses.dataclass(frozen=True)
class Finished:
    """A finished workdir: ``message`` says so and how to extend it; ``summary`` is its last
    ``metrics.jsonl`` record."""

    message: str
    summary: dict[str, Any]


def default_workdir(config_spec: str, root: str = "workdir") -> str:
    """``workdir/<config name>[_<config arg>]`` for ``--config=configs/<name>.py[:<arg>]``."""
    path, _, arg = config_spec.partition(":")
    name = os.path.splitext(os.path.basename(path))[0]
    arg = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9._=+-]", "_", arg)).strip("._")
    if not arg:
        return os.path.join(root, name)
    full = f"{name}_{arg}"
    if len(full) > _MAX_NAME:
        digest = hashlib.sha1(config_spec.partition(":")[2].encode()).hexdigest()[:10]
        full = f"{full[: _MAX_NAME - 11]}-{digest}"
    return os.path.join(root, full)


def config_values(config: Any) -> dict[str, Any]:
    """The config as ``{dotted key: JSON value}`` (tuples as lists, as ``config.json`` holds them)."""
    return _flatten(config_tree(config))


def config_tree(config: Any) -> dict[str, Any]:
    """A ConfigDict or the spec's resolved mapping as the JSON tree ``config.json`` holds."""
    if hasattr(config, "to_json_best_effort"):
        return json.loads(config.to_json_best_effort())
    return json.loads(json.dumps(config, default=repr))


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _resumable(key: str) -> bool:
    return key in RESUMABLE or any(
        key.startswith(p) if p.endswith(".") else key == p for p in LOGGING_ONLY
    )


def config_diff(
    old: Any,
    new: Any,
    *,
    defaults: Mapping[str, Any] | None = None,
    same_inputs: Iterable[str] = (),
) -> dict[str, tuple[Any, Any]]:
    """``{key: (old, new)}`` for every key outside the resumable set whose value differs
    (``"<absent>"`` for a key one side lacks).

    ``defaults``: ``{key: default}``; a key the old config lacks counts as its default (it was
    added after that run started). ``same_inputs``: path keys whose file contents are unchanged
    (``mojax.spec.input_files``), so a moved path is not a difference."""
    a, b = config_values(old), config_values(new)
    absent = "<absent>"
    for k, v in (defaults or {}).items():
        if k not in a and k in b:
            a[k] = config_values({"v": v})["v"]
    return {
        k: (a.get(k, absent), b.get(k, absent))
        for k in sorted(set(a) | set(b))
        if not _resumable(k) and k not in same_inputs and a.get(k, absent) != b.get(k, absent)
    }


def resume_mode(config: Any) -> str:
    mode = config.get("resume", "") or ""
    if mode not in RESUME_MODES:
        raise ConfigError.of(
            [f"config.resume: {mode!r} is not allowed; allowed values: {list(RESUME_MODES)}"]
        )
    return mode


def lock(workdir: str) -> WorkdirLock:
    """The workdir's exclusive lock (``mojax.infra.workdir_lock``), to hold while training."""
    return WorkdirLock(workdir)


def check_paths(config: Any, workdir: str) -> None:
    """Raises ``ConfigError`` naming ``--workdir`` or each config path key that holds a URL."""
    lines = []
    try:
        paths.local_path(workdir, "--workdir")
    except paths.RemotePathError as e:
        lines.append(str(e))
    lines += paths.remote_config_paths(config_values(config))
    if lines:
        raise ConfigError.of(lines)


def prepare(
    config: Any,
    workdir: str,
    *,
    inputs: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Finished | None:
    """Applies the contract (module docstring) before a training run builds anything.

    Args:
      inputs: ``{config key: fingerprint}`` of the run's input files (``mojax.spec.input_files``).
      defaults: ``{config key: default}`` for keys an older ``config.json`` lacks.

    Returns:
      None to train (``config.json`` and ``inputs.json`` are written, a stale ``done`` removed);
      under ``resume=force`` with a committed checkpoint a :class:`Deferred` whose ``write()``
      the trainer calls once the checkpoint restored; or :class:`Finished`.

    Raises:
      WorkdirError: the workdir holds a run of a different config, whose data files changed or
        whose ``config.json`` is damaged (and ``config.resume`` is ""), or only damaged checkpoint steps (and ``config.resume`` is
        not "new").
      ConfigError: ``config.resume`` is not one of :data:`RESUME_MODES`.
    """
    mode = resume_mode(config)
    has_run = _has_outputs(workdir)
    saved, problem = read_saved_config(workdir)
    record = inputs is not None
    inputs, saved_inputs = dict(inputs or {}), _read_inputs(workdir)
    same = {k for k, v in inputs.items() if saved_inputs.get(k) == v}
    diff_kw = dict(defaults=defaults, same_inputs=same)
    if mode == "new" and _started_by_this_command(workdir, saved, config, **diff_kw):
        mode = ""
        if log_lib.is_main_process():
            print(_rerun_of_new_message(workdir), flush=True)
    if mode == "new":
        saved, has_run = None, False
    elif _only_damaged_steps(workdir):
        raise WorkdirError(_damaged_message(workdir))
    elif mode == "" and problem and has_run:
        raise WorkdirError(_damaged_config_message(workdir, problem))
    elif mode == "" and saved is None and has_run:
        raise WorkdirError(_no_config_message(workdir))
    elif mode == "" and saved is not None and has_run:
        diff = config_diff(saved, config, **diff_kw)
        if diff:
            raise WorkdirError(_diff_message(workdir, diff))
        changed = {k: (saved_inputs[k], v) for k, v in inputs.items() if k in saved_inputs}
        changed = {k: ab for k, ab in changed.items() if ab[0] != ab[1]}
        if changed:
            raise WorkdirError(_inputs_message(workdir, config, changed))
    done = _done_steps(workdir) if has_run else None
    if done is not None and done >= int(config["steps"]):
        return Finished(_finished_message(workdir, done), _last_metrics(workdir))
    records = Deferred(workdir, config_tree(config), inputs if record else None)
    defer = mode == "force" and any(n.isdigit() for n in _step_names(workdir))
    _barrier("mojax_workdir_checked")
    if log_lib.is_main_process():
        if mode == "new":
            moved = _move_aside(workdir)
            if moved:
                print(f"mojax: --config.resume=new: moved the old workdir to {moved}", flush=True)
        os.makedirs(workdir, exist_ok=True)
    _barrier("mojax_workdir_moved")
    if defer:
        return records
    records.write()
    return None


@dataclasses.dataclass(frozen=True)
class Deferred:
    """The records a training run writes into its workdir: ``config.json`` (the resolved config
    plus ``environment``), ``inputs.json`` (``inputs``, unless None) and the removal of a stale
    ``done``. :func:`prepare` writes them itself, except under ``resume=force`` with a committed
    checkpoint, where it returns this and the trainer calls :meth:`write` once the checkpoint
    restored: a force that fails to restore (exit 3) leaves the workdir's records as they were."""

    workdir: str
    tree: dict[str, Any]
    inputs: dict[str, str] | None

    def write(self) -> None:
        """Writes the records durably (``mojax.infra.jsonl.write_durable``): process 0 writes, then
        every process meets at a barrier."""
        if log_lib.is_main_process():
            done = os.path.join(self.workdir, DONE_FILE)
            if os.path.exists(done):
                os.remove(done)  # extended or forced: not done any more
                fsync_dir(self.workdir)
            tree = {**self.tree, "environment": environment.snapshot()}
            log_lib.write_config(self.workdir, tree)
            if self.inputs is not None:
                path = os.path.join(self.workdir, INPUTS_FILE)
                write_json_durable(path, self.inputs, sort_keys=True)
        _barrier("mojax_workdir_written")


def read_saved_config(workdir: str) -> tuple[Any, str | None]:
    """``(config, problem)``: the ConfigDict of ``<workdir>/config.json`` (None when absent or
    unreadable) and, for an unreadable one, what is wrong with it (empty, cut, not UTF-8)."""
    import ml_collections

    path = os.path.join(workdir, log_lib.CONFIG_FILE)
    if not os.path.isfile(path):
        return None, None
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return None, f"cannot be read ({e})"
    if not raw.strip():
        return None, f"is empty ({len(raw)} bytes; cut by a crash)"
    try:
        tree = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, f"is not UTF-8 text (byte offset {e.start}: {raw[e.start : e.start + 1]!r})"
    except ValueError as e:
        return None, f"is not valid JSON ({e}; {len(raw)} bytes: cut by a crash?)"
    if not isinstance(tree, dict):
        return None, f"holds a JSON {type(tree).__name__}, not the run's config"
    return ml_collections.ConfigDict(config_renames.upgrade(tree)), None


def _step_names(workdir: str) -> list[str]:
    path = os.path.join(workdir, "checkpoints")
    return os.listdir(path) if os.path.isdir(path) else []


def _only_damaged_steps(workdir: str) -> bool:
    """RL checkpoint steps were moved aside as damaged and no committed step is left."""
    names = _step_names(workdir)
    return not any(n.isdigit() for n in names) and any(".corrupt" in n for n in names)


def _started_by_this_command(workdir: str, saved: Any, config: Any, **diff_kw) -> bool:
    """The workdir holds a committed RL checkpoint step of a run that ``resume=new`` started
    under the same config."""
    return (
        any(n.isdigit() for n in _step_names(workdir))
        and saved is not None
        and saved.get("resume", "") == "new"
        and not config_diff(saved, config, **diff_kw)
    )


def _read_inputs(workdir: str) -> dict[str, str]:
    """The input fingerprints the run recorded (``{}`` when it recorded none)."""
    path = os.path.join(workdir, INPUTS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _has_outputs(workdir: str) -> bool:
    """Whether a run left something to resume or report: a checkpoint step (committed, unfinished
    or moved aside), metrics or a ``done`` file."""
    for sub in _CHECKPOINT_DIRS:
        path = os.path.join(workdir, sub)
        if os.path.isdir(path) and any(n.split(".")[0].isdigit() for n in os.listdir(path)):
            return True
    return any(os.path.exists(os.path.join(workdir, f)) for f in (log_lib.METRICS_FILE, DONE_FILE))


def _done_steps(workdir: str) -> int | None:
    path = os.path.join(workdir, DONE_FILE)
    if not os.path.isfile(path):
        return None
    try:
        return int(open(path, encoding="utf-8").read().strip())
    except ValueError:
        return None  # an unreadable done file: not finished


def _last_metrics(workdir: str) -> dict[str, Any]:
    records = log_lib.read_metrics(workdir)
    return records[-1] if records else {}


def _move_aside(workdir: str) -> str | None:
    """Renames the workdir to ``<workdir>.old-<n>`` and recreates it with this job's lock file
    (which the rename took along)."""
    names = os.listdir(workdir) if os.path.isdir(workdir) else []
    if not [n for n in names if n != LOCK_FILE]:
        return None
    base = os.path.normpath(os.path.abspath(workdir))
    n = 1
    while os.path.exists(f"{base}.old-{n}"):
        n += 1
    old = f"{base}.old-{n}"
    os.rename(base, old)
    os.makedirs(base)
    if LOCK_FILE in names:
        os.rename(os.path.join(old, LOCK_FILE), os.path.join(base, LOCK_FILE))
    return old


def _barrier(name: str) -> None:
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


_OVERRIDES = (
    "  --config.resume=force  continue from its checkpoints under the new config\n"
    "  --config.resume=new    move the old workdir to {workdir}.old-<n> and start from scratch\n"
    "  --workdir=DIR          run in another directory"
)


def _diff_message(workdir: str, diff: dict[str, tuple[Any, Any]]) -> str:
    width = max(len(k) for k in diff)
    rows = "\n".join(
        f"  config.{k:<{width}}  {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in diff.items()
    )
    return (
        f"workdir {workdir} holds a run of a different config ({len(diff)} key(s) differ, "
        f"old -> new):\n{rows}\n"
        f"Only {', '.join(RESUMABLE)} and logging keys may change when a run is resumed. Either:\n"
        + _OVERRIDES.format(workdir=workdir)
    )


def _inputs_message(workdir: str, config: Any, changed: dict[str, tuple[str, str]]) -> str:
    values = config_values(config)
    rows = "\n".join(
        f"  config.{k}={values.get(k)!r}: {a[:19]}... -> {b[:19]}..."
        for k, (a, b) in changed.items()
    )
    return (
        f"workdir {workdir} holds a run whose input files changed since it started (contents "
        f"recorded in {INPUTS_FILE} -> now):\n{rows}\n"
        "Resuming would train its checkpoints on other data. Restore the file(s), or either:\n"
        + _OVERRIDES.format(workdir=workdir).replace(
            "under the new config", "on the new files (their fingerprints are replaced)"
        )
    )


def _no_config_message(workdir: str) -> str:
    return (
        f"workdir {workdir} holds run outputs but no {log_lib.CONFIG_FILE}, so its config cannot "
        "be checked against this one (it was written by an older mojax). Either:\n"
        + _OVERRIDES.format(workdir=workdir)
    )


def _damaged_config_message(workdir: str, problem: str) -> str:
    path = os.path.join(workdir, log_lib.CONFIG_FILE)
    return (
        f"workdir {workdir}: its {path} {problem}, so the run it holds cannot be checked against "
        "this config. Either:\n"
        f"  python -m mojax.infra.workdir_restore {workdir}   rewrite it from the copy the "
        "latest checkpoint holds (the damaged file is kept as config.json.damaged), then rerun\n"
        "  --config.resume=force  continue from its checkpoints under this config (config.json "
        "is rewritten once the checkpoint restored)\n"
        f"  --config.resume=new    move the old workdir to {workdir}.old-<n> and start from scratch"
    )


def _damaged_message(workdir: str) -> str:
    ckpt = os.path.join(workdir, "checkpoints")
    damaged = sorted(n for n in _step_names(workdir) if ".corrupt" in n)
    return (
        f"workdir {workdir} holds no readable RL checkpoint: every step in {ckpt} was moved aside "
        f"as damaged ({', '.join(damaged)}). Starting fresh would train from step 0 and empty "
        "metrics.jsonl, so mojax refuses. Either:\n"
        "  --config.resume=new  move the old workdir (damaged steps included) to "
        f"{workdir}.old-<n> and start from scratch\n"
        f"  mv {ckpt}/<step>.corrupt {ckpt}/<step>  retry a step (after fixing its files)"
    )


def _rerun_of_new_message(workdir: str) -> str:
    return (
        f"mojax: --config.resume=new: workdir {workdir} holds the run this command started "
        "(its config.json has resume=new and the same config); resuming it. To start over "
        "again, move or delete it, or use another --workdir."
    )


def _finished_message(workdir: str, done: int) -> str:
    return (
        f"mojax: workdir {workdir} already finished its {done} RL steps; nothing to train.\n"
        f"  To train further, rerun with a larger --config.steps (e.g. --config.steps={2 * done}); "
        f"it resumes from the step-{done} checkpoint.\n"
        f"  To start over, add --config.resume=new (the old workdir is kept as {workdir}.old-<n>)."
    )
