"""ParetoPO (arXiv:2606.16111, Table 1 / Fig. 3) on the calculator: does its (accuracy, r_tool) front
beat the baselines' beyond seed noise?

    python experiments/paretopo_front.py                    # full grid -> docs/results/paretopo_front.md
    python experiments/paretopo_front.py --quick            # 2 methods, 1 seed, 2 RL steps, tmp root
    python experiments/paretopo_front.py --seeds=0,1,2 --methods=paretopo,grpo --steps=40

Per run: final held-out accuracy, tool calls per problem and r_tool, and the hypervolume of the
(accuracy, r_tool) points of its evaluated RL checkpoints (steps > 0) against the fixed reference
``REF`` (``mojax.pareto.hypervolume``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app  # noqa: E402

from experiments import _calculator, _cli, _grid, _report  # noqa: E402
from mojax.pareto.hypervolume import hypervolume  # noqa: E402

CLAIM = "paretopo_front"
REF = (0.5, 0.5)  # fixed (accuracy, r_tool) reference, chosen before any run
OBJ = ("eval/accuracy", "eval/r_tool")
BASELINES = ("grpo", "dr_grpo", "gdpo", "mo_grpo", "saw_grpo")
NAMES = [
    "paretopo",
    *BASELINES,
    "paretopo_wo_dyn",
    "paretopo_wo_rank",
    "paretopo_norm_none",
    "paretopo_norm_center",
]


def rl_points(rows: list[dict]) -> np.ndarray:
    """``[N, 2]`` (accuracy, r_tool) of every evaluated RL checkpoint (step > 0)."""
    pts = [[r[k] for k in OBJ] for r in rows if r.get("step", 0) > 0 and all(k in r for k in OBJ)]
    return np.asarray(pts, float).reshape(-1, 2)


def hv(rows: list[dict]) -> float:
    return hypervolume(rl_points(rows), REF)


METRICS = {
    "accuracy after SFT (step 0)": _report.first("eval/accuracy"),
    "final accuracy": _report.last("eval/accuracy"),
    "final tool calls / problem": _report.last("eval/tool_calls"),
    "final r_tool": _report.last("eval/r_tool"),
    f"HV of RL checkpoints, ref {REF}": hv,
}


def plot_fronts(results, path: str) -> str:
    """Left: every evaluated RL checkpoint of every seed, and each method's pooled non-dominated
    front; right: final points, mean ± std over seeds."""
    from mojax.plots import nondominated_mask

    plt = _report._pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5.2), layout="constrained")
    for i, m in enumerate(results):
        c, mk = f"C{i % 10}", "os^Dv<>P"[i % 8]
        pts = np.concatenate([rl_points(rows) for rows in results[m].values()])
        ax.scatter(pts[:, 0], pts[:, 1], color=c, marker=mk, s=14, alpha=0.35)
        front = pts[nondominated_mask(pts)]
        front = front[np.argsort(front[:, 0])]
        ax.plot(front[:, 0], front[:, 1], color=c, marker=mk, drawstyle="steps-post", label=m)
        fin = np.asarray([rl_points(rows)[-1] for rows in results[m].values()])
        err = fin.std(0, ddof=1) if len(fin) > 1 else np.zeros(2)
        bx.errorbar(*fin.mean(0), xerr=err[0], yerr=err[1], color=c, marker=mk, capsize=3, label=m)
        bx.scatter(fin[:, 0], fin[:, 1], color=c, marker=mk, s=10, alpha=0.4)
    ax.set_title("evaluated RL checkpoints (all seeds) and each method's front")
    bx.set_title("final checkpoint: mean ± std over seeds (small: each seed)")
    for a in (ax, bx):
        a.set_xlabel("held-out accuracy")
        a.set_ylabel("held-out r_tool")
        a.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def verdict(results) -> tuple[str, str]:
    """The word and its reason: ParetoPO's HV against each baseline's (2 SE rule, _report)."""
    if "paretopo" not in results:
        return "inconclusive", "ParetoPO was not in this grid."
    base = [b for b in BASELINES if b in results]
    diffs, lines = [], []
    mine = _report.values(results, "paretopo", hv)
    for b in base:
        d, se = _report.difference(mine, _report.values(results, b, hv))
        diffs.append((d, se))
        gaps = []
        for key, label in ((OBJ[0], "accuracy"), (OBJ[1], "r_tool")):
            f = _report.last(key)
            dk, sek = _report.difference(
                _report.values(results, "paretopo", f), _report.values(results, b, f)
            )
            gaps.append((dk, f"Δ final {label} = {dk:+.4f} (2 SE = {2 * sek:.4f})"))
        dominates = all(dk >= 0 for dk, _ in gaps) and any(dk > 0 for dk, _ in gaps)
        lines.append(
            f"- vs `{b}`: ΔHV = {d:+.4f} (2 SE = {2 * se:.4f}); {gaps[0][1]}; {gaps[1][1]}; "
            f"ParetoPO's mean final point {'dominates' if dominates else 'does not dominate'} "
            "the baseline's."
        )
    word = _report.verdict_word(diffs) if base else "inconclusive"
    lines += _report.screen_lines(base, diffs, "ParetoPO's HV is above these baselines'")
    reason = {
        "reproduced": "ParetoPO's hypervolume exceeds every baseline's by more than 2 SE.",
        "not reproduced": "a baseline's hypervolume exceeds ParetoPO's by more than 2 SE.",
        "inconclusive": "ParetoPO's hypervolume is not above every baseline's by more than 2 SE, "
        "and no baseline's is above ParetoPO's by more than 2 SE.",
    }[word]
    return word, reason + "\n\n" + "\n".join(lines)


ABLATIONS = {
    "paretopo_wo_dyn": "w/o dynamic weighting (`paretopo.dynamic_weighting=false`: r_pareto = 1)",
    "paretopo_wo_rank": "w/o Pareto ranking (`paretopo.pareto_ranking=false`: Stage 1 only)",
    "paretopo_norm_none": "Stage 2 `normalize=none` (the paper's Theorem 3.5 form)",
    "paretopo_norm_center": "Stage 2 `normalize=center`",
}


def ablations(results) -> str:
    """Each ablation against full ParetoPO (Stage 2 ``normalize=zscore``), paired by seed."""
    if "paretopo" not in results:
        return "(ParetoPO was not in this grid.)"
    lines = []
    for name, what in ABLATIONS.items():
        if name not in results:
            continue
        d, se = _report.difference(
            _report.values(results, name, hv), _report.values(results, "paretopo", hv)
        )
        f = _report.last("eval/accuracy")
        da, sea = _report.difference(
            _report.values(results, name, f), _report.values(results, "paretopo", f)
        )
        evals = [
            [{k: v for k, v in r.items() if k.startswith("eval/")} for r in results[m][s]]
            for m in (name, "paretopo")
            for s in results[m]
        ]
        n = len(results[name])
        same = all(a == b for a, b in zip(evals[:n], evals[n:]))
        lines.append(
            f"- `{name}`, {what}: ΔHV = {d:+.4f} (2 SE = {2 * se:.4f}), Δ final accuracy = "
            f"{da:+.4f} (2 SE = {2 * sea:.4f})"
            + ("; **every evaluation of every seed is identical to ParetoPO's**" if same else "")
        )
    return "\n".join(lines) or "(no ablation in this grid)"


def stage1_notes(grid: _grid.Grid, results) -> str:
    """What ParetoPO's Stage 1 did: its archive hypervolume and r_pareto, and mojax's own warning
    when r_pareto cannot act (read from the cells' logs)."""
    if "paretopo" not in results:
        return ""
    hvs = [_report.series(rows, "pareto/hv")[1] for rows in results["paretopo"].values()]
    rp = [_report.series(rows, "pareto/r_pareto")[1] for rows in results["paretopo"].values()]
    out = [
        f"- Stage-1 archive hypervolume `pareto/hv`: max over steps and seeds "
        f"{max((max(h) for h in hvs if h), default=float('nan')):.4f}; last `pareto/r_pareto` "
        f"per seed: {[round(r[-1], 4) for r in rp if r]}."
    ]
    log = os.path.join(_grid.cell_dir(grid, "paretopo", grid.seeds[0]), "run.log")
    text = open(log, encoding="utf-8").read() if os.path.isfile(log) else ""
    warn = [x for x in text.splitlines() if "r_pareto is a uniform positive scale" in x]
    if warn:
        msg = warn[0].split("] ", 1)[-1]
        out.append(f"- mojax warns in the seed-{grid.seeds[0]} ParetoPO cell's log: `{msg}`")
    return "\n".join(out)


def page(
    s: _cli.Settings, grid: _grid.Grid, methods, results, plots: dict[str, str], missing
) -> str:
    word, reason = verdict(results)
    cmds = [_grid.shell(_grid.sft_command(grid, seed)) for seed in grid.seeds]
    cmds += [_grid.shell(_grid.cell_command(grid, m, seed)) for seed in grid.seeds for m in methods]
    rel = {k: os.path.relpath(v, s.out) for k, v in plots.items()}
    return f"""# ParetoPO: hypervolume of the (accuracy, r_tool) front on the calculator

Claim (ParetoPO, arXiv:2606.16111, Table 1 / Fig. 3): ParetoPO's front dominates static
scalarisation and the multi-objective baselines, and both its parts (dynamic weighting, Pareto
ranking) matter.

Setting: the embedded default (tiny Qwen3, calculator tool task, `(r_task, r_tool)`), one shared SFT
warm start per seed ({"20" if s.quick else "500"} steps, `configs/sft.py`), then
**{s.steps} RL steps** per cell. Grid: {len(methods)} methods × {len(grid.seeds)} seeds
{list(grid.seeds)}. Held-out evaluation: {"16" if s.quick else "128"} problems × 4 samples at
temperature 1 every {"1" if s.quick else "10"} steps. Hypervolume: `mojax.pareto.hypervolume` of
the (accuracy, r_tool) points of each run's evaluated RL checkpoints (steps > 0) against the fixed
reference {REF}. ± is the sample std over seeds (ddof = 1). {_report.PAIRED_NOTE}
{"**Quick mode: a smoke test, not a result.**" if s.quick else ""}

## Verdict: {word}

{reason}

## Ablations (minus full ParetoPO, paired by seed)

{ablations(results)}

## ParetoPO's Stage 1 in these runs

{stage1_notes(grid, results)}

## Mean ± std over seeds

{_report.summary_table(results, METRICS, digits=4)}

## Every seed

{_report.per_seed_table(results, METRICS, digits=4)}

## Plots

![fronts]({rel["front"]})

![curves]({rel["curves"]})

## Commands

Each cell's own command (run from the repository root; `--config.resume=force` only lets the
copied SFT checkpoint sit in a workdir without a `config.json`; in an empty workdir the cell trains
the same warm start itself). The grid: `python experiments/{CLAIM}.py
--seeds={",".join(map(str, grid.seeds))} --steps={s.steps}`.

{_report.commands_block(cmds)}

{_grid.missing_block(grid, missing)}
"""


def main(argv):
    del argv
    s = _cli.settings("calculator", steps=40, quick_steps=2, quick_methods=["paretopo", "grpo"])
    methods = _grid.select([m for m in _calculator.METHODS if m.name in NAMES], s.methods or NAMES)
    grid = _calculator.grid(s)
    methods, results, missing = _grid.run_claim(CLAIM, grid, methods, s.report_only)
    fig_dir = os.path.join(s.out, CLAIM)
    os.makedirs(fig_dir, exist_ok=True)
    plots = {
        "front": plot_fronts(results, os.path.join(fig_dir, "fronts.png")),
        "curves": _report.plot_curves(
            results,
            ["eval/accuracy", "eval/tool_calls", "eval/r_tool", "reward/r_task/mean"],
            os.path.join(fig_dir, "curves.png"),
            "ParetoPO claim, calculator",
            ncols=2,
        ),
    }
    path = _report.write_page(
        os.path.join(s.out, f"{CLAIM}.md"), page(s, grid, methods, results, plots, missing)
    )
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    app.run(main)
