"""experiments/: a claim script runs its grid end to end in --quick mode, keeps the pre-registration
it wrote before the grid, archives each cell's raw data, writes its page from that data alone,
shares the SFT warm start, resumes without rerunning done cells, and a cell's printed command
reproduces its numbers."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from experiments import _grid
from mojax.infra.jsonl import read_metrics
from mojax.spec import input_files

REPO = os.fspath(pathlib.Path(__file__).resolve().parents[2])


def _run_script(name: str, root, *flags: str) -> str:
    """Runs ``experiments/<name>.py --quick`` under ``root``; returns the page text."""
    out = os.path.join(root, "results")
    cmd = [sys.executable, f"experiments/{name}.py", "--quick", f"--root={root}", f"--out={out}"]
    proc = subprocess.run([*cmd, *flags], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return open(os.path.join(out, f"{name}.md"), encoding="utf-8").read()


def _eval_rows(workdir) -> list[dict]:
    return [r for r in read_metrics(workdir) if "eval/accuracy" in r]


def _section(page: str, title: str) -> str:
    return page.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The ParetoPO claim in quick mode: GRPO + dynamic sampling and ParetoPO, 1 seed, 2 RL steps;
    the pre-registration written first. Its 3 runs (one SFT warm start, two cells) are minutes
    beside the other pytest worker: the tests that read them are in the slow set. A page's
    statistics over 2 or more seeds are tested on written cells
    (``test_comparisons_need_two_seeds_of_both_arms`` and the family test below)."""
    root = tmp_path_factory.mktemp("paretopo_quick")
    prereg = _run_script("paretopo_front", root, "--prereg")
    page = _run_script("paretopo_front", root, "--methods=grpo_ds,paretopo")
    return root, prereg, page


@pytest.mark.slow
def test_page_keeps_the_pre_registration_and_adds_results(quick):
    root, prereg, page = quick
    assert "## Verdict" not in prereg
    assert _section(page, "Pre-registration") == _section(prereg, "Pre-registration")
    for section in ("## Verdict", "## Results", "## Comparisons", "## Per seed", "## Commands"):
        assert section in page, section
    final = _eval_rows(os.path.join(root, "grpo_ds", "s0"))[-1]
    row = re.search(r"^\| `grpo_ds` \| 0 \| (.*) \|$", page, flags=re.M)
    assert row, page
    cells = [c.strip() for c in row.group(1).split("|")]
    assert cells[0] == f"{final['eval/tool_efficiency']:.3f}"  # the first measure's column
    comps = _section(page, "Comparisons")  # 1 seed: the comparison is named and not made
    assert "(`paretopo` − `grpo_ds`): a paired comparison needs >= 2 seeds" in comps


@pytest.mark.slow
def test_cells_are_archived_with_their_held_out_samples(quick):
    root, _, _ = quick
    work = os.path.join(root, "grpo_ds", "s0")
    cell = os.path.join(root, "results", "paretopo_front", "cells", "grpo_ds", "s0")
    assert read_metrics(cell) == read_metrics(work)
    assert json.load(open(os.path.join(cell, "config.json")))["seed"] == 0
    with gzip.open(os.path.join(cell, "eval", "2.jsonl.gz"), "rt") as f:
        archived = f.read()
    assert archived == open(os.path.join(work, "eval", "2.jsonl")).read()
    assert len(archived.splitlines()) == 16 * 4  # 16 held-out problems x 4 samples


@pytest.mark.slow
def test_cell_restored_the_shared_sft_warm_start(quick):
    root, _, _ = quick
    assert _grid.trained_sft(os.path.join(root, "sft", "s0"))
    assert not _grid.trained_sft(os.path.join(root, "grpo_ds", "s0"))
    sft_eval = _eval_rows(os.path.join(root, "sft", "s0"))[-1]
    cell_eval = _eval_rows(os.path.join(root, "grpo_ds", "s0"))[0]
    for k in ("eval/accuracy", "eval/tool_calls", "eval/r_tool"):
        assert cell_eval[k] == sft_eval[k], k
    # the cell recorded the fingerprint of the warm start it restored: the seed's, archived too
    want = input_files.fingerprint(os.path.join(root, "sft", "s0", "checkpoints_sft"))
    for cell in (os.path.join(root, "grpo_ds", "s0"), os.path.join(root, "paretopo", "s0")):
        assert open(os.path.join(cell, "warm_start.txt")).read() == want + "\n", cell
    archived = os.path.join(root, "results", "paretopo_front", "cells", "grpo_ds", "s0")
    assert open(os.path.join(archived, "warm_start.txt")).read() == want + "\n"
    other = input_files.fingerprint(os.path.join(root, "grpo_ds", "s0", "checkpoints"))
    assert other != want  # the fingerprint tells checkpoints apart (the cell's own RL steps)


@pytest.mark.slow
def test_a_grid_resumes_without_rerunning_done_cells(quick):
    root, _, _ = quick
    log = os.path.join(root, "grpo_ds", "s0", "run.log")
    before = os.path.getmtime(log)
    _run_script("paretopo_front", root, "--methods=grpo_ds", "--seeds=0", "--report_only")
    _run_script("paretopo_front", root, "--methods=grpo_ds", "--seeds=0")
    assert os.path.getmtime(log) == before


@pytest.mark.slow
def test_rerunning_a_cell_command_reproduces_its_numbers(quick, tmp_path):
    """A cell's command (``cmd.txt``), run in a fresh workdir (which then trains its own SFT warm
    start instead of restoring the shared copy), gives bit-identical eval numbers."""
    root, _, _ = quick
    work = os.path.join(root, "grpo_ds", "s0")
    argv = shlex.split(open(os.path.join(work, "cmd.txt")).read())
    fresh = str(tmp_path / "rerun")
    argv = [a if not a.startswith("--workdir=") else f"--workdir={fresh}" for a in argv]
    assert argv[:3] == ["python", "-m", "mojax.main"]
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SFT 20/20" in proc.stdout  # it did train its own warm start
    keys = ("step", "eval/accuracy", "eval/tool_calls", "eval/r_task", "eval/tool_efficiency")
    want, got = _eval_rows(work), _eval_rows(fresh)
    assert [[r[k] for k in keys] for r in got] == [[r[k] for k in keys] for r in want]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, flags",
    [
        # all three arms (the static arm's weights come from the SAW cells); ~5 min, not in CI
        pytest.param("saw_cv", (), marks=pytest.mark.full),
        # the gate against mixing without it; full set only since stop 43 (CI time)
        pytest.param("awpo_gate", ("--methods=awpo,mix_nogate",), marks=pytest.mark.full),
        # the rule-set pre-registrations (issue 47): two arms each, not in CI
        pytest.param("awpo_rule", ("--methods=awpo,grpo_outcome",), marks=pytest.mark.full),
        pytest.param("saw_rule", ("--methods=saw_grpo,grpo_equal",), marks=pytest.mark.full),
        pytest.param("paretopo_calls", ("--methods=grpo_ds,paretopo",), marks=pytest.mark.full),
        pytest.param("awpo_weak", ("--methods=awpo,mix_nogate",), marks=pytest.mark.full),
        ("vpo_bestk", ("--methods=vpo,grpo",)),  # two of its four arms: CI time
        # the rule-calculator grid, 2 arms x 2 seeds x 2 steps (~25 min on 2 busy cores): not in CI
        pytest.param(
            "paretopo_rule", ("--methods=grpo_ds,paretopo", "--seeds=0,1"), marks=pytest.mark.full
        ),
    ],
)
def test_other_claims_run_in_quick_mode(name, flags, tmp_path):
    """Each script's grid at its ``--quick`` default (1 seed unless ``--seeds``): its page has
    every section, its plots and token budgets; with 1 seed it says that no comparison was made
    (a paired comparison needs 2 seeds; a page's statistics are tested on written cells below).
    A cell's generated tokens equal its kept rows' mean × rollouts at every step without
    a dynamic-sampling refill."""
    page = _run_script(name, tmp_path, *flags)
    assert "## Verdict" in page and "## Per seed" in page and "## Pre-registration" in page
    assert f"]({name}/curves.png)" in page and "## Token budgets" in page
    if "--seeds=0,1" not in flags:
        comps = _section(page, "Comparisons")
        assert "a paired comparison needs >= 2 seeds run by both arms" in comps
        assert "**Mechanism:** no comparison" in _section(page, "Verdict")
    cells = os.path.join(tmp_path, "results", name, "cells")
    cell = os.path.join(cells, sorted(os.listdir(cells))[0], "s0")
    rows = [r for r in read_metrics(cell) if "rollout/rollouts" in r]
    assert rows and all("rollout/generated_tokens" in r for r in rows)
    for r in rows:
        if not r.get("dapo/refill_rounds"):
            want = r["rollout/policy_tokens_mean"] * r["rollout/rollouts"]
            assert r["rollout/generated_tokens"] == pytest.approx(want, rel=1e-6)


def test_code_commit_ignores_the_archive_the_grid_writes(tmp_path):
    """A cell's ``commit.txt``: the archive under docs/results does not make the tree dirty, a
    changed source file does."""
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    run("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    run("add", "code.py")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    (tmp_path / "docs" / "results" / "claim" / "cells").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "claim" / "cells" / "m.jsonl").write_text("{}\n")
    assert _grid.code_commit(str(tmp_path)) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert _grid.code_commit(str(tmp_path)) == head + "+dirty"


def test_identical_arms_are_named_only_when_every_evaluation_matches(tmp_path):
    from experiments import _claims

    def cell(arm, seed, evals, train):
        d = tmp_path / arm / f"s{seed}"
        d.mkdir(parents=True)
        rows = [{"step": i, "loss": train + i} for i in range(3)]
        rows += [{"step": 2, "eval/accuracy": a, "eval/tool_calls": 1.0} for a in evals]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(d)

    cells = {
        "a": {0: cell("a", 0, [0.5, 0.7], 0.0), 1: cell("a", 1, [0.4, 0.6], 0.0)},
        "b": {0: cell("b", 0, [0.5, 0.7], 1e-6), 1: cell("b", 1, [0.4, 0.6], 1e-6)},
        "c": {0: cell("c", 0, [0.5, 0.7], 0.0), 1: cell("c", 1, [0.4, 0.6000001], 0.0)},
    }
    assert _claims.identical_arms(cells) == [("a", "b")]  # training round-off is not compared
    assert "`a` and `b`: every held-out evaluation" in _claims.identical_text(cells)
    assert _claims.identical_text({"a": cells["a"], "c": cells["c"]}) == ""


def test_warm_starts_that_differ_between_arms_are_named(tmp_path):
    """The arms of a seed restore one warm start, so their step-0 evaluations are equal; a seed
    whose arms started from different ones (a warm start trained again) is named with both."""
    from experiments import _warm_starts

    def cell(arm, seed, start, samples=4):
        d = tmp_path / arm / f"s{seed}"
        d.mkdir(parents=True)
        config = {"task": {"name": "calculator"}, "eval": {"num_samples": samples}, "seed": seed}
        (d / "config.json").write_text(json.dumps(config))
        rows = [
            {"step": 0, "eval/accuracy": start, "eval/tool_calls": 0.5},
            {"step": 1, "loss": 1.0},
        ]
        rows.append({"step": 2, "eval/accuracy": start + 0.1 * len(arm), "eval/tool_calls": 0.4})
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(d)

    same = {a: {s: cell(a, s, 0.5 + s / 8) for s in (0, 1)} for a in ("a", "bb")}
    assert "they restored one SFT warm start" in _warm_starts.warm_start_text(same)
    evaluated_otherwise = {s: cell("d", s, 0.25, samples=12) for s in (0, 1)}
    other = {**same, "d": evaluated_otherwise}
    assert "they restored one SFT warm start" in _warm_starts.warm_start_text(other)
    assert _warm_starts.warm_start_text({"a": same["a"], "d": other["d"]}) == ""  # none alike
    cells = {**same, "ccc": {0: cell("ccc", 0, 0.5), 1: cell("ccc", 1, 0.5 + 1 / 4096)}}
    assert _warm_starts.warm_start_groups(cells)[0] == [(["a", "bb", "ccc"], {
        "eval/accuracy": 0.5, "eval/tool_calls": 0.5})]  # fmt: skip
    assert [g[0] for g in _warm_starts.warm_start_groups(cells)[1]] == [["a", "bb"], ["ccc"]]
    text = _warm_starts.warm_start_text(cells)
    assert "In 1 of 2 seeds, arms evaluated alike (the same `task`" in text
    assert "| s1 | `a`, `bb` | 0.62500 | 0.50000 | not recorded | not recorded |" in text
    assert "| s1 | `ccc` | 0.50024 | 0.50000 | not recorded | not recorded |" in text
    # the recorded fingerprints tell a run-to-run difference from a warm start trained again
    for arm in ("a", "bb", "ccc"):
        (tmp_path / arm / "s1" / "warm_start.txt").write_text("sha256:" + "1" * 64 + "\n")
    text = _warm_starts.warm_start_text(cells)
    assert "| s1 | `a`, `bb` | 0.62500 | 0.50000 | 111111111111 | same warm start |" in text
    assert "| s1 | `ccc` | 0.50024 | 0.50000 | 111111111111 | same warm start |" in text
    (tmp_path / "ccc" / "s1" / "warm_start.txt").write_text("sha256:" + "2" * 64 + "\n")
    text = _warm_starts.warm_start_text(cells)
    assert "| s1 | `ccc` | 0.50024 | 0.50000 | 222222222222 | another warm start |" in text
    (tmp_path / "bb" / "s1" / "warm_start.txt").unlink()
    text = _warm_starts.warm_start_text(cells)
    assert (
        "| s1 | `a`, `bb` | 0.62500 | 0.50000 | 111111111111, not recorded | not recorded |" in text
    )


def test_saw_rules_static_arm_averages_every_preregistered_seed_from_root_or_archive(tmp_path):
    """``grpo_saw_static``'s weights are SAW's time average over every step of the ``saw_grpo``
    cells of all 8 pre-registered seeds, whatever ``--seeds`` an invocation runs: seeds done under
    the grid's root are read there, the rest from the archive (an earlier session's cells)."""
    import ast

    import numpy as np

    from experiments import saw_rule
    from experiments.saw_cv import OBJECTIVES

    root, archive = tmp_path / "root", tmp_path / "archive"
    rng = np.random.default_rng(0)
    want = []
    for seed in saw_rule.SEEDS:
        d = (root if seed < 3 else archive) / "saw_grpo" / f"s{seed}"
        d.mkdir(parents=True)
        w = rng.uniform(0.1, 1.0, size=(4, len(OBJECTIVES)))
        want += w.tolist()
        rows = [{"step": i + 1, **{f"advantage/saw/weight/{o}": float(x) for o, x in
                 zip(OBJECTIVES, r)}} for i, r in enumerate(w)]  # fmt: skip
        rows.append({"step": 4, "eval/accuracy": 0.5})  # an evaluation row: no weights
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if seed < 3:
            (d / "done").write_text("")
    mean = np.mean(want, axis=0)
    got = saw_rule.static_weights(str(root), (5,), quick=False, archive=str(archive))
    assert np.allclose(ast.literal_eval(got), mean / mean.sum(), rtol=1e-12)
    assert saw_rule.static_weights(str(root), (0, 1, 2, 3, 4, 5, 6, 7), False, str(archive)) == got
    (archive / "saw_grpo" / "s7" / "metrics.jsonl").unlink()
    assert saw_rule.static_weights(str(root), (5,), quick=False, archive=str(archive)) is None
    quick = saw_rule.static_weights(str(root), (0,), quick=True)  # --quick: its own seeds
    first = np.mean(want[:4], axis=0)
    assert np.allclose(ast.literal_eval(quick), first / first.sum(), rtol=1e-12)


def test_comparisons_need_two_seeds_of_both_arms(tmp_path):
    """``--quick`` runs 1 seed: its comparisons are left out (the paired t needs 2 pairs, and
    raised before) and the page says why; with 2 seeds the comparison is made."""
    from types import SimpleNamespace

    from experiments import _claims

    def cell(arm, seed, acc):
        d = tmp_path / arm / f"s{seed}"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(json.dumps({"step": 2, "eval/accuracy": acc}) + "\n")
        return str(d)

    measure = _claims.Measure("acc", "outcome", lambda rows: rows[-1]["eval/accuracy"])
    claim = SimpleNamespace(measures=[measure], comparisons=[_claims.Comparison("a", "b", "acc")])
    one = {"a": {0: cell("a", 0, 0.5)}, "b": {0: cell("b", 0, 0.25)}}
    assert _claims.comparisons(claim, one) == []
    assert "(`a` − `b`): a paired comparison needs >= 2" in _claims.too_few_seeds(claim, one)
    assert _claims.kind_verdict([], "outcome") == "no comparison"
    two = {k: {**v, 1: cell(k, 1, acc)} for (k, v), acc in zip(one.items(), (0.75, 0.25))}
    (row,) = _claims.comparisons(claim, two)
    assert row["by_seed"].n == 2 and row["by_seed"].mean == pytest.approx(0.375)
    assert _claims.too_few_seeds(claim, two) == ""


def test_a_page_family_tests_not_worse_with_its_margin_and_drops_identical_and_duplicates(
    tmp_path,
):
    """A "not worse" comparison (``margin``) is the one-sided non-inferiority test, stated in the
    pre-registration; an all-zero comparison is not tested and a duplicate counted once, so the
    family is 2 of 4, and the page says so."""
    from types import SimpleNamespace

    from experiments import _claims
    from mojax import stats

    accs = {"a": [0.60, 0.62, 0.58, 0.61], "b": [0.61, 0.62, 0.60, 0.62]}
    accs["c"], accs["d"] = list(accs["b"]), list(accs["a"])  # c = b, d = a: identical arms

    def cell(arm, seed, acc):
        d = tmp_path / arm / f"s{seed}"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(json.dumps({"step": 2, "eval/accuracy": acc}) + "\n")
        return str(d)

    cells = {k: {s: cell(k, s, x) for s, x in enumerate(v)} for k, v in accs.items()}
    measure = _claims.Measure("acc", "outcome", lambda rows: rows[-1]["eval/accuracy"])
    C = _claims.Comparison
    comps = [C("a", "b", "acc", margin=0.05), C("a", "b", "acc"), C("a", "c", "acc"),
             C("a", "d", "acc")]  # fmt: skip
    claim = SimpleNamespace(measures=[measure], comparisons=comps)
    with pytest.warns(UserWarning) as caught:
        rows = _claims.comparisons(claim, cells)
    assert len(caught) == 2
    diffs = [a - b for a, b in zip(accs["a"], accs["b"])]  # mean -0.01: not better, not worse
    ni = stats.noninferiority(diffs, 0.05)
    two = stats.paired_t(diffs)
    assert rows[0]["by_seed"].p == ni.p and rows[1]["by_seed"].p == two.p
    assert rows[0]["p_holm"] == pytest.approx(min(1, 2 * ni.p)) and ni.p < 0.025
    assert [r["verdict"] for r in rows[:2]] == ["reproduced", "inconclusive"]
    assert rows[2]["status"] == "duplicate" and rows[3]["verdict"] == "identical (not tested)"
    assert "family holds 2 of these 4" in _claims.comparisons_table(rows)
    grid = SimpleNamespace(common=(), rl=(), seeds=(0, 1, 2, 3))
    pre = _claims.prereg_text(SimpleNamespace(prereg="p", measures=[measure], arms=[],
                                              comparisons=comps, grid=grid))  # fmt: skip
    assert "`a` − `b`: acc (not worse by more than 0.05)" in pre and "non-inferiority" in pre
    plain = SimpleNamespace(
        prereg="p", measures=[measure], arms=[], comparisons=comps[1:], grid=grid
    )
    assert "non-inferiority" not in _claims.prereg_text(plain)  # older pages' rule text unchanged


def _default_seed(root, seed: int, start: dict, end: dict, samples: dict[int, list[tuple]]):
    """A done default-run workdir: metrics with two evaluations (``start`` at step 0, ``end`` at 40)
    and eval files whose samples are ``(problem, class, success, n_calls)``."""
    w = root / f"s{seed}"
    (w / "eval").mkdir(parents=True)
    rows = [{"step": 0, **start}, {"step": 40, **end}]
    (w / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step, recs in samples.items():
        lines = [
            json.dumps({"problem": p, "sample": 0, "class": c, "success": ok, "n_calls": n})
            for p, c, ok, n in recs
        ]
        (w / "eval" / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    (w / "done").write_text("")


def test_default_run_page_tests_each_class_against_scipy(tmp_path):
    """experiments/default_run.py: each seed's end − start per class; accuracy's non-inferiority
    and tool efficiency's two-sided p-values equal scipy's paired t (Holm over the 8); the
    per-problem tool efficiency uses N_opt 0 on the rule class and 1 elsewhere."""
    import math

    import numpy as np
    from scipy import stats as sps

    from experiments import default_run
    from mojax import stats

    rng = np.random.default_rng(0)
    classes = default_run.CLASSES
    for seed in range(3):
        start = {default_run.key(m, c): float(rng.uniform(0.5, 0.8)) for m in
                 ("accuracy", "tool_efficiency") for c in classes}  # fmt: skip
        end = {k: v + float(rng.uniform(-0.01, 0.2)) for k, v in start.items()}
        samples = {0: [("a", "rule", True, 1), ("b", "hard", False, 0)],
                   40: [("a", "rule", True, 0), ("b", "hard", True, 2)]}  # fmt: skip
        _default_seed(tmp_path, seed, start, end, samples)
    results = {s: read_metrics(tmp_path / f"s{s}") for s in range(3)}
    hyps = default_run.hypotheses(results)
    assert [h.name for h in hyps][:2] == ["accuracy/overall", "tool_efficiency/overall"]
    raw = []
    for h in hyps:
        metric, cls = h.name.split("/")
        k = default_run.key(metric, cls)
        diffs = [results[s][1][k] - results[s][0][k] for s in range(3)]
        assert np.allclose(h.diffs, diffs)
        if h.margin:  # H0: Δ <= -margin
            raw.append(sps.ttest_1samp(np.add(diffs, h.margin), 0.0, alternative="greater").pvalue)
        else:
            raw.append(sps.ttest_1samp(diffs, 0.0).pvalue)
    got = [o.p_holm for o in stats.holm_family(hyps, default_run.ALPHA)]
    want = np.minimum(1, np.maximum.accumulate(np.sort(raw) * (len(raw) - np.arange(len(raw)))))
    assert np.allclose(sorted(got), want)
    per = default_run.per_problem(str(tmp_path / "s0" / "eval" / "40.jsonl"))
    assert per == {"a": (1.0, 1.0), "b": (1.0, math.exp(-0.7))}
    text = default_run.results_text(results, str(tmp_path), str(tmp_path / "out"))
    assert (tmp_path / "out" / "default_run" / "curves.png").stat().st_size > 0
    assert "two-stage interval" in text and "| hard |" in text
