"""Evaluation summary against hand-computed values."""

import json

import numpy as np
import pytest

from mojax.rl.evaluate import summarize, write_report
from mojax.tasks.calculator import CalculatorTask


def test_summary_by_hand(tmp_path):
    task = CalculatorTask()  # success = r_task at 1; w* = (0.6, 0.4)
    r = np.array(
        [[[1, 1.0], [0, 1.0], [1, 0.5]], [[0, 0.0], [0, 1.0], [1, 0.0]]], np.float32
    )  # [P=2, N=3, M=2]
    valid = np.array([[True, True, True], [True, False, True]])
    calls = np.array([[0, 1, 2], [1, 0, 0]])
    s = summarize(task, r, valid, calls, ks=(1, 2, 3, 5))
    assert s["eval/accuracy"] == pytest.approx(3 / 6)  # successes over all 6 samples
    assert s["eval/tool_calls"] == pytest.approx(4 / 6)
    # objective means over samples, invalid samples counted as 0
    assert s["eval/r_task"] == pytest.approx(3 / 6)
    assert s["eval/r_tool"] == pytest.approx((1 + 1 + 0.5 + 0 + 0) / 6)
    # best@2: p0 max(1.0, 0.4) = 1.0; p1: first two answers, the second invalid -> 0.0
    assert s["eval/best@2"] == pytest.approx(0.5)
    assert s["eval/best@3"] == pytest.approx((1.0 + 0.6) / 2)
    # pass@1 with n=3: c/n per problem -> (2/3 + 1/3)/2
    assert s["eval/pass@1"] == pytest.approx(0.5)
    assert s["eval/pass@2"] == pytest.approx(((1 - 0) + (1 - 1 / 3)) / 2)
    assert "eval/best@5" not in s
    write_report(str(tmp_path / "eval.json"), s, header="test")
    assert json.loads((tmp_path / "eval.json").read_text())["eval/accuracy"] == 0.5
    assert (tmp_path / "eval.txt").read_text().startswith("test\n")


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="rewards must be"):
        summarize(CalculatorTask(), np.zeros((2, 2)), np.zeros((2, 2), bool), np.zeros((2, 2)))
