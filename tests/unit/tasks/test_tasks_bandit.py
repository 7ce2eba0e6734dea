"""The route bandit: its table (every context has >= 3 Pareto-optimal routes, by a brute-force
dominance check), single and set scoring against the table, and the maximum-entropy warm start."""

import numpy as np

from mojax.tasks.bandit import RouteBanditTask, route_table


def _dominated(r, i):
    return any(np.all(r[j] >= r[i]) and np.any(r[j] > r[i]) for j in range(len(r)) if j != i)


def test_every_context_has_several_pareto_optimal_routes():
    table = route_table(12, 6, seed=4)
    assert table.shape == (12, 6, 3) and table.min() >= 0 and table.max() <= 1
    for r in table:
        assert sum(not _dominated(r, i) for i in range(6)) >= 3
    np.testing.assert_array_equal(table, route_table(12, 6, seed=4))


def test_scoring_reads_the_table():
    task = RouteBanditTask(num_contexts=4, num_routes=5, table_seed=1)
    (ex,) = task.load("train", 1, seed=0)
    c = ex.target
    np.testing.assert_array_equal(task.score("<answer>C</answer>", ex), task.table[c, 2])
    assert task.score("<answer>Z</answer>", ex).tolist() == [0.0, 0.0, 0.0]
    rewards, valid = task.score_set("<route_1>B</route_1><route_2>Q</route_2>", ex, 3)
    np.testing.assert_array_equal(rewards[0], task.table[c, 1].astype(np.float32))
    assert valid.tolist() == [True, False, False]


def test_splits_cycle_through_every_context():
    task = RouteBanditTask(num_contexts=4)
    ex = task.load("test", 8, seed=2)
    assert sorted(e.target for e in ex[:4]) == [0, 1, 2, 3] == sorted(e.target for e in ex[4:])
    assert len({e.id for e in ex}) == 8


def test_warm_start_draws_uniform_routes_in_both_formats():
    class Render:
        def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
            return messages[-1]["content"]

    task = RouteBanditTask(num_contexts=3, num_routes=4)
    ex = task.load("train", 300, seed=0)
    pairs = task.demo_pairs(ex, Render(), 2, seed=5)
    singles = [r for p, r in pairs[0::2]]
    counts = {k: sum(s == f"<answer>{k}</answer>" for s in singles) for k in task.routes}
    assert all(50 <= n <= 100 for n in counts.values()), counts  # ~75 each
    for _, r in pairs[1::2]:
        rewards, valid = task.score_set(r, ex[0], 2, dedup=True)
        assert valid.all()  # two distinct, parseable routes
