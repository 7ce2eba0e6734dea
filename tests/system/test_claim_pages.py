"""experiments/: a claim page's plots and token budgets, on synthetic cell archives (no training),
against numbers computed by hand or with numpy / scipy here; and a regenerated page keeps its
committed pre-registration byte for byte."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from scipy import stats as sps

from experiments import _claims, _figures, _grid, _tokens
from mojax.infra.jsonl import read_metrics


def _cell(root, arm: str, seed: int, evals: dict[int, tuple], tokens: list, key=_tokens.EXACT):
    """An archived cell: training rows of steps 1..len(tokens) (``key`` = tokens, or the estimate's
    two keys), eval rows ``{step: (accuracy, tool efficiency)}``."""
    d = root / arm / f"s{seed}"
    d.mkdir(parents=True)
    rows = {s: {"step": s} for s in range(len(tokens) + 1)}
    for s, n in enumerate(tokens, start=1):
        rows[s]["rollout/rollouts"] = 128.0
        if key == _tokens.EXACT:
            rows[s][key] = float(n)
        elif key == "estimate":
            rows[s]["rollout/policy_tokens_mean"] = n / 128.0
    for s, (acc, eff) in evals.items():
        rows[s].update({"eval/accuracy": acc, "eval/tool_efficiency": eff})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    return str(d)


def test_curve_band_is_the_95_t_interval_of_the_seed_mean(tmp_path):
    ys = np.array([[0.5, 0.6, 0.9], [0.7, 0.6, 0.8], [0.6, 0.9, 0.7]])
    mean, low, high = _figures.t_band(ys)
    half = sps.t.ppf(0.975, 2) * ys.std(0, ddof=1) / math.sqrt(3)  # 4.303 sd / sqrt 3
    assert np.allclose(mean, [0.6, 0.7, 0.8]) and np.allclose(high - mean, half)
    assert np.allclose(mean - low, half) and np.isclose(half[0], 4.302653 * 0.1 / math.sqrt(3))
    one = _figures.t_band(ys[:1])
    assert all(np.array_equal(x, ys[0]) for x in one)  # one seed: no band
    cells = {"a": {0: _cell(tmp_path, "a", 0, {0: (0.1, 0.2), 2: (0.3, 0.4)}, [5, 5]),
                   1: _cell(tmp_path, "a", 1, {0: (0.2, 0.2), 1: (0.5, 0.5), 2: (0.4, 0.6)},
                            [5, 5])}}  # fmt: skip
    results = {a: {s: read_metrics(d) for s, d in c.items()} for a, c in cells.items()}
    steps, vals = _figures.curves(results, "eval/accuracy")["a"]
    assert steps == [0, 2] and np.allclose(vals, [[0.1, 0.3], [0.2, 0.4]])  # steps both logged


def test_front_points_are_each_seeds_final_point_and_the_figures_are_written(tmp_path):
    cells = {
        "a": {0: _cell(tmp_path, "a", 0, {0: (0.1, 0.2), 2: (0.3, 0.4)}, [5, 5]),
              1: _cell(tmp_path, "a", 1, {0: (0.2, 0.2), 2: (0.5, 0.8)}, [5, 5])},
        "b": {0: _cell(tmp_path, "b", 0, {0: (0.1, 0.2), 2: (0.9, 0.1)}, [5, 5])},
    }  # fmt: skip
    results = {a: {s: read_metrics(d) for s, d in c.items()} for a, c in cells.items()}
    pts = _figures.front_points(results, ("eval/accuracy", "eval/tool_efficiency"))
    assert np.array_equal(pts["a"], [[0.3, 0.4], [0.5, 0.8]])
    assert np.array_equal(pts["b"], [[0.9, 0.1]])
    assert np.allclose(pts["a"].mean(0), [0.4, 0.6])
    out = tmp_path / "out"
    keys = ("eval/accuracy", "eval/tool_efficiency", "eval/not_logged")
    text = _figures.figures_text(results, str(out), "c", keys, keys[:2])
    for name in ("curves", "front"):
        assert (out / "c" / f"{name}.png").stat().st_size > 1000
        assert f"](c/{name}.png)" in text
    assert "95% t interval" in text
    assert _figures.figures_text(results, str(out), "d", ("eval/not_logged",), None) == ""


def test_token_budgets_sum_the_logged_tokens_and_say_when_not_logged(tmp_path):
    rows = read_metrics(_cell(tmp_path, "a", 0, {0: (0.1, 0.1)}, [100, 250, 50]))
    assert _tokens.step_tokens(rows) == ({1: 100.0, 2: 250.0, 3: 50.0}, _tokens.EXACT)
    assert _tokens.total(rows) == 400.0
    est = read_metrics(_cell(tmp_path, "e", 0, {0: (0.1, 0.1)}, [128, 256], key="estimate"))
    assert _tokens.step_tokens(est) == ({1: 128.0, 2: 256.0}, _tokens.ESTIMATE)
    none = read_metrics(_cell(tmp_path, "n", 0, {0: (0.1, 0.1)}, [1, 2], key=None))
    assert math.isnan(_tokens.total(none))
    measure = _claims.Measure("acc", "outcome", lambda r: r[-1]["eval/accuracy"])
    cmp = [_claims.Comparison("a", "n", "acc")]
    text = _tokens.budget_text({"a": {0: rows}, "n": {0: none}}, cmp, {"acc": measure})
    assert "Generated tokens: not logged in these cells." in text
    text = _tokens.budget_text({"e": {0: est}}, [], {"acc": measure})
    assert "is not logged in these cells" in text and "| `e` | 1 | 384 ± 0 |" in text


def test_matched_tokens_read_each_arm_at_its_last_evaluation_within_the_smaller_budget(tmp_path):
    """Arm ``big`` spends 3x the tokens of ``small``: per seed the budget is ``small``'s total, and
    ``big`` is read at its last evaluation whose cumulative tokens fit (by hand below)."""
    ev = lambda *acc: {s: (a, 0.5) for s, a in zip((0, 2, 4), acc)}
    cells = {
        "small": {0: _cell(tmp_path, "small", 0, ev(0.1, 0.2, 0.3), [10, 10, 10, 10]),
                  1: _cell(tmp_path, "small", 1, ev(0.1, 0.4, 0.5), [20, 20, 20, 20])},
        "big": {0: _cell(tmp_path, "big", 0, ev(0.1, 0.6, 0.9), [20, 20, 40, 40]),
                1: _cell(tmp_path, "big", 1, ev(0.1, 0.7, 0.8), [40, 40, 70, 70])},
    }  # fmt: skip
    results = {a: {s: read_metrics(d) for s, d in c.items()} for a, c in cells.items()}
    acc = lambda r: [x for x in r if "eval/accuracy" in x][-1]["eval/accuracy"]
    # seed 0: budget 40; big's cumulative tokens at evals 0, 2, 4 are 0, 40, 120 -> read at step 2
    # seed 1: budget 80; big's are 0, 80, 220 -> step 2; small ends within its own total (step 4)
    m = _tokens.matched(results["big"], results["small"], acc)
    assert m == {"a": [0.6, 0.7], "b": [0.3, 0.5], "step_a": [2, 2], "step_b": [4, 4]}
    assert _tokens.differ(120.0, 100.0) is True and _tokens.differ(110.0, 100.0) is False
    measure = _claims.Measure("acc", "outcome", acc)
    cmp = [_claims.Comparison("big", "small", "acc")]
    text = _tokens.budget_text(results, cmp, {"acc": measure})
    # means: big (120 + 220) / 2 = 170, small (40 + 80) / 2 = 60; Δ at matched (0.65 - 0.40)
    assert "| `big` − `small` | acc | 170 / 60 | 0.6500 | 0.4000 | +0.2500 | 2.0 / 4.0 |" in text
    same = {"small": results["small"], "big2": results["small"]}
    cmp2 = [_claims.Comparison("big2", "small", "acc")]
    assert "No compared pair differs" in _tokens.budget_text(same, cmp2, {"acc": measure})


def test_a_regenerated_page_keeps_its_committed_pre_registration(tmp_path, capsys):
    """``report`` writes the page's pre-registration as committed, byte for byte, even where the
    claim's declaration now prints differently; the results, plots and token budgets follow it."""
    measure = _claims.Measure("acc", "outcome", lambda r: r[-1]["eval/accuracy"])
    grid = _grid.Grid(root=str(tmp_path / "root"), seeds=(0, 1), common=("--config.a=1",))
    claim = _claims.Claim(
        name="c", title="T", question="Q?", prereg="Hypothesis.", arms=[_grid.Method("a", "x.py")],
        measures=[measure], comparisons=[], grid=grid, out=str(tmp_path / "out"),
        curves=("eval/accuracy",), front=("eval/accuracy", "eval/tool_efficiency"),
    )  # fmt: skip
    committed = _claims.prereg_text(claim).replace("Hypothesis.", "Hypothesis, as committed.")
    os.makedirs(tmp_path / "out")
    (tmp_path / "out" / "c.md").write_text(f"# T\n\nQ?\n\n{committed}\n## Verdict: not run yet\n")
    for s in (0, 1):
        _cell(tmp_path / "out" / "c" / "cells", "a", s, {0: (0.5, 0.5), 2: (0.6, 0.7)}, [3, 4])
    page = open(_claims.report(claim), encoding="utf-8").read()
    assert "keeping its committed pre-registration" in capsys.readouterr().out
    assert page.split("## Verdict")[0] == f"# T\n\nQ?\n\n{committed}\n"
    assert "](c/curves.png)" in page and "](c/front.png)" in page
    assert "| `a` | 2 | 7 ± 0 |" in page  # 3 + 4 tokens per cell
    assert (tmp_path / "out" / "c" / "front.png").is_file()


@pytest.mark.parametrize("kind", [None, "ablation"])
def test_an_ablation_comparison_enters_neither_verdict(tmp_path, kind):
    from types import SimpleNamespace

    def cell(arm, seed, acc):
        d = tmp_path / arm / f"s{seed}"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(json.dumps({"step": 2, "eval/accuracy": acc}) + "\n")
        return str(d)

    accs = {"a": [0.6, 0.7, 0.8], "b": [0.5, 0.6, 0.7], "c": [0.9, 0.95, 0.99]}
    cells = {k: {s: cell(k, s, x) for s, x in enumerate(v)} for k, v in accs.items()}
    measure = _claims.Measure("acc", "outcome", lambda rows: rows[-1]["eval/accuracy"])
    comps = [_claims.Comparison("a", "b", "acc"), _claims.Comparison("a", "c", "acc", kind=kind)]
    rows = _claims.comparisons(SimpleNamespace(measures=[measure], comparisons=comps), cells)
    assert [_claims.kind_of(r) for r in rows] == ["outcome", kind or "outcome"]
    assert rows[1]["verdict"] == "opposite"  # a is worse than c in every seed
    want = "shown" if kind else "contradicted"
    assert _claims.kind_verdict(rows, "outcome").startswith(want)


def test_saw_static_weights_are_read_from_the_archive_when_the_grid_is_not_there(tmp_path):
    """``saw_cv --report_only`` in a fresh clone: the ``grpo_saw_static`` arm's weights (the time
    average of the ``saw_grpo`` cells' logged weights) come from the archived cells; without an
    archive and without done cells there is no such arm yet (None)."""
    import ast

    from experiments import saw_cv

    keys = [f"advantage/saw/weight/{o}" for o in saw_cv.OBJECTIVES]
    for s, ws in ((0, [(0.2, 0.3, 0.5), (0.4, 0.3, 0.3)]), (1, [(0.3, 0.3, 0.4)])):
        d = tmp_path / "archive" / "saw_grpo" / f"s{s}"
        d.mkdir(parents=True)
        rows = [{"step": i + 1, **dict(zip(keys, w))} for i, w in enumerate(ws)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = str(tmp_path / "root")
    assert saw_cv.saw_average_weights(root, (0, 1)) is None
    got = ast.literal_eval(saw_cv.saw_average_weights(root, (0, 1), str(tmp_path / "archive")))
    assert got == pytest.approx((0.3, 0.3, 0.4))  # mean of the three rows, normalised to sum 1
    assert saw_cv.saw_average_weights(root, (0, 2), str(tmp_path / "archive")) is None


def test_an_arm_keeps_its_colour_in_a_panel_another_arm_does_not_log(tmp_path):
    """A method's own metric (e.g. AWPO's gate) is not logged by its baseline: the arms after it
    keep their colours in that panel, and the legend names every arm."""
    plt = _figures._report._pyplot()
    results = {}
    for arm, extra in (("base", None), ("method", 0.3), ("ablation", 0.1)):
        rows = [{"step": s, "eval/accuracy": 0.5 + s / 10} for s in range(3)]
        if extra is not None:
            for r in rows:
                r["train/gate"] = extra
        results[arm] = {0: rows, 1: rows}
    want = {a: st["color"] for a, st in _figures.arm_styles(results).items()}
    assert want == {"base": "C0", "method": "C1", "ablation": "C2"}
    fig = _figures.curves_figure(plt, results, ["eval/accuracy", "train/gate"], "t")
    acc, gate = fig.axes[:2]
    assert {ln.get_label(): ln.get_color() for ln in acc.get_lines()} == want
    assert {ln.get_label(): ln.get_color() for ln in gate.get_lines()} == {
        "method": "C1",
        "ablation": "C2",
    }
    legend = {t.get_text() for t in acc.get_legend().get_texts()}
    plt.close(fig)
    assert legend == set(want)
    fig_results = {"method": results["method"], **results}  # order sets the colour, not the data
    assert _figures.arm_styles(fig_results)["method"]["color"] == "C0"


def test_setting_checks_name_the_seeds_whose_cells_cannot_test_the_mechanism(tmp_path):
    """The setting checks that awpo_weak's and paretopo_calls' pre-registrations say before any cell
    runs, on written cells: per seed, the mean of the metric over the training steps that log it
    (numpy here); the seeds below the threshold are named (a seed that never logs it too)."""
    import dataclasses

    from experiments import awpo_weak, paretopo_calls

    def write(claim, arm, key, per_seed):
        for s, values in per_seed.items():
            d = tmp_path / claim.name / "cells" / arm / f"s{s}"
            d.mkdir(parents=True)
            rows = [{"step": 0, "eval/accuracy": 0.5}]
            rows += [{"step": i + 1, key: v} for i, v in enumerate(values)]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def declared(module):
        claim = module.claim((0, 1, 2), str(tmp_path / "root"), False)
        return dataclasses.replace(claim, out=str(tmp_path))

    weak = declared(awpo_weak)
    assert awpo_weak.gate_check(weak) == ""  # no cells yet
    gated = {0: [0.1, 0.3], 1: [0.0, 0.09], 2: [0.05, 0.05]}  # seed 2 at the threshold passes
    write(weak, "awpo", "advantage/awpo/gated_out_frac", gated)
    per = ", ".join(f"s{s}: {np.mean(v):.3f}" for s, v in gated.items())
    assert awpo_weak.gate_check(weak) == (
        "**Setting check (`awpo`, gated-out groups, mean over steps >= 0.05):** not met in seed 1: "
        f"its cells could not tell the gate from mixing without it ({per}).\n"
    )
    calls = declared(paretopo_calls)
    reordered = {0: [0.0, 0.25], 1: [0.0, 0.0], 2: []}
    write(calls, "paretopo", "advantage/pareto/reordered_group_frac", reordered)
    assert paretopo_calls.ranking_check(calls) == (
        "**Setting check (`paretopo`, reordered groups > 0):** not met in seeds 1, 2: their cells "
        "could not test the ranking's order (s0: 0.125, s1: 0.000, s2: nan).\n"
    )
    tmp_path = tmp_path / "passing"  # a grid whose every seed passes
    calls = declared(paretopo_calls)
    write(calls, "paretopo", "advantage/pareto/reordered_group_frac", {0: [0.1], 1: [0.0, 0.4]})
    assert paretopo_calls.ranking_check(calls) == (
        "**Setting check (`paretopo`, reordered groups > 0):** met in every seed (s0: 0.100, "
        "s1: 0.200).\n"
    )
