"""SAW offsets from the task's declared theoretical minima (SAW arXiv:2606.07705, Alg. 1 line 3)
against a numpy loop, and the weights logged under the objective names."""

import numpy as np
import pytest

from mojax.advantages import saw_grpo
from mojax.advantages.saw import saw_task_kwargs
from mojax.tasks.toolrl import ToolRLTask


def np_saw_weights(r, v, mins, delta=1e-8):
    vals = r[v].astype(np.float64)  # [N, M] over the whole batch
    cv = []
    for k in range(vals.shape[1]):
        x = vals[:, k] - mins[k] + delta
        cv.append(x.std() / (x.mean() + delta))
    cv = np.array(cv)
    return cv / cv.sum()


def test_saw_offsets_come_from_the_task_objectives():
    task = ToolRLTask("toolrl")  # (format in [0, 1], correctness in [-3, 3])
    kw = saw_task_kwargs(task)
    assert kw == {"reward_min": (0.0, -3.0), "objective_names": ("format", "correctness")}
    rng = np.random.default_rng(0)  # a ToolRL-like batch: format mostly 1, correctness in [-3, 3]
    fmt = (rng.random((8, 4)) < 0.8).astype(np.float32)
    corr = np.where(fmt > 0, rng.choice([-1.0, 1.0, 7 / 3, 3.0], (8, 4)), -3.0).astype(np.float32)
    corr[0, 0] = 0.5  # batch minimum of correctness above -3 for some samples only
    r = np.stack([fmt, np.maximum(corr, -1.0)], -1)  # no sample at the theoretical -3
    v = np.ones((8, 4), bool)
    out = saw_grpo(r, v, **kw)
    got = np.array([out.metrics["saw/weight/format"], out.metrics["saw/weight/correctness"]])
    np.testing.assert_allclose(got, np_saw_weights(r, v, (0.0, -3.0)), rtol=1e-5)
    batch_min = saw_grpo(r, v)  # the old behaviour: offsets by the batch minimum
    old = np.array([batch_min.metrics["saw/weight/0"], batch_min.metrics["saw/weight/1"]])
    np.testing.assert_allclose(old, np_saw_weights(r, v, r[v].min(0)), rtol=1e-5)
    assert np.abs(got - old).max() > 0.05
    with pytest.raises(ValueError, match="saw_task_kwargs"):
        saw_task_kwargs([1.0, 2.0])
