"""mojax entry point.

    python -m mojax.main --config=configs/paretopo.py [--workdir=DIR] [--config.steps=8 ...]
    python -m mojax.main --config=configs/paretopo.py:model=qwen2.5-math-1.5b,task=math,checkpoint=/ckpt

Parses flags, sets up logging (and ``jax.distributed``: auto-detected when ``MOJAX_DISTRIBUTED=1``,
as the launch scripts set, or given by ``--coordinator_address/--num_processes/--process_id``, as
``launch/local_cluster.py`` passes; see ``mojax.distributed`` for what each process does), then hands over to ``mojax.rl.trainer.run(config, workdir)``. The default workdir is
``./workdir/<config name>[_<config arg>]`` (``mojax.infra.workdir``): running the same command again
resumes from its latest checkpoint, and a workdir that holds a different config is refused.

Exit codes: 0 done (or already finished); 2 a bad config, a URL path, a missing or unreadable data
file, or a workdir holding another run (or whose data files changed) or locked by another job (one block on stderr naming the key, its value and the allowed values;
the traceback only with ``--verbosity=1``); 3 a checkpoint that could not be restored (damaged
beyond fallback, an I/O error, or a tree that does not fit: the message says which; nothing was
moved unless damaged); 4 a checkpoint that could not be saved (a full disk: the message names the
workdir and the free space; the previous checkpoint step is intact); 128 + the signal number (143 SIGTERM, 130 SIGINT) when a signal stopped
the run after checkpointing its last finished step (``mojax.infra.preemption``).
"""

import os
import re
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from mojax.config import ConfigError
from mojax.infra import config_renames
from mojax.infra import workdir as workdir_lib

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config file (configs/*.py[:arg]).")
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory (default ./workdir/<config name>[_<config arg>])."
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address",
    None,
    "Multi-process: host:port of process 0's coordinator (with --num_processes and --process_id; "
    "without them, MOJAX_DISTRIBUTED=1 auto-detects SLURM / TPU VMs).",
)
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Multi-process: number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Multi-process: this process's index.")
flags.mark_flags_as_required(["config"])
EXIT_CONFIG = 2
EXIT_CHECKPOINT = 3
EXIT_SAVE = 4


def default_workdir(config_path: str) -> str:
    return workdir_lib.default_workdir(config_path)


def _verbose(argv) -> bool:
    """``--verbosity`` (or ``-v``) >= 1 on the command line (read before flags are parsed)."""
    text = " ".join(argv[1:])
    m = re.findall(r"(?:^|\s)--?(?:verbosity|v)[=\s](-?\d+)", text)
    return bool(m) and int(m[-1]) >= 1


def _error_block(title: str, lines: list[str]) -> str:
    body = "\n".join(f"  {x}" for line in lines for x in line.splitlines() if x.strip())
    return (
        f"mojax: {title}\n{body}\n"
        "(nothing was built or compiled; add --verbosity=1 for the traceback)"
    )


def _chain(e: BaseException) -> list[BaseException]:
    out = [e]
    while (nxt := out[-1].__cause__ or out[-1].__context__) is not None and nxt not in out:
        out.append(nxt)
    return out


def _flag_error_lines(e: BaseException, argv) -> list[str]:
    """What went wrong while parsing ``--config`` / ``--config.*``, without the traceback."""
    chain = _chain(e)
    for err in chain:
        if isinstance(err, ConfigError):
            return [str(err)]
    if isinstance(e, (AttributeError, KeyError)):  # an unknown --config.* key
        text = "\n".join(str(x.args[0]) for x in chain if isinstance(x, KeyError) and x.args)
        key = re.search(r"'([^'\s]+)'", text) or re.search(r"(\S+)", text)
        name = key.group(1) if key else "?"
        hint = re.search(r'Did you mean "([^"]+)"', text)
        flag = next((a for a in argv[1:] if re.search(rf"\.{re.escape(name)}(=|$)", a)), "config")
        moved = config_renames.hint(flag)
        return [
            f"{flag}: no such config key {name!r}"
            + (f"; {moved}" if moved else f"; did you mean {hint.group(1)!r}?" if hint else "")
        ]
    if "Traceback (most recent call last)" in str(e):  # config_flags embeds get_config's traceback
        flag = next((a for a in argv[1:] if a.startswith(("--config=", "-config="))), "--config")
        return [f"{flag}: {chain[-1]}"]
    return [str(e)]


def parse_flags(argv):
    """absl's flag parsing; a bad ``--config`` or ``--config.*`` exits 2 with one block on stderr."""
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, ValueError, TypeError) as e:
        if _verbose(argv):
            raise
        lines = _flag_error_lines(e, argv)
        title = "invalid config" if "config" in "".join(lines) else "invalid command line"
        print(_error_block(title, lines), file=sys.stderr)
        sys.exit(EXIT_CONFIG)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:  # orbax logs every save at INFO; keep stdout readable
        logging.set_verbosity(logging.WARNING)
    explicit = (_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    if any(v is not None for v in explicit) or os.environ.get("MOJAX_DISTRIBUTED") == "1":
        from mojax import distributed

        try:
            distributed.initialize(*explicit)
        except ValueError as e:
            print(_error_block("invalid command line", [str(e)]), file=sys.stderr)
            sys.exit(EXIT_CONFIG)
    from mojax.infra.checkpoint import CheckpointError, CheckpointSaveError
    from mojax.infra.preemption import Preempted
    from mojax.infra.workdir_lock import WorkdirLockedError
    from mojax.rl import trainer
    from mojax.tasks.framework.data import DataFileError

    workdir = _WORKDIR.value or default_workdir(flags.FLAGS["config"].config_filename)
    from mojax.distributed import is_leader

    leader = is_leader()
    if leader:
        print(f"mojax: workdir {os.path.abspath(workdir)}", flush=True)
    verbose = flags.FLAGS.verbosity >= 1
    try:
        summary = trainer.run(_CONFIG.value, workdir)
    except ConfigError as e:
        if verbose:
            raise
        print(_error_block("invalid config", [str(e)]), file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    except (workdir_lib.WorkdirError, WorkdirLockedError) as e:
        if verbose:
            raise
        print(_error_block("workdir refused", [str(e)]), file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    except DataFileError as e:
        if verbose:
            raise
        print(_error_block("invalid data file", [str(e)]), file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    except CheckpointSaveError as e:
        if verbose:
            raise
        print(f"mojax: checkpoint not saved\n{e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_SAVE)
    except CheckpointError as e:
        if verbose:
            raise
        print(f"mojax: checkpoint not restored\n{e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_CHECKPOINT)
    except Preempted as e:
        print(f"mojax: {e}", file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
    keys = ("eval/accuracy", "eval/tool_calls", "reward/scalar/mean")
    shown = {k: round(float(summary[k]), 4) for k in keys if k in summary}
    if leader:
        print(f"mojax: done; workdir={os.path.abspath(workdir)} {shown}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
