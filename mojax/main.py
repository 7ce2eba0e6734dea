"""mojax entry point.

    python -m mojax.main --config=configs/paretopo.py [--workdir=DIR] [--config.steps=8 ...]
    python -m mojax.main --config=configs/paretopo.py:model=qwen2.5-math-1.5b,task=math,checkpoint=/ckpt

Parses flags, sets up logging (and ``jax.distributed`` when ``MOJAX_DISTRIBUTED=1``, as the launch
scripts set), then hands over to ``mojax.rl.trainer.run(config, workdir)``. The default workdir is
``./workdir/<config name>``: running the same command again resumes from its latest checkpoint.
"""

import os

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config file (configs/*.py[:arg]).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default ./workdir/<config name>).")
flags.mark_flags_as_required(["config"])


def default_workdir(config_path: str) -> str:
    name = os.path.splitext(os.path.basename(config_path.split(":")[0]))[0]
    return os.path.join("workdir", name)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:  # orbax logs every save at INFO; keep stdout readable
        logging.set_verbosity(logging.WARNING)
    if os.environ.get("MOJAX_DISTRIBUTED") == "1":
        import jax

        jax.distributed.initialize()
    from mojax.rl import trainer

    workdir = _WORKDIR.value or default_workdir(flags.FLAGS["config"].config_filename)
    print(f"mojax: workdir {os.path.abspath(workdir)}", flush=True)
    summary = trainer.run(_CONFIG.value, workdir)
    keys = ("eval/accuracy", "eval/tool_calls", "reward/scalar/mean")
    shown = {k: round(float(summary[k]), 4) for k in keys if k in summary}
    print(f"mojax: done; workdir={os.path.abspath(workdir)} {shown}")


if __name__ == "__main__":
    app.run(main)
