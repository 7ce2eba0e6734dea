"""Speed of the advantage library: jit non-dominated sorting vs a moocore loop, and every estimator.

Every side runs in its own process, sides alternating (A B, B A, A B, ...) for ``--rounds`` rounds
(>= 3; ``benchmarks/_harness.py``); the script refuses to start when the 1-minute load average
exceeds the core count (``--force`` overrides, loudly). Run from the repository root::

    python benchmarks/advantages.py                  # quiet machine: the numbers to quote
    python benchmarks/advantages.py --shapes 64,8,2 --repeats 2 --force   # smoke test

Non-dominated sorting (issue 17 target: >= 15x the moocore loop, public call from numpy), at
``[P, G, M]`` = ``[1024, 16, 3]``, ``[1024, 64, 2]``, ``[1024, 16, 5]``, ``[256, 256, 3]``, integer
objectives in 0..4 (many ties, as discrete rewards give; the target's data) and, for information,
standard-normal floats. Sides, each timed as the min of ``--repeats`` calls after a warm-up:

* ``moocore``: ``moocore.pareto_rank(group, maximise=True)`` in a Python loop over the P groups;
* ``mojax``: ``mojax.pareto.nondominated_rank(points)`` from numpy (transfer + checks + jit call);
  the same worker also times the jit core on device arrays and its two parts, the all-pairs pass
  (dominator bitsets) and the front peeling (see ``mojax/pareto/nondominated.py``).

Results are checked equal to moocore (once, in a separate process) before any timing.

Estimators (``--estimators 1``, no anchor): every estimator at ``[P=1024, G=16, M=4]`` (AWPO: M=2;
VPO / Multi-RLVR: S=3 answers per set), min of ``--repeats`` public calls after compilation.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

SHAPES = "1024,16,3;1024,64,2;1024,16,5;256,256,3"
KINDS = ("ints", "floats")


def make_points(p, g, m, kind):
    rng = np.random.default_rng(0)
    if kind == "ints":
        return rng.integers(0, 5, size=(p, g, m)).astype(np.float32)
    return rng.normal(size=(p, g, m)).astype(np.float32)


def parse_shapes(text):
    return [tuple(int(v) for v in s.split(",")) for s in text.split(";") if s]


def moocore_loop(points):
    import moocore

    return np.stack([moocore.pareto_rank(group, maximise=True) for group in points])


def check_worker(args):
    from mojax.pareto import nondominated_rank

    for p, g, m in parse_shapes(args.shapes):
        for kind in KINDS:
            pts = make_points(p, g, m, kind)
            np.testing.assert_array_equal(np.asarray(nondominated_rank(pts)), moocore_loop(pts))
    _harness.emit({"ok": True})


def moocore_worker(args):
    out = {}
    for p, g, m in parse_shapes(args.shapes):
        for kind in KINDS:
            pts = make_points(p, g, m, kind)
            out[f"{p},{g},{m} {kind}"] = _harness.time_calls(
                lambda pts=pts: moocore_loop(pts), max(3, args.repeats // 4)
            )
    _harness.emit(out)


def mojax_worker(args):
    import jax
    import jax.numpy as jnp

    from mojax.pareto import nondominated as nd
    from mojax.pareto import nondominated_rank

    out = {}
    for p, g, m in parse_shapes(args.shapes):
        for kind in KINDS:
            pts = make_points(p, g, m, kind)
            key = f"{p},{g},{m} {kind}"
            dev, ones = jnp.asarray(pts), jnp.ones((p, g), bool)
            out[key] = _harness.time_calls(
                lambda pts=pts: jax.block_until_ready(nondominated_rank(pts)), args.repeats
            )
            out[key + " core"] = _harness.time_calls(
                lambda d=dev, v=ones: jax.block_until_ready(nd._rank_jit(d, v)), args.repeats
            )
            # breakdown of the core: the all-pairs pass (dominator bitsets) and the front peeling
            w, k = nd._word_split(g)
            build = jax.jit(lambda x, w=w, k=k: nd._dominator_words(nd._order_keys(x), w, k))
            peel = jax.jit(lambda words, v, k=k: nd._peel(words, v, k))
            words = build(dev)
            out[key + " build"] = _harness.time_calls(
                lambda d=dev, f=build: jax.block_until_ready(f(d)), args.repeats
            )
            out[key + " peel"] = _harness.time_calls(
                lambda v=ones, f=peel, a=words: jax.block_until_ready(f(a, v)), args.repeats
            )
            out[key + " fronts"] = int(np.asarray(nondominated_rank(pts)).max()) + 1
    _harness.emit(out)


def estimators_worker(args):
    import jax

    from mojax import advantages as adv

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
    out = {
        name: _harness.time_calls(lambda fn=fn: jax.block_until_ready(fn()), args.repeats)
        for name, fn in calls.items()
    }
    _harness.emit(out)


def nds_report(args, runs):
    for p, g, m in parse_shapes(args.shapes):
        for kind in KINDS:
            key = f"{p},{g},{m} {kind}"
            fronts = runs["mojax"][0][key + " fronts"]
            target = args.target if kind == "ints" else None
            title = f"nondominated_rank [P={p}, G={g}, M={m}] {kind} (max fronts {fronts})"
            _harness.report(title + ": public call from numpy", runs, key, "moocore", ["mojax"],
                            target=target)  # fmt: skip
            for suffix in (" core", " build", " peel"):
                vals = [r[key + suffix] for r in runs["mojax"]]
                rat = [a[key] / s[key + suffix] for a, s in zip(runs["moocore"], runs["mojax"])]
                lo, med, hi = _harness.spread([1e3 * v for v in vals])
                rlo, rmed, rhi = _harness.spread(rat)
                name = {" core": "jit core (device arrays)", " build": "  of which all-pairs pass",
                        " peel": "  of which front peeling"}[suffix]  # fmt: skip
                print(f"  {name:<26s} {lo:9.3f} {med:9.3f} {hi:9.3f} ms; moocore / it: "
                      f"min {rlo:.1f}x median {rmed:.1f}x max {rhi:.1f}x")  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per worker (min kept)")
    ap.add_argument("--shapes", default=SHAPES, help="'P,G,M;P,G,M;...'")
    ap.add_argument("--target", type=float, default=15.0)
    ap.add_argument("--estimators", type=int, default=1, help="also time every estimator")
    args = ap.parse_args(argv)
    if args.worker:
        workers = {"check": check_worker, "moocore": moocore_worker, "mojax": mojax_worker,
                   "estimators": estimators_worker}  # fmt: skip
        return workers[args.worker](args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    common = ["--repeats", str(args.repeats), "--shapes", args.shapes]
    _harness.run_worker(__file__, ["--worker", "check", *common], _harness.worker_env())
    print("results equal to moocore.pareto_rank on every benchmarked batch")
    runs = _harness.alternate(__file__, {"moocore": common, "mojax": common}, args.rounds)
    nds_report(args, runs)
    if args.estimators:
        est = _harness.alternate(__file__, {"estimators": common}, args.rounds)["estimators"]
        print(f"\nestimators at [P=1024, G=16, M=4], public call, min of {args.repeats} calls "
              f"per process; over {args.rounds} processes (ms):")  # fmt: skip
        for name in est[0]:
            lo, med, hi = _harness.spread([1e3 * r[name] for r in est])
            print(f"  {name:26s} min {lo:8.3f}  median {med:8.3f}  max {hi:8.3f}")


if __name__ == "__main__":
    main()
