"""Speed of the advantage library: jit non-dominated sorting vs moocore, and every estimator.

Run from the repository root after ``pip install -e .`` (or with ``PYTHONPATH=.``):
``python benchmarks/advantages.py [--repeats 20]``

Anchors (issue 2), measured side by side in this run:

* ``nondominated_rank`` on ``[P=1024, G=16, M=3]`` integer objectives in 0..4 vs a Python loop of
  ``moocore.pareto_rank`` over the 1024 groups (target: >= 15x faster on a 2-core CPU); also
  ``[1024, 64, 2]`` and ``[1024, 16, 5]``. Results are checked equal before timing.
* every estimator at ``[P=1024, G=16, M=4]`` (AWPO: M=2 by definition; VPO / Multi-RLVR: S=3
  answers per set): median wall time of the public call after compilation.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import moocore
import numpy as np

from mojax import advantages as adv
from mojax.pareto import nondominated as nd
from mojax.pareto import nondominated_rank


def median_time(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` (results blocked on) after one warm-up call."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def moocore_loop(points: np.ndarray) -> np.ndarray:
    return np.stack([moocore.pareto_rank(group, maximise=True) for group in points])


def bench_nds(p: int, g: int, m: int, hi: int, repeats: int, target: float | None = None) -> None:
    rng = np.random.default_rng(0)
    points = rng.integers(0, hi + 1, size=(p, g, m)).astype(np.float32)
    ours = np.asarray(nondominated_rank(points))
    np.testing.assert_array_equal(ours, moocore_loop(points))
    dev_points = jnp.asarray(points)
    dev_valid = jnp.ones((p, g), bool)
    t_core = median_time(lambda: nd._rank_jit(dev_points, dev_valid), repeats)
    t_public = median_time(lambda: nondominated_rank(points), repeats)
    t_moo = median_time(lambda: moocore_loop(points), max(3, repeats // 4))
    print(
        f"nondominated_rank [P={p}, G={g}, M={m}] ints 0..{hi}: jit core {t_core * 1e3:8.3f} ms | "
        f"public call from numpy {t_public * 1e3:8.3f} ms | moocore loop {t_moo * 1e3:8.2f} ms | "
        f"speed-up {t_moo / t_core:6.1f}x (core), {t_moo / t_public:6.1f}x (public)"
    )
    if target is not None:
        verdict = "meets" if t_moo / t_public >= target else "MISSES"
        print(f"  -> public call {verdict} the >= {target:.0f}x target of issue 2")


def bench_estimators(repeats: int) -> None:
    rng = np.random.default_rng(1)
    p, g, m, s = 1024, 16, 4, 3
    rewards = rng.integers(0, 5, size=(p, g, m)).astype(np.float32) / 4
    valid = rng.random((p, g)) < 0.95
    set_rewards = rng.random((p, g, s, m)).astype(np.float32)
    set_valid = rng.random((p, g, s)) < 0.9
    awpo_rewards = np.stack([rewards[..., 0] * 2, rewards[..., 1]], -1)
    key = jax.random.key(0)
    tc = rng.integers(1, 512, size=(p, g))
    calls = {
        "grpo": lambda: adv.grpo(rewards, valid),
        "dr_grpo": lambda: adv.dr_grpo(rewards, valid),
        "gdpo": lambda: adv.gdpo(rewards, valid),
        "gdpo (batch_norm=token)": lambda: adv.gdpo(
            rewards, valid, batch_norm="token", token_counts=tc
        ),
        "mo_grpo": lambda: adv.mo_grpo(rewards, valid),
        "saw_grpo": lambda: adv.saw_grpo(rewards, valid),
        "saw_gdpo": lambda: adv.saw_gdpo(rewards, valid),
        "awpo (M=2)": lambda: adv.awpo(awpo_rewards, valid, r_max=2.0),
        "pareto_rank": lambda: adv.pareto_rank(rewards, valid, weights=(0.4, 0.3, 0.2, 0.1)),
        "vpo (S=3, K=100)": lambda: adv.vpo(set_rewards, set_valid, key=key),
        "random_w": lambda: adv.random_w(rewards, valid, key=key),
        "multi_rlvr (S=3)": lambda: adv.multi_rlvr(set_rewards, set_valid),
    }
    print(f"\nestimators at [P={p}, G={g}, M={m}], median of {repeats} calls after compile:")
    for name, fn in calls.items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        t_first = time.perf_counter() - t0
        t = median_time(fn, repeats)
        print(f"  {name:26s} {t * 1e3:8.3f} ms   (first call incl. compile {t_first:6.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, moocore {moocore.__version__}")
    bench_nds(1024, 16, 3, 4, args.repeats, target=15.0)
    bench_nds(1024, 64, 2, 4, args.repeats)
    bench_nds(1024, 16, 5, 4, args.repeats)
    bench_estimators(args.repeats)


if __name__ == "__main__":
    main()
