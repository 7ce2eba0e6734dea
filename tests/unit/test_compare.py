"""``mojax.compare`` against scipy and hand-computed cases: the paired t interval and p-value
(``scipy.stats.ttest_rel`` and the textbook formula), Holm's step-down adjustment, the paired
bootstrap, the verdict words, and a whole comparison over run directories written here."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from mojax import compare as C

A = [0.71, 0.64, 0.80, 0.69, 0.75, 0.70, 0.66, 0.78]
B = [0.65, 0.66, 0.72, 0.61, 0.70, 0.69, 0.60, 0.70]


def test_paired_t_matches_scipy_and_the_formula():
    d = np.subtract(A, B)
    got = C.paired_t(d)
    ref = stats.ttest_rel(A, B)
    assert got.p == pytest.approx(ref.pvalue, rel=1e-12)
    se = d.std(ddof=1) / math.sqrt(len(d))
    q = stats.t.ppf(0.975, len(d) - 1)
    assert (got.low, got.high) == pytest.approx((d.mean() - q * se, d.mean() + q * se))
    assert got.n == 8 and got.mean == pytest.approx(d.mean())


def test_paired_t_of_identical_differences():
    """The exact sign-flip test (``tests/unit/test_stats.py``): 3 equal differences give p = 1/4, not 0."""
    assert C.paired_t([0.1, 0.1, 0.1]).p == 0.25
    assert C.paired_t([0.0, 0.0]).p == 1.0
    with pytest.raises(ValueError, match=">= 2 pairs"):
        C.paired_t([0.3])


def test_holm_hand_case():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max
    assert C.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert C.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_paired_bootstrap_resamples_pairs():
    d = np.subtract(A, B)
    got = C.paired_bootstrap(d, reps=20_000, seed=3)
    rng = np.random.default_rng(3)  # the same draws, the mean of each resample by a loop
    idx = rng.integers(0, len(d), (20_000, len(d)))
    means = np.array([np.mean([d[i] for i in row]) for row in idx])
    assert (got.low, got.high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert got.low < d.mean() < got.high and got.mean == pytest.approx(d.mean())
    flat = C.paired_bootstrap([0.2] * 5)
    assert flat.low == flat.high == pytest.approx(0.2) and flat.p == 0.0


def test_verdict_words():
    assert C.verdict(0.02, 0.01, "higher") == "reproduced"
    assert C.verdict(-0.02, 0.01, "higher") == "opposite"
    assert C.verdict(0.02, 0.2, "higher") == "inconclusive"
    assert C.verdict(-0.02, 0.01, "lower") == "reproduced"


def _run(root, name, seed, acc, per_problem):
    work = root / name / f"s{seed}"
    (work / "eval").mkdir(parents=True)
    (work / "config.json").write_text(json.dumps({"seed": seed}))
    rows = [{"step": 0, "eval/accuracy": 0.5}, {"step": 4, "eval/accuracy": acc, "calls": 2 - acc}]
    (work / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    lines = []
    for problem, successes in per_problem.items():
        for n, ok in enumerate(successes):
            row = {"problem": problem, "sample": n, "rewards": {"r": float(ok)}, "valid": True}
            lines.append(json.dumps({**row, "success": bool(ok), "n_calls": 0}))
    (work / "eval" / "4.jsonl").write_text("\n".join(lines) + "\n")
    return str(work)


def test_compare_over_run_directories(tmp_path, capsys):
    arms = {"new": [], "old": []}
    for seed, (a, b) in enumerate(zip(A, B)):
        arms["new"].append(_run(tmp_path, "new", seed, a, {"p1": [1, 1], "p2": [1, 0]}))
        arms["old"].append(_run(tmp_path, "old", seed, b, {"p1": [1, 0], "p2": [0, 0]}))
    (row,) = C.compare(arms, "old", "eval/accuracy", reps=2000)
    assert row["by_seed"].p == pytest.approx(stats.ttest_rel(A, B).pvalue)
    assert row["p_holm"] == row["by_seed"].p and row["verdict"] == "reproduced"
    bp = row["by_problem"]  # per seed, per problem: p1 1.0 - 0.5, p2 0.5 - 0.0
    assert bp.n == 16 and bp.mean == pytest.approx(0.5)
    assert (bp.low, bp.high) == pytest.approx((0.5, 0.5))  # every seed's problems: 0.5, 0.5
    C.main(["--arm", f"new={tmp_path}/new/s*", "--arm", f"old={tmp_path}/old/s*",
            "--baseline", "old", "--metric", "eval/accuracy"])  # fmt: skip
    out = capsys.readouterr().out
    assert "| new − old | eval/accuracy | 8 |" in out and "reproduced" in out


def test_by_problem_pairs_seed_specific_problems_within_their_seed():
    """The calculator draws its held-out problems per seed (ids ``calc/<seed>/...``): no problem is
    in every run, and each pairs with the baseline's run of its own seed."""
    arm = [{"calc/0/a": 1.0, "calc/0/b": 0.0}, {"calc/1/c": 1.0}]
    base = [{"calc/0/a": 0.0, "calc/0/b": 0.5}, {"calc/1/c": 0.25}]
    assert C.by_problem(arm, base) == [1.0, -0.5, 0.75]
    # a fixed test file: the same problems in every run, averaged over the runs first
    assert C.by_problem([{"p": 1.0}, {"p": 0.0}], [{"p": 0.0}, {"p": 0.0}]) == [0.5]


def test_a_direction_per_metric(tmp_path, capsys):
    """``calls`` (2 − accuracy) falls where accuracy rises: one word for both metrics calls it
    ``opposite``; ``--direction eval/accuracy=higher,calls=lower`` reproduces both, in one Holm
    family of 2."""
    arms = {"new": [], "old": []}
    for seed, (a, b) in enumerate(zip(A, B)):
        arms["new"].append(_run(tmp_path, "new", seed, a, {"p1": [1]}))
        arms["old"].append(_run(tmp_path, "old", seed, b, {"p1": [0]}))
    metrics = ["eval/accuracy", "calls"]
    rows = C.compare(arms, "old", metrics, direction="higher", reps=200)
    assert [r["verdict"] for r in rows] == ["reproduced", "opposite"]
    rows = C.compare(arms, "old", metrics, direction={"eval/accuracy": "higher", "calls": "lower"})
    assert [r["verdict"] for r in rows] == ["reproduced", "reproduced"]
    p = stats.ttest_rel(A, B).pvalue  # the same |differences|: the same p, Holm x2
    assert [r["p_holm"] for r in rows] == pytest.approx([2 * p, 2 * p])
    base = ["--arm", f"new={tmp_path}/new/s*", "--arm", f"old={tmp_path}/old/s*", "--baseline", "old",
            "--metric", "eval/accuracy", "--metric", "calls"]  # fmt: skip
    C.main(base + ["--direction", "eval/accuracy=higher,calls=lower"])
    assert capsys.readouterr().out.count("reproduced") == 2
    C.main(base + ["--direction", "lower,eval/accuracy=higher"])  # a bare word: the default
    assert capsys.readouterr().out.count("reproduced") == 2
    with pytest.raises(SystemExit):
        C.main(base + ["--direction", "eval/accuracy=higher"])  # calls has none
    assert "no direction for ['calls']" in capsys.readouterr().err


def test_parse_directions():
    ms = ["eval/r_task", "calls"]
    assert C.parse_directions("lower", ms) == {"eval/r_task": "lower", "calls": "lower"}
    assert C.parse_directions("eval/r_task=higher, calls=lower", ms) == {
        "eval/r_task": "higher",
        "calls": "lower",
    }
    for bad, msg in [("up", "'up' is not"), ("x=higher,higher", r"names \['x'\]"),
                     ("higher,lower", "more than one default"), ("calls=lower", "no direction")]:  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            C.parse_directions(bad, ms)


def test_by_problem_per_seed_pairs_within_each_seed():
    arm = {0: {"a": 1.0, "b": 0.0}, 1: {"c": 1.0, "d": 0.5}, 2: {"a": 0.0}}
    base = {0: {"a": 0.0, "b": 0.5}, 1: {"c": 0.25}}  # seed 2 only in the arm; d not in base
    assert C.by_problem_per_seed(arm, base) == [[1.0, -0.5], [0.75]]
    with pytest.raises(ValueError, match="seed 1: the two arms evaluated no common problem"):
        C.by_problem_per_seed({1: {"x": 1.0}}, {1: {"y": 0.0}})
