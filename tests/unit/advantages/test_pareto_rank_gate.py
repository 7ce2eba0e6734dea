"""Why Stage 2's ranking can reorder a group only when ``r_tool`` is paid to failures too
(ParetoPO, arXiv:2606.16111, Eqs. 4, 7-9; ``docs/results/paretopo_rule.md``'s reading).

Success-gated (``tool_reward.gate="success"``), a group's reward points are ``(0, 0)`` for failures
and ``(1, exp(-alpha |N_call - N_opt|))`` for successes: any two are comparable under dominance (a
chain), so non-dominated sorting orders the group exactly as ``w·r`` does and the Pareto-rank
advantages keep GRPO's order (only their sizes differ). Paid to every sample (``"all"``), a wrong
answer without a call, ``(0, 1)``, is non-dominated beside a correct call and ranks above a correct
answer with one call too many. Reference: a numpy dominance check and the scalar ``w·r`` order."""

import numpy as np

from mojax import advantages as adv
from mojax.pareto.tool_efficiency import fixed_tool_reward, gate_by_success

W = (0.6, 0.4)


def _group_rewards(gate: str, seed: int = 0, p: int = 64, g: int = 8) -> np.ndarray:
    """``[P, G, 2]`` ``(r_task, r_tool)`` of random groups: success ~ Bernoulli(0.6), 0-3 calls,
    the calculator's fixed ``N_opt`` (0 or 1 per prompt)."""
    rng = np.random.default_rng(seed)
    success = rng.random((p, g)) < 0.6
    calls = rng.integers(0, 4, (p, g))
    n_opt = rng.integers(0, 2, p)
    r_tool = gate_by_success(fixed_tool_reward(calls, n_opt), success, gate)
    return np.stack([success.astype(np.float32), r_tool], -1)


def _is_chain(r: np.ndarray) -> bool:
    """Every two points of a group ``[G, M]`` are comparable: one is >= the other in every
    objective."""
    ge = (r[:, None, :] >= r[None, :, :]).all(-1)
    return bool((ge | ge.T).all())


def _order_pairs(values: np.ndarray) -> np.ndarray:
    """``sign(v_i - v_j)`` for every pair of a group ``[G]``."""
    return np.sign(values[:, None] - values[None, :])


def test_success_gated_tool_reward_forms_a_chain_so_ranking_keeps_the_scalar_order():
    rewards = _group_rewards("success")
    a = np.asarray(adv.pareto_rank(rewards, weights=W).advantages)
    scalar = rewards @ np.asarray(W, np.float32)
    for r, ai, si in zip(rewards, a, scalar):
        assert _is_chain(r)
        np.testing.assert_array_equal(_order_pairs(ai), _order_pairs(si))


def test_tool_reward_paid_to_every_sample_lets_ranking_reorder_a_group():
    rewards = _group_rewards("all")
    a = np.asarray(adv.pareto_rank(rewards, weights=W).advantages)
    scalar = rewards @ np.asarray(W, np.float32)
    chains = [_is_chain(r) for r in rewards]
    reordered = [
        not np.array_equal(_order_pairs(ai), _order_pairs(si)) for ai, si in zip(a, scalar)
    ]
    assert not all(chains) and any(reordered)
    assert not any(o for o, c in zip(reordered, chains) if c)  # only groups that are no chain
    # the named case: a wrong answer without a call on a rule problem (N_opt = 0) against a correct
    # answer with one call too many, beside a correct call that dominates the latter
    e = float(np.exp(-0.7))
    group = np.asarray([[[0.0, 1.0], [1.0, e], [1.0, e * e]]], np.float32)
    a = np.asarray(adv.pareto_rank(group, weights=W).advantages)[0]
    assert group[0, 2] @ W > group[0, 0] @ W  # GRPO's scalar prefers the correct answer
    assert a[0] > a[2]  # the ranking prefers the wrong one (front 1 against front 2)


def test_logged_reordered_pairs_count_the_pairs_whose_order_differs_from_w_dot_r():
    """``pareto/reordered_pairs`` / ``reordered_group_frac`` against a numpy count of the pairs
    whose advantage order differs from the ``w·r`` order: 0 success-gated, > 0 paid to all. One
    group with a single valid sample is left out of both counts."""
    for gate in ("success", "all"):
        rewards = _group_rewards(gate, seed=1)
        valid = np.ones(rewards.shape[:2], bool)
        valid[0, 1:] = False  # a group with 1 valid sample: not a group that ranks
        out = adv.pareto_rank(rewards, valid, weights=W)
        a, scalar = np.asarray(out.advantages), rewards @ np.asarray(W, np.float32)
        differ = [
            int(np.triu(_order_pairs(ai) != _order_pairs(si), 1).sum())
            for ai, si in zip(a[1:], scalar[1:])
        ]
        g = rewards.shape[1]
        want_pairs = sum(differ) / (len(differ) * g * (g - 1) / 2)
        want_groups = np.mean([d > 0 for d in differ])
        got = out.metrics
        assert float(got["pareto/reordered_pairs"]) == np.float32(want_pairs), gate
        assert float(got["pareto/reordered_group_frac"]) == np.float32(want_groups), gate
        assert (want_pairs > 0) == (gate == "all")


def test_a_group_is_reordered_only_with_two_success_levels_below_a_failures_r_tool():
    """Binary ``r_task`` and ``r_tool`` paid to every sample (``docs/methods.md``, ParetoPO): a pair
    is reordered only when some failure's ``r_tool`` exceeds two distinct success levels. Checked on
    random groups of 0-3 calls against a fixed ``N_opt`` of 0 or 1; the condition does occur."""
    rng = np.random.default_rng(3)
    p, g = 512, 8
    success = rng.random((p, g)) < 0.5
    calls = rng.integers(0, 4, (p, g))
    n_opt = rng.integers(0, 2, p)
    r_tool = gate_by_success(fixed_tool_reward(calls, n_opt), success, "all")
    rewards = np.stack([success.astype(np.float32), r_tool], -1)
    for r in rewards:
        out = adv.pareto_rank(r[None], weights=W)
        reordered = float(out.metrics["pareto/reordered_group_frac"]) > 0
        levels = np.unique(r[r[:, 0] == 1, 1])
        fails = r[r[:, 0] == 0, 1]
        condition = any((levels < t).sum() >= 2 for t in fails)
        assert condition or not reordered, r
    frac = float(adv.pareto_rank(rewards, weights=W).metrics["pareto/reordered_group_frac"])
    assert frac > 0
