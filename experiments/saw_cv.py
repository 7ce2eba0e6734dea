"""SAW (arXiv:2606.07705): batch coefficient-of-variation weights against static weights, on the
calculator's ``(r_task, r_tool)``.

    python experiments/saw_cv.py                  # full grid -> docs/results/saw_cv.md
    python experiments/saw_cv.py --quick          # saw_grpo and grpo, 1 seed, 2 RL steps, tmp root

The cells are the calculator grid's (``_calculator``): a ParetoPO-claim run of the same seeds and
steps already holds ``grpo``, ``gdpo`` and ``saw_grpo``. Reports each objective's training and
held-out curves, the CV weights ``saw/weight/<objective>`` over training and the final held-out
rewards.
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from experiments import _calculator, _cli, _grid, _report  # noqa: E402

CLAIM = "saw_cv"
NAMES = ["saw_grpo", "grpo", "saw_gdpo", "gdpo"]
PAIRS = (("saw_grpo", "grpo"), ("saw_gdpo", "gdpo"))  # SAW variant, its static-weight base


def balanced(rows: list[dict]) -> float:
    """Unweighted mean of the final held-out objectives, (r_task + r_tool) / 2."""
    return (_report.last("eval/r_task")(rows) + _report.last("eval/r_tool")(rows)) / 2


METRICS = {
    "final r_task (= accuracy)": _report.last("eval/r_task"),
    "final r_tool": _report.last("eval/r_tool"),
    "final tool calls / problem": _report.last("eval/tool_calls"),
    "final (r_task + r_tool) / 2": balanced,
    "train r_task, last 10 steps": _report.mean_tail("reward/r_task/mean", 10),
    "train r_tool, last 10 steps": _report.mean_tail("reward/r_tool/mean", 10),
}


def weight_keys(results) -> list[str]:
    """Every logged ``...saw/weight/<objective>`` and ``...saw/cv/<objective>`` key."""
    keys = {k for runs in results.values() for rows in runs.values() for r in rows for k in r}
    return sorted(k for k in keys if re.search(r"saw/(weight|cv)/", k))


def weight_metrics(results) -> dict:
    """Mean of each CV weight over all RL steps and over the last 10."""
    out = {}
    for k in weight_keys(results):
        if "/weight/" in k:
            out[f"{k} mean"] = _report.mean_tail(k, 10**9)
            out[f"{k} last 10"] = _report.mean_tail(k, 10)
    return out


def verdict(results) -> tuple[str, str]:
    diffs, lines = [], []
    for saw, base in PAIRS:
        if saw in results and base in results:
            d, se = _report.difference(
                _report.values(results, saw, balanced), _report.values(results, base, balanced)
            )
            diffs.append((d, se))
            lines.append(
                f"- `{saw}` − `{base}`: Δ (r_task + r_tool)/2 = {d:+.4f} (2 SE = {2 * se:.4f})"
            )
    word = _report.verdict_word(diffs) if diffs else "inconclusive"
    names = [f"{saw} over {base}" for saw, base in PAIRS if saw in results and base in results]
    lines += _report.screen_lines(names, diffs, "the SAW variant is above its base")
    reason = {
        "reproduced": "each SAW variant beats its static-weight base by more than 2 SE.",
        "not reproduced": "a static-weight base beats its SAW variant by more than 2 SE.",
        "inconclusive": "not every SAW variant beats its base by more than 2 SE, and no base "
        "beats its SAW variant by more than 2 SE.",
    }[word]
    for saw, _ in PAIRS:
        keys = [k for k in weight_keys(results) if "/weight/" in k]
        if saw in results and keys:
            mean = [
                _report.mean_std(_report.values(results, saw, _report.mean_tail(k, 10**9)))[0]
                for k in keys
            ]
            named = ", ".join(f"{k.rsplit('/', 1)[1]} {w:.3f}" for k, w in zip(keys, mean))
            lines.append(f"- `{saw}`'s CV weights, mean over steps and seeds: {named}")
    return word, reason + "\n\n" + "\n".join(lines)


def page(s, grid, methods, results, plots, missing) -> str:
    word, reason = verdict(results)
    wm = weight_metrics(results)
    saw_only = {m: r for m, r in results.items() if m.startswith("saw")}
    cmds = [_grid.shell(_grid.sft_command(grid, seed)) for seed in grid.seeds]
    cmds += [_grid.shell(_grid.cell_command(grid, m, seed)) for seed in grid.seeds for m in methods]
    rel = {k: os.path.relpath(v, s.out) for k, v in plots.items()}
    weights = _report.summary_table(saw_only, wm, digits=3) if wm and saw_only else "(no SAW run)"
    return f"""# SAW: coefficient-of-variation weights vs static weights on the calculator

Claim (SAW, arXiv:2606.07705): weighting each objective by its batch coefficient of variation
(reward level: SAW-GRPO; advantage level: SAW-GDPO) improves on the same estimator with static
weights, by shifting weight to the objective that still varies (is still being learned).

Setting: the calculator grid shared with the ParetoPO claim (tiny Qwen3, one SFT warm start per seed,
{"20" if s.quick else "500"} SFT steps, then **{s.steps} RL steps**), objectives `(r_task, r_tool)`;
static weights w = (0.6, 0.4) for GRPO / GDPO. Grid: {len(methods)} methods × {len(grid.seeds)}
seeds {list(grid.seeds)}. The issue suggests a third, format objective; this grid uses the
calculator's two objectives as they are (no format objective was added). ± is the sample std over
seeds (ddof = 1). {_report.PAIRED_NOTE} The verdict compares the unweighted mean of the final held-out objectives.
{"**Quick mode: a smoke test, not a result.**" if s.quick else ""}

## Verdict: {word}

{reason}

## Final rewards, mean ± std over seeds

{_report.summary_table(results, METRICS, digits=4)}

## CV weights (SAW runs), mean ± std over seeds

{weights}

## Every seed

{_report.per_seed_table(results, METRICS, digits=4)}

## Plots

![per-objective curves]({rel["curves"]})

![CV weights]({rel["weights"]})

## Commands

The grid: `python experiments/{CLAIM}.py --seeds={",".join(map(str, grid.seeds))} --steps={s.steps}`.
Each cell (see `paretopo_front.md` for what `--config.resume=force` is for):

{_report.commands_block(cmds)}

{_grid.missing_block(grid, missing)}
"""


def main(argv):
    del argv
    s = _cli.settings("calculator", steps=40, quick_steps=2, quick_methods=["saw_grpo", "grpo"])
    methods = _grid.select([m for m in _calculator.METHODS if m.name in NAMES], s.methods or NAMES)
    grid = _calculator.grid(s)
    methods, results, missing = _grid.run_claim(CLAIM, grid, methods, s.report_only)
    fig_dir = os.path.join(s.out, CLAIM)
    curve_keys = ["reward/r_task/mean", "reward/r_tool/mean", "eval/r_task", "eval/r_tool"]
    saw_only = {m: r for m, r in results.items() if m.startswith("saw")} or results
    wkeys = weight_keys(results) or ["saw/weight/r_task"]
    plots = {
        "curves": _report.plot_curves(
            results, curve_keys, os.path.join(fig_dir, "curves.png"), "SAW claim", ncols=2
        ),
        "weights": _report.plot_curves(
            saw_only, wkeys, os.path.join(fig_dir, "weights.png"), "SAW CV weights", ncols=2
        ),
    }
    path = _report.write_page(
        os.path.join(s.out, f"{CLAIM}.md"), page(s, grid, methods, results, plots, missing)
    )
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    app.run(main)
