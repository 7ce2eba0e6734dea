"""SAW (arXiv:2606.07705): batch coefficient-of-variation weights against static weights, on the
calculator with a third, slowly learned objective: ``(r_task, r_tool, r_format)``.

    python experiments/saw_cv.py                  # full grid -> docs/results/saw_cv.md
    python experiments/saw_cv.py --quick          # saw_grpo and grpo, 1 seed, 2 RL steps, tmp root
    python experiments/saw_cv.py --think=0.3 --methods=saw_grpo,grpo   # ablation -> saw_cv_think0.3.md

SAW's setting (Sec. 3.1, Fig. 3) is asynchronous learning: one objective saturates while another
(ToolRL's format reward) is still near zero. Here ``r_task`` and ``r_tool`` start near 0.9 after the
warm start, and ``r_format`` (a ``<think>`` plan first, ``calculator.think_format``) is shown in only
``--think`` (0.1) of the SFT demonstrations, so it starts low and is learned during RL. Every
method runs with the config argument ``think=<--think>`` (``mojax.defaults._apply_think``): one
SFT warm start per seed under its own root (``calculator_think``; the two-objective calculator
grid's cells are not reused). Static weights ``w = (0.6, 0.4, 0.4)`` for GRPO / GDPO. Reports each objective's training
and held-out curves, the CV weights ``saw/weight/<objective>`` over training and the final rewards.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from experiments import _calculator, _cli, _grid, _report  # noqa: E402
from mojax.logbook import read_transcripts  # noqa: E402
from mojax.tasks.calculator import CalculatorTask, think_format  # noqa: E402

CALC = CalculatorTask()  # its tool protocol: the first call's expression

THINK = flags.DEFINE_float(
    "think",
    0.1,
    "Fraction of SFT demonstrations that open with a <think> plan (0.1: the claim's "
    "page; any other value writes saw_cv_think<value>.md under its own root, an ablation).",
)
OBJECTIVES = ("r_task", "r_tool", "r_format")
CLAIM = "saw_cv"


def claim(think: float) -> str:
    """The page (and grid root suffix) of a ``think`` rate: ``saw_cv`` at the claim's 0.1."""
    return CLAIM if think == 0.1 else f"{CLAIM}_think{think:g}"


M = _grid.Method
NAMES = ["saw_grpo", "grpo", "saw_gdpo", "gdpo"]


def methods_for(think: float) -> list[_grid.Method]:
    """The four cells' configs, each with ``think=<think>``."""
    return [
        M("saw_grpo", f"configs/saw.py:think={think:g}"),
        M("grpo", f"configs/grpo.py:think={think:g}"),
        M("saw_gdpo", f"configs/saw.py:mode=gdpo,think={think:g}"),
        M("gdpo", f"configs/gdpo.py:think={think:g}"),
    ]


PAIRS = (("saw_grpo", "grpo"), ("saw_gdpo", "gdpo"))  # SAW variant, its static-weight base


def balanced(rows: list[dict]) -> float:
    """Unweighted mean of the final held-out objectives, (r_task + r_tool + r_format) / 3."""
    return sum(_report.last(f"eval/{o}")(rows) for o in OBJECTIVES) / len(OBJECTIVES)


METRICS = {
    "final r_task (= accuracy)": _report.last("eval/r_task"),
    "final r_tool": _report.last("eval/r_tool"),
    "final r_format": _report.last("eval/r_format"),
    "final tool calls / problem": _report.last("eval/tool_calls"),
    "final mean of the 3": balanced,
    "train r_format, mean over all steps": _report.mean_tail("reward/r_format/mean", 10**9),
    "train r_task, last 10 steps": _report.mean_tail("reward/r_task/mean", 10),
    "train r_tool, last 10 steps": _report.mean_tail("reward/r_tool/mean", 10),
    "train r_format, last 10 steps": _report.mean_tail("reward/r_format/mean", 10),
}


FORMAT_SPEED = METRICS["train r_format, mean over all steps"]


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


def _pair(results, saw, base, metric) -> tuple[float, float]:
    return _report.difference(
        _report.values(results, saw, metric), _report.values(results, base, metric)
    )


def objective_lines(results) -> tuple[list[str], list[str]]:
    """Per pair, each final held-out objective's paired gap; and the objectives a SAW variant
    loses by more than 2 SE (the cost SAW Fig. 4's "correctness essentially unchanged" rules out)."""
    lines, costs = [], []
    for saw, base in PAIRS:
        if saw in results and base in results:
            gaps = []
            for o in OBJECTIVES:
                d, se = _pair(results, saw, base, _report.last(f"eval/{o}"))
                gaps.append(f"{o} {d:+.3f} (2 SE {2 * se:.3f})")
                if d < -2 * se:
                    costs.append(f"`{saw}` loses {-d:.3f} of final {o} to `{base}`")
            lines.append(f"- `{saw}` − `{base}`, final held-out: " + ", ".join(gaps))
    return lines, costs


def verdict(results) -> tuple[str, str]:
    diffs, lines = [], []
    for saw, base in PAIRS:
        if saw in results and base in results:
            d, se = _pair(results, saw, base, balanced)
            diffs.append((d, se))
            lines.append(
                f"- `{saw}` − `{base}`: Δ final mean of the 3 = {d:+.4f} (2 SE = {2 * se:.4f})"
            )
            fmt, fse = _pair(results, saw, base, FORMAT_SPEED)
            lines.append(
                f"- `{saw}` − `{base}`: Δ train r_format, mean over all steps (how fast the slow "
                f"objective is learned) = {fmt:+.4f} (2 SE = {2 * fse:.4f}; "
                f"{abs(fmt) / max(fse, 1e-12):.1f} SE)"
            )
    word = _report.verdict_word(diffs) if diffs else "inconclusive"
    names = [f"{saw} over {base}" for saw, base in PAIRS if saw in results and base in results]
    lines += _report.screen_lines(names, diffs, "the SAW variant is above its base")
    per_objective, costs = objective_lines(results)
    lines += per_objective
    reason = {
        "reproduced": "each SAW variant beats its static-weight base by more than 2 SE in the mean "
        "of the three final objectives.",
        "not reproduced": "a static-weight base beats its SAW variant by more than 2 SE.",
        "inconclusive": "not every SAW variant beats its base by more than 2 SE, and no base "
        "beats its SAW variant by more than 2 SE.",
    }[word]
    if costs:
        word += ", at a cost the paper does not report"
        reason += (
            " SAW Fig. 4 has correctness converge essentially unchanged while format is learned "
            "faster; here " + "; ".join(costs) + " (more than 2 SE; see *Where r_task goes*)."
        )
    keys = [k for k in weight_keys(results) if "/weight/" in k]
    for saw, _ in PAIRS:
        if saw in results and keys:
            mean = [
                _report.mean_std(_report.values(results, saw, _report.mean_tail(k, 10**9)))[0]
                for k in keys
            ]
            named = ", ".join(f"{k.rsplit('/', 1)[1]} {w:.3f}" for k, w in zip(keys, mean))
            lines.append(f"- `{saw}`'s CV weights, mean over steps and seeds: {named}")
    return word, reason + "\n\n" + "\n".join(lines)


def _sample_stats(r: dict) -> tuple[bool, float, float | None]:
    """``(opens with a plan, r_task, expression copied exactly)`` of one logged sample; the last
    is None when the sample made no call."""
    plan = think_format(r["response"]) == 1.0
    copied = None
    if r.get("n_calls", 0) > 0:
        asked = re.search(r"Compute (.+?)\.<", r.get("prompt", ""))
        first = r["response"].split(CALC.tool_stop)[0] + CALC.tool_stop  # up to the first call
        copied = float(bool(asked) and CALC.parse_tool_call(first) == asked.group(1))
    return plan, float(r["rewards"]["r_task"]), copied


def plan_table(grid, methods, steps: int, last: int = 20) -> str:
    """Training r_task (and, among samples that call, whether the first call copies the prompt's
    expression) of the logged samples of the last ``last`` steps (``transcripts.jsonl``, pooled
    over seeds), split by whether the response opens with a ``<think>`` plan."""
    rows = []
    for m in methods:
        task, copy = {True: [], False: []}, {True: [], False: []}
        for seed in grid.seeds:
            for r in read_transcripts(_grid.cell_dir(grid, m.name, seed)):
                if r.get("step", 0) > steps - last and r.get("valid", True):
                    plan, r_task, copied = _sample_stats(r)
                    task[plan].append(r_task)
                    if copied is not None:
                        copy[plan].append(copied)
        cells = []
        for plan in (True, False):
            cells += [str(len(task[plan])), _mean(task[plan]), _mean(copy[plan])]
        rows.append([f"`{m.name}`", *cells])
    header = ["method", "samples with a plan", "r_task", "call copies the expression"]
    header += ["samples without", "r_task", "call copies the expression"]
    return _report.markdown_table(header, rows)


def _mean(v: list[float]) -> str:
    return _report.fmt(float(np.mean(v)) if v else math.nan)


def ablation_note(s, think: float) -> str:
    """A pointer from the claim's page to the ``--think`` ablation pages written beside it."""
    if think != 0.1 or not os.path.isdir(s.out):
        return ""
    found = sorted(f for f in os.listdir(s.out) if re.fullmatch(rf"{CLAIM}_think[\d.]+\.md", f))
    links = ", ".join(f"[`{f}`]({f})" for f in found)
    return f" Ablations of the plan rate: {links}." if found else ""


def page(s, think, grid, methods, results, plots, missing) -> str:
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

Setting: the calculator (tiny Qwen3, one SFT warm start per seed, {"20" if s.quick else "500"} SFT
steps, then **{s.steps} RL steps**) with three objectives `(r_task, r_tool, r_format)`. `r_format` is
1 when the response opens with a `<think>` plan (`mojax.tasks.calculator.think_format`), the
structural check of ToolRL's format reward; only {think:.0%} of the SFT demonstrations show one, so
it starts low while `r_task` and `r_tool` start near saturation (SAW Sec. 3.1's asynchronous
learning). Every cell runs its config with `think={think:g}`. Static weights w = (0.6, 0.4, 0.4) for
GRPO / GDPO; SAW uses no static priorities. Grid: {len(methods)} methods × {len(grid.seeds)}
seeds {list(grid.seeds)}. ± is the sample std over
seeds (ddof = 1). {_report.PAIRED_NOTE} The verdict compares the unweighted mean of the three
final held-out objectives; the speed at which `r_format` is learned (its training mean over all
steps) is reported beside it.
{"**Quick mode: a smoke test, not a result.**" if s.quick else ""}

## Verdict: {word}

{reason}

## Final rewards, mean ± std over seeds

{_report.summary_table(results, METRICS, digits=4)}

## CV weights (SAW runs), mean ± std over seeds

{weights}

## Every seed

{_report.per_seed_table(results, METRICS, digits=4)}

## Where r_task goes

The training samples `transcripts.jsonl` logs (the first 4 of each step, one prompt's) of the last
20 RL steps, pooled over seeds, split by whether the response opens with a plan; "call copies the
expression" is, among samples that call, the fraction whose first `<calc>` is the prompt's
expression.

{plan_table(grid, methods, s.steps)}

The warm start shows a plan in {think:.0%} of its demonstrations. Where that context is less
trained than the plan-free one, its calls copy the expression less often (compare the two "copies"
columns); a method that moves responses into it faster then pays in `r_task`, and with little CV
weight left on `r_task` (above) that is corrected slowly.{ablation_note(s, think)}

## Plots

![per-objective curves]({rel["curves"]})

![CV weights]({rel["weights"]})

## Commands

The grid: `python experiments/{CLAIM}.py --seeds={",".join(map(str, grid.seeds))} --steps={s.steps}{"" if think == 0.1 else f" --think={think:g}"}`.
Each cell (see `paretopo_front.md` for what `--config.resume=force` is for):

{_report.commands_block(cmds)}

{_grid.missing_block(grid, missing)}
"""


def main(argv):
    del argv
    think = THINK.value
    name = claim(think)
    group = "calculator_think" + ("" if think == 0.1 else f"{think:g}")
    s = _cli.settings(group, steps=60, quick_steps=2, quick_methods=NAMES[:2])
    methods = _grid.select(methods_for(think), s.methods or NAMES)
    grid = dataclasses.replace(_calculator.grid(s), sft_config=f"configs/sft.py:think={think:g}")
    methods, results, missing = _grid.run_claim(name, grid, methods, s.report_only)
    fig_dir = os.path.join(s.out, name)
    curve_keys = [f"{p}/{o}{q}" for p, q in (("reward", "/mean"), ("eval", "")) for o in OBJECTIVES]
    saw_only = {m: r for m, r in results.items() if m.startswith("saw")} or results
    wkeys = weight_keys(results) or ["saw/weight/r_task"]
    plots = {
        "curves": _report.plot_curves(
            results, curve_keys, os.path.join(fig_dir, "curves.png"), "SAW claim", ncols=3
        ),
        "weights": _report.plot_curves(
            saw_only, wkeys, os.path.join(fig_dir, "weights.png"), "SAW CV weights", ncols=3
        ),
    }
    path = _report.write_page(
        os.path.join(s.out, f"{name}.md"), page(s, think, grid, methods, results, plots, missing)
    )
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    app.run(main)
