"""A claim page's check that the arms of a seed started from one SFT warm start.

The grid trains a seed's warm start once and every arm's cell restores it (``_grid.ensure_sft``),
so the comparisons pair cells by seed. Arms evaluated alike then have the same held-out accuracy
and tool calls at step 0 (before any update); a warm start trained again (e.g. when a grid goes
on on another machine, whose float rounding differs) shows as two groups of one seed, which the
page names (``warm_start_text``). So can a run-to-run difference of the evaluation itself (e.g. a
tool call's outcome), so the page tells the two apart by the fingerprint of the warm start each
cell restored (``warm_start.txt``, ``_grid.record_warm_start``).
"""

from __future__ import annotations

import collections
import json
import os

from experiments import _report
from experiments._grid import WARM_START_FILE
from mojax.infra.jsonl import read_metrics


def _first_evaluation(rows: list[dict]) -> dict:
    """The ``eval/`` values of a cell's first evaluation (step 0), or ``{}``."""
    for r in rows:
        ev = {k: v for k, v in r.items() if k.startswith("eval/")}
        if ev:
            return ev
    return {}


_START_KEYS = ("eval/accuracy", "eval/tool_calls")  # what the sampled answers do, not a reward


def _evaluated_alike(cell: str) -> str:
    """What else sets a cell's step-0 evaluation: its task and eval settings (``config.json``;
    e.g. VPO's answer sets are scored otherwise). Cells without one count as alike."""
    path = os.path.join(cell, "config.json")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    return json.dumps({k: config.get(k) for k in ("task", "eval")}, sort_keys=True)


def _grouped(cells: dict[str, dict[int, str]]) -> dict[int, list[tuple[list[str], dict, str]]]:
    """Per seed, ``(arms, step-0 values, how they are evaluated)`` groups (``warm_start_groups``)."""
    out: dict[int, list[tuple[list[str], dict, str]]] = {}
    for arm, seeds in cells.items():
        for seed, d in seeds.items():
            first = _first_evaluation(read_metrics(d))
            start = {k: first[k] for k in _START_KEYS if k in first}
            way, groups = _evaluated_alike(d), out.setdefault(seed, [])
            match = [g for g in groups if (g[1], g[2]) == (start, way)]
            if match:
                match[0][0].append(arm)
            else:
                groups.append(([arm], start, way))
    return dict(sorted(out.items()))


def warm_start_groups(cells: dict[str, dict[int, str]]) -> dict[int, list[tuple[list[str], dict]]]:
    """Per seed, the arms grouped by their first held-out evaluation (step 0: the seed's SFT warm
    start as restored, before any update; its accuracy and tool calls), among arms evaluated
    alike. The arms that restore one warm start form one group; two groups of one seed started
    from warm starts that are not the same (e.g. one trained again on another machine, whose
    float rounding differs)."""
    return {s: [(a, v) for a, v, _ in g] for s, g in _grouped(cells).items()}


def warm_start_text(cells: dict[str, dict[int, str]]) -> str:
    """The page's check that the arms of a seed start from one warm start (``warm_start_groups``)."""
    grouped = _grouped(cells)
    # a seed is split when it has more groups than ways of evaluating
    split = {
        s: [(a, v) for a, v, _ in g] for s, g in grouped.items() if len(g) > len({w for *_, w in g})
    }
    arms_per_way = collections.Counter(
        (s, w) for s, g in grouped.items() for a, _, w in g for _ in a
    )
    if max(arms_per_way.values(), default=0) < 2:
        return ""  # no two arms of a seed are evaluated alike: nothing to check
    if not split:
        return (
            "## Warm starts\n\nThe arms of each seed that are evaluated alike (the same `task` and "
            "`eval` settings) have the same held-out accuracy and tool calls at step 0: they "
            "restored one SFT warm start.\n"
        )
    keys = _START_KEYS
    body = []
    for seed, groups in split.items():
        reading = _reading(cells, seed, [a for arms, _ in groups for a in arms])
        for arms, first in groups:
            vals = [f"{first[k]:.5f}" if k in first else "—" for k in keys]
            prints = dict.fromkeys(_fingerprint(cells[a][seed]) or "not recorded" for a in arms)
            row = [f"s{seed}", ", ".join(f"`{a}`" for a in arms), *vals]
            body.append([*row, ", ".join(_short(p) for p in prints), reading])
    head = ["seed", "arms", *(f"{k} at step 0" for k in keys), "warm start", "reading"]
    table = _report.markdown_table(head, body)
    return (
        f"## Warm starts\n\nIn {len(split)} of {len(grouped)} seeds, arms evaluated alike (the "
        "same `task` and `eval` settings) did not have the same held-out accuracy and tool calls "
        "at step 0. The grid trains a seed's warm start once and every arm restores a copy of it; "
        "a cell records the fingerprint of the copy it restored (`warm_start.txt`; copies of one "
        "warm start have one fingerprint, one trained again has another). Where a seed's "
        "fingerprints are equal, its arms restored the same warm start and the step-0 evaluations "
        "differ from run to run (`same warm start`); where they differ, a warm start was trained "
        "again, e.g. on another machine, whose float rounding differs (`another warm start`); "
        "cells archived without one cannot tell the two apart (`not recorded`). The comparisons "
        "still pair the cells by seed.\n\n" + table + "\n"
    )


def _fingerprint(cell: str) -> str:
    """The recorded fingerprint of the warm start a cell restored (``_grid.record_warm_start``),
    or ``""`` for a cell archived without one."""
    path = os.path.join(cell, WARM_START_FILE)
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def _short(fingerprint: str) -> str:
    return (
        fingerprint.removeprefix("sha256:")[:12] if fingerprint != "not recorded" else fingerprint
    )


def _reading(cells: dict[str, dict[int, str]], seed: int, arms: list[str]) -> str:
    """``same warm start`` / ``another warm start`` / ``not recorded``, from the fingerprints the
    given arms' cells of ``seed`` recorded."""
    prints = [_fingerprint(cells[a][seed]) for a in arms]
    if not all(prints):
        return "not recorded"
    return "same warm start" if len(set(prints)) == 1 else "another warm start"
