"""Backends behind ``mojax.infra.logbook.MetricsWriter``: JSONL (always), TensorBoard, Weights & Biases.

A backend has ``write(step, record)`` (``record``: the step's scalars as JSON values, ``"step"``
included) and ``close()``; ``log_config(config_dict)`` is optional. ``MetricsWriter`` builds them
and calls them on process 0 only.

W&B is imported only when enabled (``pip install mojax[wandb]``). ``mode="offline"`` writes the run
under ``<dir>/wandb/offline-run-*`` (upload later with ``wandb sync``), ``"disabled"`` makes every
call a no-op. The W&B run id is kept in ``<workdir>/wandb_run_id`` so a resumed run continues the
same W&B run. Every metric is logged against the ``step`` metric (``define_metric``), not W&B's own
counter, so the x-axis is the RL step; lines the interrupted run wrote after its last checkpoint stay
in W&B (``metrics.jsonl`` drops them on resume).

Per-objective panels: W&B groups charts into sections by the key's first ``/`` segment, so a key
that names an objective as one of its segments (``reward/r_task/mean``, ``eval/r_task``) is also
logged under that objective first (``r_task/reward/mean``, ``r_task/eval``): one section per
objective next to the per-metric sections (``reward/``, ``eval/``, ...).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from mojax.infra.jsonl import append_line, decoded_lines, write_durable

WANDB_ID_FILE = "wandb_run_id"
WANDB_MODES = ("online", "offline", "disabled")


class JsonlBackend:
    """Appends one JSON object per ``write`` to ``path``; on resume, first drops the lines of steps
    after ``resume_step`` (written by the interrupted run after its checkpoint)."""

    def __init__(self, path: str | os.PathLike, *, resume_step: int | None = None):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(resume_step)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def _truncate_after(self, resume_step: int | None) -> None:
        truncate_after(self.path, resume_step)

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        del step
        append_line(self._file, json.dumps(dict(record)))

    def close(self) -> None:
        self._file.close()


def truncate_after(path: str | os.PathLike, resume_step: int | None) -> None:
    """Drops the lines of ``path`` (JSONL with a ``step`` field) of steps after ``resume_step``
    (all of them when None: a fresh start); no file, nothing to do."""
    path = pathlib.Path(path)
    if not path.exists():
        return
    kept = [
        line
        for line in decoded_lines(path)  # a line that is not UTF-8 is dropped (with a warning)
        if line is not None
        and line.strip()
        and resume_step is not None
        and line_step(line) <= resume_step
    ]
    write_durable(path, "".join(line + "\n" for line in kept))


def line_step(line: str) -> int:
    """The ``step`` of a metrics line; an unreadable (half-written) line sorts after every step."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62


def _numeric(record: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: v
        for k, v in record.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class TensorBoardBackend:
    """Scalars to TensorBoard event files under ``logdir``; the config as a text summary."""

    def __init__(self, logdir: str | os.PathLike):
        from tensorboardX import SummaryWriter

        self._tb = SummaryWriter(str(logdir), flush_secs=10)

    def log_config(self, config: Mapping[str, Any]) -> None:
        text = json.dumps(config, indent=2, sort_keys=True, default=str)
        self._tb.add_text("config", "```\n" + text + "\n```", global_step=0)

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        for key, value in _numeric(record).items():
            self._tb.add_scalar(key, value, global_step=int(step))

    def close(self) -> None:
        self._tb.close()


@dataclasses.dataclass(frozen=True)
class WandbOptions:
    """Where and how a run logs to Weights & Biases.

    Attributes:
      project, entity: the W&B project and team/user ("" = the W&B default entity).
      mode: ``"online"``, ``"offline"`` (write locally, ``wandb sync`` later) or ``"disabled"``.
      name: the run's display name ("" = the writer's ``run_name``).
      group, tags: W&B grouping (e.g. group = the experiment, tags = method names).
      dir: where W&B writes its files ("" = the workdir).
      objective_panels: also log objective-named keys under the objective (module docstring).
    """

    project: str = "mojax"
    entity: str = ""
    mode: str = "online"
    name: str = ""
    group: str = ""
    tags: tuple[str, ...] = ()
    dir: str = ""
    objective_panels: bool = True

    def __post_init__(self):
        if self.mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode={self.mode!r} is not one of {WANDB_MODES}")
        object.__setattr__(self, "tags", tuple(str(t) for t in self.tags))

    @classmethod
    def from_config(cls, cfg: Any) -> WandbOptions | None:
        """From a mapping / ConfigDict (e.g. ``config.wandb``): None when it is None, empty or has
        ``enabled=False``; other keys are the fields above (an unknown key raises naming it)."""
        if cfg is None:
            return None
        if isinstance(cfg, WandbOptions):
            return cfg
        d = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
        if not d or not d.pop("enabled", True):
            return None
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"wandb.{unknown[0]}: unknown key; allowed: enabled, {sorted(fields)}")
        return cls(**d)


def objective_panel_keys(record: Mapping[str, Any], objectives: Sequence[str]) -> dict[str, Any]:
    """``{"<objective>/<key without that segment>": value}`` for every key of ``record`` with an
    objective name as one of its ``/`` segments (``reward/r_task/mean`` -> ``r_task/reward/mean``)."""
    out = {}
    names = set(objectives)
    for key, value in record.items():
        parts = key.split("/")
        hits = [i for i, p in enumerate(parts) if p in names]
        if len(parts) > 1 and hits:
            i = hits[0]
            out["/".join([parts[i], *parts[:i], *parts[i + 1 :]])] = value
    return out


class WandbBackend:
    """Logs each step's scalars (and the run config) to a W&B run; see the module docstring."""

    def __init__(
        self,
        options: WandbOptions,
        *,
        workdir: str | os.PathLike,
        run_name: str,
        config: Mapping[str, Any] | None = None,
        objectives: Sequence[str] = (),
    ):
        import wandb  # only when enabled: an optional dependency

        self.options = options
        self.objectives = tuple(objectives)
        workdir = pathlib.Path(workdir)
        id_file = workdir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(6)
        wdir = pathlib.Path(options.dir or workdir)
        wdir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=options.project,
            entity=options.entity or None,
            name=options.name or run_name,
            group=options.group or None,
            tags=list(options.tags) or None,
            mode=options.mode,
            dir=str(wdir),
            id=run_id,
            resume="allow",
            config=dict(config or {}),
        )
        if options.mode != "disabled":
            id_file.write_text(run_id + "\n")
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        data = _numeric(record)
        if self.options.objective_panels and self.objectives:
            data.update(objective_panel_keys(data, self.objectives))
        data["step"] = int(step)
        self.run.log(data)

    def close(self) -> None:
        """Finishes the run; when no other W&B run is active, also stops the W&B service, which
        is what waits until everything is written (without it, an offline run file can still be
        incomplete for a moment after ``finish`` returns)."""
        import wandb

        self.run.finish()
        if wandb.run is None:
            wandb.teardown()
