"""The software environment a run ran in: Python, the platform and the versions of the packages
whose numerics or data a run's results depend on.

Recorded in each run's ``config.json`` under ``environment`` (``mojax.infra.workdir.prepare``; not
compared on resume), so a result can be traced to the environment that produced it; the
repository's ``constraints.txt`` pins the environment of its committed results
(``pip install -c constraints.txt -e .``).
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

# the distributions whose versions change a run's numbers or data (numerics, tokenizers, data)
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "numpy",
    "scipy",
    "ml-collections",
    "sentencepiece",
    "transformers",
    "tokenizers",
    "moocore",
    "math-verify",
    "bm25s",
    "pyarrow",
    "mojax",
)


def snapshot() -> dict:
    """``{"python", "platform", "packages": {name: version or None}}``."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions,
    }
