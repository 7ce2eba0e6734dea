"""A paper's claim as an experiment: pre-registered measures, arms at matched budgets, a grid of seeds,
raw data in the repository and a page generated from it.

A claim script (``experiments/<claim>.py``) declares a :class:`Claim` and calls :func:`main`:

    python experiments/<claim>.py --prereg          # write the page's pre-registration (before any run)
    python experiments/<claim>.py                   # run the grid (resumes), archive, write the page
    python experiments/<claim>.py --report_only     # rewrite the page from the archived cells

Flow: the page's first section (hypotheses, measures, arms, seeds, budgets, the decision rule) is
written and committed before the grid runs (``--prereg``); the grid runs every (arm, seed) cell
through the CLI (``experiments/_grid.py``); each finished cell's ``config.json``, ``metrics.jsonl``
and the held-out samples of its first and last evaluation (``eval/<step>.jsonl``, gzipped) are
copied into ``docs/results/<claim>/cells/<arm>/s<seed>/``; the page is generated from those files
alone (:func:`report`), so anyone can re-derive it.

Statistics (``mojax.stats``, ``docs/statistics.md``): each comparison is paired by
seed (cell ``s`` of both arms shares seed ``s``'s warm start; the page's "Warm starts" section
checks that their step-0 evaluations agree), with a t test (two-sided; a
comparison declared with a ``margin`` is a one-sided non-inferiority test, "not worse by more than
``margin``"); eval measures are also paired by problem within each seed, with a two-stage bootstrap
interval (seeds, then problems). Holm's correction runs over every comparison of the page (one
whose differences are all 0 is left out, a duplicate counted once: ``mojax.stats.holm_family``); a
comparison's interval is shown at the level Holm used for it, so it excludes the null exactly when
the verdict rejects. A measure is **reproduced** only when the corrected test rejects in the
paper's direction. Mechanism and outcome verdicts are separate lines.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
from collections.abc import Callable, Sequence

import numpy as np

from experiments import _figures, _grid, _report, _tokens, _warm_starts
from mojax import compare as cmp
from mojax import stats
from mojax.infra.jsonl import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALPHA = 0.05


@dataclasses.dataclass(frozen=True)
class Measure:
    """A pre-registered measure: ``fn(metrics rows) -> float`` per cell, its kind (``mechanism`` or
    ``outcome``), the paper's direction, and (eval measures) the per-sample value the by-problem
    bootstrap reads (``success`` or an objective's name)."""

    name: str
    kind: str
    fn: Callable[[list[dict]], float]
    direction: str = "higher"
    sample: str | None = None


@dataclasses.dataclass(frozen=True)
class Comparison:
    """``arm`` − ``baseline`` on ``measure``; with a ``margin`` (> 0, the measure's units) the
    hypothesis is "not worse by more than ``margin``" in the measure's direction, a one-sided
    non-inferiority test; without, "better", a two-sided test read from the sign. ``kind``
    overrides the measure's kind for this comparison (``"ablation"``: tested in the page's Holm
    family, in neither verdict)."""

    arm: str
    baseline: str
    measure: str
    margin: float | None = None
    kind: str | None = None


@dataclasses.dataclass(frozen=True)
class Claim:
    """Everything a claim's page says before and after its grid (see the module docstring)."""

    name: str
    title: str
    question: str
    prereg: str  # hypotheses, setting and decision notes, written before any run
    arms: Sequence[_grid.Method]
    measures: Sequence[Measure]
    comparisons: Sequence[Comparison]
    grid: _grid.Grid
    out: str = os.path.join(REPO, "docs", "results")  # the page and the archived cells
    curves: Sequence[str] = ()  # metrics keys plotted per arm over steps (``_figures``)
    front: tuple[str, str] | None = None  # two eval keys: the held-out front per arm
    earlier: str = (
        ""  # the claim's earlier grids and their results (a page section, not the prereg)
    )


def cells_dir(claim: Claim) -> str:
    return os.path.join(claim.out, claim.name, "cells")


def page_path(claim: Claim) -> str:
    return os.path.join(claim.out, f"{claim.name}.md")


# ------------------------------------------------------------------------------------ archive
def archive_cell(workdir: str, dest: str) -> None:
    """Copies a finished cell's config, metrics, command, commit, warm start fingerprint and first /
    last held-out samples to ``dest``."""
    os.makedirs(os.path.join(dest, "eval"), exist_ok=True)
    for name in ("config.json", "metrics.jsonl", "cmd.txt", "commit.txt", _grid.WARM_START_FILE):
        if os.path.isfile(os.path.join(workdir, name)):
            shutil.copyfile(os.path.join(workdir, name), os.path.join(dest, name))
    steps = sorted(
        int(f[:-6]) for f in os.listdir(os.path.join(workdir, "eval")) if f[:-6].isdigit()
    )
    for step in {steps[0], steps[-1]} if steps else ():
        src = os.path.join(workdir, "eval", f"{step}.jsonl")
        with (
            open(src, "rb") as f,
            gzip.open(os.path.join(dest, "eval", f"{step}.jsonl.gz"), "wb") as g,
        ):
            g.write(f.read())


def archived(claim: Claim) -> dict[str, dict[int, str]]:
    """``{arm: {seed: archived cell dir}}`` of the cells in the repository."""
    out: dict[str, dict[int, str]] = {}
    for m in claim.arms:
        root = os.path.join(cells_dir(claim), m.name)
        if not os.path.isdir(root):
            continue
        for d in sorted(os.listdir(root)):
            if d.startswith("s") and os.path.isfile(os.path.join(root, d, "metrics.jsonl")):
                out.setdefault(m.name, {})[int(d[1:])] = os.path.join(root, d)
    return out


def setting_check(
    claim: Claim,
    arm: str,
    label: str,
    fn: Callable[[list[dict]], float],
    passes: Callable[[float], bool],
    failed: str,
) -> str:
    """A pre-registered setting check (said before any cell ran): ``fn`` of each archived cell of
    ``arm``, per seed; the seeds where ``passes`` is false are named, with ``failed`` saying what
    their cells cannot test. Empty before ``arm`` has cells."""
    cells = archived(claim).get(arm, {})
    if not cells:
        return ""
    values = {s: fn(read_metrics(d)) for s, d in sorted(cells.items())}
    bad = [s for s, v in values.items() if not passes(v)]
    per = ", ".join(f"s{s}: {v:.3f}" for s, v in values.items())
    said = (
        f"not met in seed{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}: "
        f"{'their' if len(bad) > 1 else 'its'} cells {failed}"
        if bad
        else "met in every seed"
    )
    return f"**Setting check (`{arm}`, {label}):** {said} ({per}).\n"


def problem_means(cell: str, value: str) -> dict[str, float]:
    """Per problem, the mean of ``value`` over the samples of the cell's last archived eval."""
    files = [f for f in os.listdir(os.path.join(cell, "eval")) if f.endswith(".jsonl.gz")]
    last = max(files, key=lambda f: int(f.split(".")[0]))
    with gzip.open(os.path.join(cell, "eval", last), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    acc: dict[str, list[float]] = {}
    for r in rows:
        v = float(r["success"]) if value == "success" else float(r["rewards"][value])
        acc.setdefault(r["problem"], []).append(v)
    return {k: float(np.mean(v)) for k, v in acc.items()}


# ------------------------------------------------------------------------------------ statistics
def comparisons(claim: Claim, cells: dict[str, dict[int, str]]) -> list[dict]:
    """Every comparison of the claim with its by-seed and by-problem statistics, Holm-corrected.
    A comparison needs >= 2 seeds run by both arms (a paired t interval); one with fewer (``--quick``
    runs 1 seed) is left out, and the page says so (``too_few_seeds``)."""
    measures = {m.name: m for m in claim.measures}
    rows, hyps = [], []
    for c in claim.comparisons:
        if c.arm not in cells or c.baseline not in cells:
            continue
        if len(set(cells[c.arm]) & set(cells[c.baseline])) < 2:
            continue
        m = measures[c.measure]
        a = {s: m.fn(read_metrics(d)) for s, d in cells[c.arm].items()}
        b = {s: m.fn(read_metrics(d)) for s, d in cells[c.baseline].items()}
        diffs = cmp.by_seed(a, b)
        row = {"cmp": c, "measure": m, "diffs": diffs, "mean": float(np.mean(diffs))}
        name = f"`{c.arm}` − `{c.baseline}`: {c.measure}"
        hyps.append(stats.Hypothesis(name, tuple(diffs), m.direction, c.margin))
        if m.sample:
            per = [
                {s: problem_means(d, m.sample) for s, d in cells[k].items()}
                for k in (c.arm, c.baseline)
            ]
            per_seed = cmp.by_problem_per_seed(*per)
            row["by_problem"] = stats.two_stage_bootstrap(per_seed, 1 - ALPHA)
        rows.append(row)
    for row, o in zip(rows, stats.holm_family(hyps, ALPHA)):
        row.update(by_seed=o.test, ci=o.ci, level=o.level, p_holm=o.p_holm)
        row.update(verdict=o.verdict, status=o.status, twin=o.twin)
    return rows


def kind_of(row: dict) -> str:
    """A comparison row's kind: the comparison's own, else its measure's."""
    return row["cmp"].kind or row["measure"].kind


def kind_verdict(rows: list[dict], kind: str) -> str:
    """The page's verdict for ``mechanism`` or ``outcome``: shown when every comparison of that kind
    is reproduced, contradicted when any goes the other way, else not shown."""
    words = [r["verdict"] for r in rows if kind_of(r) == kind]
    if not words:
        return "no comparison"
    if all(w == "reproduced" for w in words):
        return "shown"
    if any(w == "opposite" for w in words):
        return "contradicted (a corrected interval excludes 0 against the paper)"
    return "not shown (inconclusive)"


# ------------------------------------------------------------------------------------ the page
def prereg_text(claim: Claim) -> str:
    """The pre-registration section: fixed by the claim's declaration alone."""
    measures = _report.markdown_table(
        ["measure", "kind", "paper's direction", "paired by problem"],
        [[m.name, m.kind, m.direction, m.sample or "—"] for m in claim.measures],
    )
    arms = _report.markdown_table(
        ["arm", "config", "overrides"],
        [
            [f"`{m.name}`", f"`{m.config}`", " ".join(f"`{o}`" for o in m.overrides) or "—"]
            for m in claim.arms
        ],
    )
    comps = "\n".join(
        f"- `{c.arm}` − `{c.baseline}`: {c.measure}"
        + (f" (not worse by more than {c.margin:g})" if c.margin is not None else "")
        + (f" [{c.kind}]" if c.kind else "")
        for c in claim.comparisons
    )
    ni = (  # said only by a claim with a "not worse" hypothesis: older pages' text is unchanged
        " A comparison with a margin is a non-inferiority test: H0 Δ ≤ −margin against Δ > −margin "
        "in the paper's direction, one-sided, in the same Holm family; *reproduced* when it "
        "rejects (its one-sided interval, at the Holm level, excludes −margin)."
        if any(c.margin is not None for c in claim.comparisons)
        else ""
    )
    shared = " ".join(f"`{f}`" for f in (*claim.grid.common, *claim.grid.rl)) or "—"
    return (
        f"## Pre-registration\n\n{claim.prereg.strip()}\n\n**Measures**\n\n{measures}\n\n"
        f"**Arms** (every cell also gets {shared}; seeds {list(claim.grid.seeds)}; one SFT warm start "
        f"per seed shared by every arm)\n\n{arms}\n\n**Comparisons** (arm − baseline)\n\n{comps}\n\n"
        "**Decision rule.** Paired by seed: a t interval of the mean difference; Holm's correction "
        f"over the page's {len(claim.comparisons)} comparisons at α = {ALPHA}; a comparison is "
        "*reproduced* only when its corrected test rejects in the paper's direction (its interval, "
        "at the Holm step-down level, excludes 0 on that side). Eval measures are also paired by "
        "problem (a bootstrap over problems; reported, not used for the verdict). The mechanism "
        "verdict is *shown* when every mechanism comparison is reproduced; the outcome verdict "
        f"likewise.{ni}\n"
    )


def too_few_seeds(claim: Claim, cells: dict[str, dict[int, str]]) -> str:
    """The page's line where some comparison has fewer than 2 seeds run by both of its arms."""
    few = [
        f"`{c.arm}` − `{c.baseline}`"
        for c in claim.comparisons
        if c.arm in cells
        and c.baseline in cells
        and len(set(cells[c.arm]) & set(cells[c.baseline])) < 2
    ]
    if not few:
        return ""
    return (
        f"Not compared ({', '.join(sorted(set(few)))}): a paired comparison needs >= 2 seeds run by "
        "both arms.\n"
    )


def results_text(claim: Claim, cells: dict[str, dict[int, str]]) -> str:
    rows = comparisons(claim, cells)
    summary = {m.name: m.fn for m in claim.measures}
    summary["rollouts (total)"] = rollouts_total
    results = {arm: {s: read_metrics(d) for s, d in seeds.items()} for arm, seeds in cells.items()}
    table = _report.summary_table(results, summary)
    measures = {m.name: m for m in claim.measures}
    lines = [
        f"## Verdict\n\n- **Mechanism:** {kind_verdict(rows, 'mechanism')}\n"
        f"- **Outcome:** {kind_verdict(rows, 'outcome')}\n",
        f"## Earlier grids of this claim\n\n{claim.earlier.strip()}\n" if claim.earlier else "",
        f"## Results (mean ± std over seeds)\n\n{table}\n",
        "## Comparisons\n\n" + comparisons_table(rows) + "\n" + too_few_seeds(claim, cells),
        identical_text(cells),
        _warm_starts.warm_start_text(cells),
        _tokens.budget_text(results, claim.comparisons, measures),
        _figures.figures_text(results, claim.out, claim.name, claim.curves, claim.front),
        "## Per seed\n\n" + _report.per_seed_table(results, summary) + "\n",
    ]
    return "\n".join(line for line in lines if line)


def eval_records(rows: list[dict]) -> list[dict]:
    """A cell's held-out evaluations: per evaluated step, its ``eval/`` values."""
    out = [{k: v for k, v in r.items() if k.startswith("eval/")} for r in rows]
    return [e for e in out if e]


def identical_arms(cells: dict[str, dict[int, str]]) -> list[tuple[str, str]]:
    """Pairs of arms whose held-out evaluations are equal, value for value, in every common seed
    (e.g. an ablation whose removed part never acts in this setting). Training metrics may still
    differ by round-off; what the page compares is the evaluations."""
    evals = {a: {s: eval_records(read_metrics(d)) for s, d in c.items()} for a, c in cells.items()}
    names, pairs = list(evals), []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            seeds = sorted(set(evals[a]) & set(evals[b]))
            if seeds and all(evals[a][s] and evals[a][s] == evals[b][s] for s in seeds):
                pairs.append((a, b))
    return pairs


def identical_text(cells: dict[str, dict[int, str]]) -> str:
    pairs = identical_arms(cells)
    if not pairs:
        return ""
    lines = [
        f"- `{a}` and `{b}`: every held-out evaluation of every seed is identical; in this "
        "setting the part that separates them changes nothing."
        for a, b in pairs
    ]
    return "## Identical arms\n\n" + "\n".join(lines) + "\n"


def comparisons_table(rows: list[dict]) -> str:
    body = []
    for r in rows:
        c, s, ci, bp = r["cmp"], r["by_seed"], r["ci"], r.get("by_problem")
        prob = f"{bp.mean:+.4f} [{bp.low:+.4f}, {bp.high:+.4f}] ({bp.n})" if bp else "—"
        word = r["verdict"] + (f" (= {r['twin']})" if r["twin"] else "")
        stat = ["—", "—", "—"]
        if ci is not None:
            stat = [f"[{ci.low:+.4f}, {ci.high:+.4f}] ({r['level']:.4f})", f"{s.p:.3g}",
                    f"{r['p_holm']:.3g}"]  # fmt: skip
        body.append([
            f"`{c.arm}` − `{c.baseline}`", c.measure, kind_of(r), str(len(r["diffs"])),
            f"{r['mean']:+.4f}", *stat, word, prob,
        ])  # fmt: skip
    head = ["comparison", "measure", "kind", "seeds", "Δ", "Holm-level CI", "p", "p (Holm)"]
    table = _report.markdown_table(
        head + ["verdict", "by problem: Δ [95% two-stage bootstrap] (n)"], body
    )
    m = sum(r["status"] == "tested" for r in rows)
    if m == len(rows):
        return table
    return table + (
        f"\nHolm's family holds {m} of these {len(rows)} comparisons: one whose differences are all 0 "
        "is not tested (*identical*), a duplicate (the same differences as another) is counted once "
        "and shows its twin's test.\n"
    )


def rollouts_total(rows: list[dict]) -> float:
    """Rollouts generated over the run (``rollout/rollouts`` summed; refills included)."""
    return float(sum(r.get("rollout/rollouts", 0.0) for r in rows))


def report(claim: Claim, extra: str = "") -> str:
    """Writes the page from the archived cells; returns its path."""
    cells = archived(claim)
    text = f"# {claim.title}\n\n{claim.question}\n\n{committed_prereg(claim)}\n"
    if cells:
        text += results_text(claim, cells) + "\n" + extra
    else:
        text += "## Verdict: not run yet\n"
    missing = [m for m in claim.arms if len(cells.get(m.name, {})) < len(claim.grid.seeds)]
    text += "\n## Commands\n\n" + _report.commands_block(
        [f"python experiments/{claim.name}.py  # the grid, then this page"]
        + [
            _grid.shell(_grid.cell_command(claim.grid, m, s))
            for m in claim.arms[:1]
            for s in claim.grid.seeds[:1]
        ]
    )
    if missing:
        text += "\n\n" + _grid.missing_block(claim.grid, missing)
    return _report.write_page(page_path(claim), text)


def committed_prereg(claim: Claim) -> str:
    """The page's pre-registration section as committed (a committed pre-registration is never
    edited: the page keeps it byte for byte, from ``## Pre-registration`` up to its results), or
    :func:`prereg_text` when the page has none yet. A declaration that now differs from it is
    reported on stdout, not written."""
    fresh = prereg_text(claim)
    if not os.path.isfile(page_path(claim)):
        return fresh
    text = open(page_path(claim), encoding="utf-8").read()
    if "## Pre-registration" not in text:
        return fresh
    body = "## Pre-registration" + text.split("## Pre-registration", 1)[1]
    for end in ("\n## Verdict", "\n## Commands"):
        body = body.split(end, 1)[0]
    kept = body.rstrip("\n") + "\n"
    if kept != fresh:
        print(
            f"{page_path(claim)}: keeping its committed pre-registration (the declaration differs)"
        )
    return kept


def run(claim: Claim, methods: Sequence[_grid.Method]) -> None:
    """Runs the grid's cells (each resumes or is skipped when done) and archives each."""
    for m in methods:
        if m.warm_start:
            for seed in claim.grid.seeds:
                _grid.ensure_sft(claim.grid, seed)
        for seed in claim.grid.seeds:
            _grid.run_cell(claim.grid, m, seed)
            archive_cell(
                _grid.cell_dir(claim.grid, m.name, seed),
                os.path.join(cells_dir(claim), m.name, f"s{seed}"),
            )


# ------------------------------------------------------------------------------------ CLI
def cli(
    claim_fn: Callable[[tuple[int, ...], str, bool], Claim],
    group: str,
    extra: Callable[[Claim], str] | None = None,
) -> Callable:
    """``main(argv)`` of a claim script: ``claim_fn(seeds, root, quick)`` declares the claim;
    ``extra(claim)`` adds claim-specific text after the results."""
    from absl import flags

    from experiments import _cli

    prereg = flags.DEFINE_bool("prereg", False, "Write the page's pre-registration only.")

    def main(argv):
        del argv
        quick = _cli.QUICK.value
        seeds = tuple(
            int(s) for s in (_cli.SEEDS.value or (["0"] if quick else map(str, range(8))))
        )
        root = os.path.abspath(_cli.ROOT.value or os.path.join("/tmp/mojax_experiments", group))
        claim = claim_fn(seeds, root, quick)
        out = _cli.OUT.value or (os.path.join(root, "results") if quick else None)
        if out:
            claim = dataclasses.replace(claim, out=os.path.abspath(out))
        if prereg.value:
            path = _report.write_page(
                page_path(claim), f"# {claim.title}\n\n{claim.question}\n\n{prereg_text(claim)}"
            )
            print(f"wrote {path}")
            return
        if not _cli.REPORT_ONLY.value:
            for _ in range(2):  # a second pass runs arms declared from the first pass's cells
                claim = dataclasses.replace(claim_fn(seeds, root, quick), out=claim.out)
                names = _cli.METHODS.value
                run(claim, [m for m in claim.arms if not names or m.name in names])
        print(f"wrote {report(claim, extra(claim) if extra else '')}")

    return main
