"""Where the CPU time of mojax's PPO update goes: its XLA thunks, read from a profiler trace.

The update of ``benchmarks/rl_step_peers.py``'s ``mojax-batch`` side at its default shape (33.6M
Qwen3, vocab 16384, 128 rows x T = 112, 64 loss positions per row, 16-row micro-batches, the
compacted vocabulary projection in chunks of 1024; ``--kept`` sets ``ppo.logprob_remat=False``)
on random tokens. One step compiles, one is timed untraced, one is traced with ``jax.profiler``;
the thunks on XLA's threads are read back (``gpu_profile.kernel_events``). Printed: the wall time,
the busy time (union of the thunks), the time by thunk name, and, for the matrix-product fusions,
the time, calls and FLOP rate of each product shape (operand shapes from the compiled HLO).

A profile, not a comparison: one process, nothing alternates. Thunks on XLA CPU can run
concurrently on the thread pool (independent products of a backward step), so a product's rate is
a lower bound on what it gets alone::

    python benchmarks/update_profile.py            # ~1.5 minutes
    python benchmarks/update_profile.py --kept
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402
from gpu_profile import kernel_events, summarise  # noqa: E402

_DOT = re.compile(r"%\S+ = (\S+) dot\(%(\S+), %(\S+)\), (.*?), metadata")
_PARAM = re.compile(r"%(\S+) = (\S+) parameter\(\d+\)")


def _dims(shape: str) -> list[int]:
    m = re.search(r"\[([\d,]*)\]", shape)
    return [int(v) for v in m.group(1).split(",") if v] if m else []


def fusion_products(hlo: str) -> dict[str, tuple[str, float]]:
    """``{fusion name: (product description, FLOPs per call)}`` of the fusions holding a dot."""
    calls, comps, cur = {}, collections.defaultdict(list), None
    for line in hlo.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            cur = line.split(" ")[0].lstrip("%")
        elif cur:
            comps[cur].append(line.strip())
        m = re.match(r"\s*(?:ROOT )?%(\S+) = \S+ fusion\(.*calls=%?([\w.\-]+)", line)
        if m:
            calls[m.group(1)] = m.group(2)
    out = {}
    for name, comp in calls.items():
        body = comps.get(comp, [])
        params = dict(m.groups() for m in map(_PARAM.match, body) if m)
        for m in filter(None, map(_DOT.search, body)):
            res, a, b, dims = m.groups()
            lhs, contract = (
                _dims(params.get(a, "")),
                re.search(r"lhs_contracting_dims=\{([\d,]*)", dims),
            )
            k = 1
            for i in filter(None, contract.group(1).split(",")):
                k *= lhs[int(i)] if int(i) < len(lhs) else 0
            flops = 2.0 * k * float(np.prod(_dims(res)))
            desc = f"{params.get(a, a).split('{')[0]} x {params.get(b, b).split('{')[0]} -> {res.split('{')[0]}"
            out[name] = (f"{desc} ({dims.split(', rhs_batch')[0]})", flops)
    return out


def build(kept: bool):
    """The jitted update, its state and batch at the ``rl_step_peers`` shape."""
    from mojax import learner, models
    from mojax import sharding as shl

    cfg = models.get_variant(
        "tiny-qwen3", vocab_size=16384, hidden_size=512, intermediate_size=1536, num_layers=8,
        num_heads=8, num_kv_heads=4, head_dim=64, tie_word_embeddings=True,
    )  # fmt: skip
    mesh = shl.make_mesh(1, 1, 1)
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-6, weight_decay=0.0))
    b, t = 128, 112
    ppo = learner.PPOConfig(microbatch_tokens=16 * t, shuffle=False, log_entropy=False,
                            logprob_chunk=1024, logprob_compact="batch", logprob_remat=not kept)  # fmt: skip
    step = learner.make_train_step(cfg, tx, ppo, mesh)
    state = learner.create_train_state(cfg, tx, seed=0, mesh=mesh)
    rng = np.random.default_rng(0)
    batch = dict(tokens=rng.integers(0, 16384, (b, t)).astype(np.int32),
                 loss_mask=np.zeros((b, t), np.float32), old_logprobs=np.full((b, t), -9.7, np.float32),
                 advantages=rng.normal(size=(b,)).astype(np.float32))  # fmt: skip
    batch["loss_mask"][:, 48:] = 1.0
    return step, state, batch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kept", action="store_true", help="ppo.logprob_remat=False")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    import jax

    print(_harness.machine_info())
    step, state, batch = build(args.kept)
    state, m = step(state, batch)
    jax.block_until_ready(m)  # compiles
    t0 = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    print(f"update, untraced: {time.perf_counter() - t0:.2f} s")
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            state, m = step(state, batch)
            jax.block_until_ready(m)
        events, _ = kernel_events(
            glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)[0]
        )
    report(events, step, state, batch, args.top)


def report(events, step, state, batch, top: int) -> None:
    """Prints the busy time, the top thunk names and the product fusions by shape."""
    s = summarise(events)
    print(f"traced: busy {s['busy'] / 1e9:.2f} s (union of the thunks)")
    for name in sorted(s["by_name"], key=lambda k: -s["by_name"][k])[:6]:
        print(f"  {name:45s} {s['by_name'][name] / 1e9:7.2f} s  {s['n_name'][name]:6d} thunks")
    b = step.check_batch(batch)
    products = fusion_products(step.jitted(b).lower(state, b).compile().as_text())
    by_shape = collections.defaultdict(lambda: [0.0, 0, 0.0])
    for name, _, dur in events:
        if name in products:
            desc, flops = products[name]
            acc = by_shape[desc]
            acc[0], acc[1], acc[2] = acc[0] + dur / 1e9, acc[1] + 1, acc[2] + flops
    total_t = sum(v[0] for v in by_shape.values())
    total_f = sum(v[2] for v in by_shape.values())
    print(f"product fusions: {total_t:.2f} s, {total_f / 1e12:.3f} TFLOP, "
          f"{total_f / total_t / 1e9:.0f} GFLOP/s")  # fmt: skip
    print("| seconds | calls | GFLOP/s | product |\n| --- | --- | --- | --- |")
    for desc, (t, n, f) in sorted(by_shape.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {t:.3f} | {n} | {f / t / 1e9:.0f} | `{desc}` |")


if __name__ == "__main__":
    main()
