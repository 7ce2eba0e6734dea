"""mojax entry point: ``python -m mojax.main --config=configs/paretopo.py [--workdir=...]``."""

import sys


def main() -> int:
    sys.stderr.write(
        "mojax.main: the RL trainer is not implemented yet (tracked by the issue 'The RL loop, the CLI "
        "and the method configs'). The advantage library, Pareto primitives and metrics are usable: "
        "see README.md.\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
