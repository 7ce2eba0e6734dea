"""Flags every claim script shares, and the resolved run settings of full vs ``--quick`` mode.

    python experiments/<claim>.py [--quick] [--seeds=0,1,2] [--methods=a,b] [--root=DIR] [--out=DIR]

``--quick`` is the test mode: 2 methods, 1 seed, a few SFT and RL steps, a small held-out split,
written under a temporary root (pages to ``<root>/results`` unless ``--out`` is given).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from absl import flags

QUICK = flags.DEFINE_bool("quick", False, "A few steps, 1 seed, 2 methods, under a tmp root.")
SEEDS = flags.DEFINE_list("seeds", None, "Seeds (default 0,1,2; --quick: 0).")
METHODS = flags.DEFINE_list("methods", None, "Methods to run (default: the claim's list).")
ROOT = flags.DEFINE_string("root", None, "Grid root (default /tmp/mojax_experiments/<group>).")
OUT = flags.DEFINE_string("out", None, "Results folder (default docs/results; --quick: root).")
REPORT_ONLY = flags.DEFINE_bool(
    "report_only", False, "Run nothing: write the page from the methods whose cells are all done."
)
STEPS = flags.DEFINE_integer("steps", None, "RL steps per cell (default: the claim's).")


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    seeds: tuple[int, ...]
    methods: list[str] | None
    root: str
    out: str
    steps: int
    report_only: bool


def settings(group: str, steps: int, quick_steps: int, quick_methods: list[str]) -> Settings:
    """Resolves the flags; ``group`` names the root shared by claims with the same cells."""
    quick = QUICK.value
    seeds = tuple(int(s) for s in (SEEDS.value or (["0"] if quick else ["0", "1", "2"])))
    root = ROOT.value or (
        tempfile.mkdtemp(prefix=f"mojax_quick_{group}_")
        if quick
        else os.path.join("/tmp/mojax_experiments", group)
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = OUT.value or (
        os.path.join(root, "results") if quick else os.path.join(repo, "docs/results")
    )
    return Settings(
        quick=quick,
        seeds=seeds,
        methods=METHODS.value or (quick_methods if quick else None),
        root=os.path.abspath(root),
        out=os.path.abspath(out),
        steps=STEPS.value or (quick_steps if quick else steps),
        report_only=REPORT_ONLY.value,
    )
