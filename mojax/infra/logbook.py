"""Run outputs: ``metrics.jsonl``, TensorBoard / W&B, ``config.json``, transcripts and PNG plots.

``metrics.jsonl`` holds one JSON object per logged step (public keys, ``docs/architecture.md``: ``step``,
``reward/<objective>/mean``, ``reward/scalar/mean``, ``loss``, ``time/step_s``, ``eval/...``). On resume the
writer truncates lines of steps after the restored checkpoint (in ``metrics.jsonl`` and
``transcripts.jsonl``), so a killed-and-resumed run leaves the same files as an uninterrupted one.

Only process 0 writes (``jax.process_index() == 0``): on the other hosts of a multi-host run
``MetricsWriter``, ``write_transcripts``, ``write_config`` and ``plot_run`` do nothing, so every
process can call them unconditionally.

Plots live in ``mojax.infra.plots`` (``plot_run``, ``plot_comparison``).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mojax.infra import config_renames, log_backends
from mojax.infra.jsonl import METRICS_FILE, read_jsonl, read_metrics, write_durable
from mojax.infra.log_backends import WandbOptions

TRANSCRIPTS_FILE = "transcripts.jsonl"
CONFIG_FILE = "config.json"
TOOL_OPEN, TOOL_CLOSE = "[[tool]]", "[[/tool]]"  # around observations in ``response_marked``

__all__ = [
    "CONFIG_FILE",
    "METRICS_FILE",
    "TRANSCRIPTS_FILE",
    "MetricsWriter",
    "WandbOptions",
    "format_progress",
    "is_main_process",
    "mark_response",
    "read_config",
    "read_metrics",
    "read_transcripts",
    "response_segments",
    "write_config",
    "write_transcripts",
]


def is_main_process() -> bool:
    """True on process 0 (``jax.process_index() == 0``), the one that writes run outputs."""
    import jax

    return jax.process_index() == 0


def _to_json_scalar(value: Any) -> Any:
    """Python scalar for JSON (numpy/jax scalars converted; non-finite floats kept as strings)."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    value = float(np.asarray(value))
    if math.isfinite(value):
        return value
    return str(value)  # "nan" / "inf": JSON has no literal for them


def _to_json(value: Any) -> Any:
    """Nested dicts / lists / tuples / arrays of scalars as strict JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, np.ndarray) or hasattr(value, "__jax_array__"):
        arr = np.asarray(value)
        return _to_json(arr.tolist()) if arr.ndim else _to_json_scalar(arr)
    return _to_json_scalar(value)


def _config_dict(config: Any) -> dict[str, Any]:
    """A ConfigDict / dataclass-free mapping as plain JSON values."""
    if config is None:
        return {}
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return _to_json(dict(config))


class MetricsWriter:
    """Step metrics to ``<workdir>/metrics.jsonl`` and, optionally, TensorBoard and W&B.

    Only process 0 writes (``jax.process_index() == 0``, or ``process_index`` when given); on other
    processes every method is a no-op and no file is opened.

    Args:
      workdir: the run directory (created if needed).
      resume_step: when resuming from a checkpoint at this step, lines with a larger ``step`` (written
        after that checkpoint by the interrupted run) are dropped first; for ``metrics.jsonl``
        from ``transcripts.jsonl`` too, so a step redone after a resume appears once.
      tensorboard: also write TensorBoard event files under ``<workdir>/tensorboard``.
      filename: the JSONL file name (e.g. ``sft_metrics.jsonl`` for the warm start).
      wandb: ``WandbOptions`` (or a mapping / ConfigDict such as ``config.wandb``, see
        ``WandbOptions.from_config``) to also log to Weights & Biases; None = no W&B. ``wandb`` is
        imported only then.
      config: the run's resolved config (ConfigDict or mapping), logged to W&B's run config and as a
        TensorBoard text summary.
      objectives: the task's objective names (W&B per-objective sections).
      run_name: the run's name (W&B display name); default the workdir's base name.
      backends: extra backends (objects with ``write(step, record)`` and ``close()``), e.g. an
        in-memory list for a notebook.
      process_index: this process's index (default ``jax.process_index()``).
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        resume_step: int | None = None,
        tensorboard: bool = True,
        filename: str = METRICS_FILE,
        wandb: WandbOptions | Mapping[str, Any] | None = None,
        config: Any = None,
        objectives: Sequence[str] = (),
        run_name: str | None = None,
        backends: Sequence[Any] = (),
        process_index: int | None = None,
    ):
        self.workdir = pathlib.Path(workdir)
        self.path = self.workdir / filename
        self.run_name = run_name or self.workdir.resolve().name
        self.active = is_main_process() if process_index is None else process_index == 0
        self.backends: list[Any] = []
        if not self.active:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.backends.append(log_backends.JsonlBackend(self.path, resume_step=resume_step))
        if filename == METRICS_FILE:  # the run's transcripts are redone with its steps
            log_backends.truncate_after(self.workdir / TRANSCRIPTS_FILE, resume_step)
        if tensorboard:
            self.backends.append(log_backends.TensorBoardBackend(self.workdir / "tensorboard"))
        options = WandbOptions.from_config(wandb)
        cfg = _config_dict(config)
        if options is not None:
            self.backends.append(
                log_backends.WandbBackend(
                    options,
                    workdir=self.workdir,
                    run_name=self.run_name,
                    config=cfg,
                    objectives=objectives,
                )
            )
        self.backends.extend(backends)
        if cfg:
            for b in self.backends:
                if hasattr(b, "log_config") and not isinstance(b, log_backends.WandbBackend):
                    b.log_config(cfg)

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Writes one step's scalar metrics to every backend (keys sorted, ``step`` first)."""
        if not self.active:
            return
        record = {"step": int(step)}
        record.update({k: _to_json_scalar(v) for k, v in sorted(metrics.items()) if k != "step"})
        for b in self.backends:
            b.write(int(step), record)

    def close(self) -> None:
        for b in self.backends:
            b.close()
        self.backends = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------------------------ run config


def write_config(workdir: str | os.PathLike, config: Any) -> pathlib.Path | None:
    """Writes the resolved run config to ``<workdir>/config.json`` (process 0 only).

    The file is ``config.to_json()`` of the ConfigDict (a plain mapping is dumped as JSON), the
    format ``read_config`` and ``python -m mojax.export`` read back; written durably
    (``mojax.infra.jsonl.write_durable``).
    """
    if not is_main_process():
        return None
    path = pathlib.Path(workdir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = config.to_json(indent=2) if hasattr(config, "to_json") else json.dumps(config, indent=2)
    write_durable(path, text + "\n")  # fsynced file and directory: never left empty or cut
    return path


def read_config(workdir_or_file: str | os.PathLike):
    """The ConfigDict saved by ``write_config`` (a workdir or the ``config.json`` path).

    Lists stay lists (JSON has no tuples); the values are otherwise the resolved config's.

    Raises:
      FileNotFoundError: no config.json there (naming the path).
      ValueError: it is empty, cut or not UTF-8 (naming the path and the restore command).
    """
    import ml_collections

    path = pathlib.Path(workdir_or_file)
    if path.is_dir() or path.suffix != ".json":
        path = path / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no run config at {path}: the run did not save one (pass --config=configs/x.py[:arg])"
        )
    try:
        tree = json.loads(path.read_text(encoding="utf-8"))
        return ml_collections.ConfigDict(config_renames.upgrade(tree))
    except ValueError as e:  # cut, empty or not UTF-8 (UnicodeDecodeError is a ValueError)
        raise ValueError(
            f"{path} is damaged ({type(e).__name__}: {e}); rewrite it from the copy its "
            f"checkpoints keep with: python -m mojax.infra.workdir_restore {path.parent}"
        ) from None


# ------------------------------------------------------------------------------------ transcripts


def response_segments(tokens, policy_mask, decode) -> list[tuple[str, bool]]:
    """A response split into runs of policy tokens and tool-observation tokens.

    Args:
      tokens: int [R] the response's tokens (cut to its length).
      policy_mask: bool [R] True on tokens the policy wrote (the rollout's ``loss_mask``).
      decode: ``ids -> text`` (the run's tokenizer ``decode``).

    Returns:
      ``[(text, is_policy), ...]`` in order, each run decoded on its own.
    """
    tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
    mask = [bool(m) for m in np.asarray(policy_mask).reshape(-1)][: len(tokens)]
    if len(mask) != len(tokens):
        raise ValueError(f"policy_mask has {len(mask)} entries for {len(tokens)} tokens")
    out, start = [], 0
    for i in range(1, len(tokens) + 1):
        if i == len(tokens) or mask[i] != mask[start]:
            out.append((decode(tokens[start:i]), mask[start]))
            start = i
    return out


def mark_response(segments: Iterable[Sequence[Any]]) -> str:
    """The response text with each tool observation wrapped in ``[[tool]]…[[/tool]]``."""
    parts = []
    for text, is_policy in segments:
        parts.append(text if is_policy else f"{TOOL_OPEN}{text}{TOOL_CLOSE}")
    return "".join(parts)


def write_transcripts(
    workdir: str | os.PathLike,
    step: int,
    rows: Iterable[Mapping[str, Any]],
    *,
    objectives: Sequence[str] | None = None,
) -> None:
    """Appends one step's sampled transcripts to ``<workdir>/transcripts.jsonl`` (process 0 only).

    Each line is one sampled response; ``step`` is added and every other field of the row is written
    as given (numpy / jax values converted, NaN as ``"nan"``). The fields the trainer writes::

        step            int    the RL step (after the update it fed)
        prompt_id       str    the example id (e.g. "calc/0/train/16")
        prompt          str    the rendered prompt text the model saw (chat template applied)
        response        str    the whole response as the model saw it, observations included
        segments        list   [[text, is_policy], ...]: response_segments() of the response
        response_marked str    the response with tool observations in [[tool]]...[[/tool]]
                               (derived from ``segments`` when not given)
        rewards         dict   {objective name: reward} (a list is named by ``objectives``)
        advantage       float  the row's advantage (the scalar the PPO loss used)
        sample          int    the row's sample index g in its group (optional)
        valid, n_calls, finish_reason   optional extras, written as given

    Args:
      workdir: the run directory.
      step: the step of these rows.
      rows: mappings with the fields above.
      objectives: names for ``rewards`` given as a list (length M; a mismatch raises).
    """
    if not is_main_process():
        return
    path = pathlib.Path(workdir) / TRANSCRIPTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(rows):
        row = dict(row)
        if "segments" in row:
            row["segments"] = [[str(t), bool(p)] for t, p in row["segments"]]
            row.setdefault("response_marked", mark_response(row["segments"]))
        rewards = row.get("rewards")
        if objectives is not None and rewards is not None and not isinstance(rewards, Mapping):
            values = np.asarray(rewards).reshape(-1).tolist()
            if len(values) != len(objectives):
                raise ValueError(
                    f"transcript row {i}: {len(values)} rewards for objectives {list(objectives)}"
                )
            row["rewards"] = dict(zip(objectives, values))
        lines.append(json.dumps({"step": int(step), **_to_json(row)}, ensure_ascii=False))
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def read_transcripts(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows of ``<workdir>/transcripts.jsonl``."""
    return read_jsonl(pathlib.Path(workdir) / TRANSCRIPTS_FILE)


def format_progress(step: int, total: int, metrics: Mapping[str, Any], keys: Iterable[str]) -> str:
    """One progress line: ``[ 12/40 ███░░░ ] loss=0.12 reward/scalar/mean=0.53 ...``."""
    width = 20
    filled = int(width * step / max(total, 1))
    bar = "█" * filled + "░" * (width - filled)
    parts = []
    for key in keys:
        if key in metrics:
            value = _to_json_scalar(metrics[key])
            parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return f"[{step:>{len(str(total))}}/{total} {bar}] " + " ".join(parts)
