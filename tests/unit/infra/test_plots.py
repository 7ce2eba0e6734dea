"""Plots from a fake metrics.jsonl: titles with the run name, integer step ticks, markers (single
points show), a pair grid for M > 2, distinguishable overlapping lines, and the method comparison.

The figures are also checked by eye (the PNGs this test writes were viewed while writing it)."""

import json
import pathlib

import numpy as np
import pytest

from mojax.infra import logbook as log_lib
from mojax.infra import plots

OBJ2 = ["r_task", "r_tool"]
OBJ4 = ["r_acc", "r_len", "r_fmt", "r_div"]


def fake_run(workdir, objectives, *, steps=12, evals=(0, 4, 8, 12), hv_steps=(0, 4, 8), seed=0):
    """A metrics.jsonl shaped like the trainer's (train means every step, eval/HV sometimes)."""
    rng = np.random.default_rng(seed)
    with log_lib.MetricsWriter(workdir, tensorboard=False) as w:
        for t in range(steps + 1):
            m = {f"reward/{o}/mean": float(rng.random()) for o in objectives}
            m["loss"] = 0.5 / (t + 1)
            m["eval/accuracy"] = 0.05 * t
            if t in evals:
                m.update({f"eval/{o}": float(rng.random()) for o in objectives})
            if t in hv_steps:
                m["pareto/hv"], m["pareto/r_pareto"] = 0.1 + 0.01 * t, 0.5
            w.write(t, m)
    return pathlib.Path(workdir)


@pytest.fixture
def figures(monkeypatch):
    """Every figure plots.py saves (inspected before it is closed)."""
    seen = {}
    save = plots._save

    def spy(fig, path):
        seen[pathlib.Path(path).name] = fig
        out = save(fig, path)
        return out

    monkeypatch.setattr(plots, "_save", spy)
    return seen


def _png_ok(path, min_bytes=8000):
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > min_bytes, (path, len(data))


def _step_ticks_are_integers(ax):
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_run_plots_two_objectives(tmp_path, figures):
    run = fake_run(tmp_path / "paretopo-calc", OBJ2)
    paths = plots.plot_run(run, OBJ2)
    assert [p.name for p in paths] == ["rewards.png", "hypervolume.png", "pareto_front.png"]
    for p in paths:
        _png_ok(p)
    for name in ("rewards.png", "hypervolume.png", "pareto_front.png"):
        fig = figures[name]
        titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [
            a.get_title() for a in fig.axes
        ]
        assert any("paretopo-calc" in t for t in titles), (name, titles)
    rewards = figures["rewards.png"]
    train, held = rewards.axes[:2]
    assert [line.get_label() for line in train.lines] == OBJ2
    for ax in (train, held):
        _step_ticks_are_integers(ax)
        assert ax.get_legend() is not None and ax.get_xlabel() == "step"
    # overlapping lines stay apart: colour, marker and line style all differ, and line widths
    # shrink so a later line drawn exactly over an earlier one leaves it visible
    a, b = train.lines
    assert a.get_color() != b.get_color() and a.get_marker() != b.get_marker()
    assert a.get_linestyle() != b.get_linestyle() and a.get_linewidth() > b.get_linewidth()
    front = figures["pareto_front.png"].axes[0]
    assert front.get_xlabel() == "r_task" and front.get_ylabel() == "r_tool"


def test_single_points_show_with_integer_ticks(tmp_path, figures):
    run = fake_run(tmp_path / "short", OBJ2, steps=1, evals=(1,), hv_steps=(0,))
    plots.plot_run(run, OBJ2)
    hv = figures["hypervolume.png"].axes[0]
    (line, _) = hv.lines
    assert len(line.get_xdata()) == 1 and line.get_marker() not in (None, "", "None")
    assert list(hv.get_xticks()) == [0]  # one step, one integer tick
    held = figures["rewards.png"].axes[1]
    assert all(len(ln.get_xdata()) == 1 and ln.get_marker() != "None" for ln in held.lines)
    assert list(held.get_xticks()) == [1]


def test_pareto_pair_grid_for_four_objectives(tmp_path, figures):
    run = fake_run(tmp_path / "vpo", OBJ4, hv_steps=())
    paths = plots.plot_run(run, OBJ4)
    assert [p.name for p in paths] == ["rewards.png", "pareto_front.png"]
    _png_ok(paths[1], 20000)
    fig = figures["pareto_front.png"]
    grid = np.array(fig.axes[:16], dtype=object).reshape(4, 4)  # subplots, row-major
    rows = [r for r in log_lib.read_metrics(run) if "eval/r_acc" in r]
    pts = np.array([[r[f"eval/{o}"] for o in OBJ4] for r in rows])
    nd = plots.nondominated_mask(pts)
    for i in range(4):
        assert grid[i, i].get_title() == OBJ4[i]
        for j in range(4):
            if j > i:
                assert not grid[i, j].axison  # upper triangle left empty
            if j >= i:
                continue
            dots, rings = grid[i, j].collections[:2]
            np.testing.assert_allclose(dots.get_offsets(), pts[:, [j, i]])
            np.testing.assert_allclose(rings.get_offsets(), pts[nd][:, [j, i]])
    assert [grid[3, j].get_xlabel() for j in range(4)] == OBJ4
    assert [grid[i, 0].get_ylabel() for i in range(1, 4)] == OBJ4[1:]
    assert "4 objectives" in fig._suptitle.get_text() and "vpo" in fig._suptitle.get_text()


def test_front_highlights_exactly_the_nondominated_points():
    moocore = pytest.importorskip("moocore")
    rng = np.random.default_rng(3)
    for m in (2, 3, 4):
        pts = rng.integers(0, 4, size=(40, m)).astype(float)  # ties and duplicates included
        want = moocore.is_nondominated(pts, maximise=True, keep_weakly=True)
        np.testing.assert_array_equal(plots.nondominated_mask(pts), want)


def test_plot_comparison_from_rows_and_workdirs(tmp_path, figures):
    a = fake_run(tmp_path / "grpo", OBJ2, seed=1)
    rows_b = log_lib.read_metrics(fake_run(tmp_path / "paretopo", OBJ2, seed=2))
    same = [dict(r) for r in rows_b]  # a third method with identical numbers: must stay visible
    out = plots.plot_comparison(
        {"grpo": a, "paretopo": rows_b, "copy": same},
        ["eval/accuracy", "pareto/hv", "reward/r_task/mean", "not/logged"],
        tmp_path / "cmp.png",
        title="calculator: methods",
    )
    _png_ok(out, 30000)
    fig = figures["cmp.png"]
    axes = [a for a in fig.axes if a.axison]
    assert [ax.get_title() for ax in axes] == [
        "eval/accuracy",
        "pareto/hv",
        "reward/r_task/mean",
        "not/logged",
    ]
    assert [ln.get_label() for ln in axes[0].lines] == ["grpo", "paretopo", "copy"]
    assert "no run logs this key" in axes[3].texts[0].get_text()
    p, c = axes[0].lines[1:]
    np.testing.assert_array_equal(p.get_ydata(), c.get_ydata())
    assert p.get_markersize() > c.get_markersize() and p.get_linewidth() > c.get_linewidth()
    for ax in axes[:3]:
        _step_ticks_are_integers(ax)
    assert fig._suptitle.get_text() == "calculator: methods"
    with pytest.raises(ValueError, match="at least one run and one key"):
        plots.plot_comparison({}, ["loss"], tmp_path / "x.png")


def test_sample_set_is_written(tmp_path):
    """The sample set a reviewer looks at: a 2-objective ParetoPO run, a 4-objective run, a
    one-step run and a comparison of three methods."""
    out = []
    out += plots.plot_run(fake_run(tmp_path / "paretopo-calc", OBJ2), OBJ2)
    out += plots.plot_run(fake_run(tmp_path / "vpo-4obj", OBJ4, hv_steps=()), OBJ4)
    short = fake_run(tmp_path / "short", OBJ2, steps=1, evals=(1,), hv_steps=(0,))
    out += plots.plot_run(short, OBJ2)
    runs = {m: fake_run(tmp_path / m, OBJ2, seed=i) for i, m in enumerate(["grpo", "gdpo", "saw"])}
    out.append(plots.plot_comparison(runs, ["eval/accuracy", "loss"], tmp_path / "cmp.png"))
    assert len(out) == 3 + 2 + 3 + 1
    for p in out:
        _png_ok(p)
    assert (
        json.loads((tmp_path / "short" / "metrics.jsonl").read_text().splitlines()[0])["step"] == 0
    )
