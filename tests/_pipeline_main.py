"""``python -m mojax.main`` with the asynchronous pipeline (``mojax.rl.async_loop.Pipeline``) used
for every run, ``rollout.staleness = 0`` on the learner's mesh included, where the loop would take
``mojax.rl.step.rl_step``: ``tests/system/test_golden_equivalence.py`` compares the two bitwise."""

import sys

from absl import app

from mojax import main as main_lib
from mojax.rl import async_loop, trainer

if __name__ == "__main__":
    trainer.make_step_fn = async_loop.Pipeline.build
    sys.argv[0] = main_lib.__file__
    app.run(main_lib.main, flags_parser=main_lib.parse_flags)
