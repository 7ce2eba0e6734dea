"""Where the CPU time of mojax's GRPO step goes: its XLA thunks, read from a profiler trace.

The two parts of ``benchmarks/rl_step_peers.py``'s ``mojax-batch`` side at its default shape
(33.6M Qwen3, vocab 16384, 16 prompts of 16..48 tokens x 8 samples, 64 new tokens), random
weights and tokens:

* ``--part update``: the PPO update (128 rows x T = 112, 64 loss positions per row, 16-row
  micro-batches, the compacted vocabulary projection in chunks of 1024; ``--kept`` sets
  ``ppo.logprob_remat=False``);
* ``--part generate``: the sampler's call (``mojax.sampling.generate``, temperature 1, shared
  prefill).

One call compiles, one is timed untraced, one is traced with ``jax.profiler``; the thunks on XLA's
threads are read back (``gpu_profile.kernel_events``). Printed: the untraced time, the busy time
(union of the thunks), the time by thunk name and, for the update, the time, calls and FLOP rate
of each matrix-product shape (operand shapes from the compiled HLO).

A profile, not a comparison: one process, nothing alternates. Thunks on XLA CPU can run
concurrently on the thread pool (independent products of a backward step), so a product's rate is
a lower bound on what it gets alone::

    python benchmarks/rl_step_profile.py                    # the update, ~1.5 minutes
    python benchmarks/rl_step_profile.py --part generate    # ~1 minute
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
            lhs = _dims(params.get(a, ""))
            contract = re.search(r"lhs_contracting_dims=\{([\d,]*)", dims).group(1)
            k = 1
            for i in filter(None, contract.split(",")):
                k *= lhs[int(i)] if int(i) < len(lhs) else 0
            flops = 2.0 * k * float(np.prod(_dims(res)))
            desc = f"{params.get(a, a).split('{')[0]} x {params.get(b, b).split('{')[0]} -> {res.split('{')[0]}"
            desc = f"{desc} ({dims.split(', rhs_batch')[0]})"
            if name in out:  # a fusion of several products: one entry, the FLOPs summed
                desc, flops = f"{out[name][0]}; {desc}", out[name][1] + flops
            out[name] = (desc, flops)
    return out


def _config():
    from mojax import models

    return models.get_variant(
        "tiny-qwen3", vocab_size=16384, hidden_size=512, intermediate_size=1536, num_layers=8,
        num_heads=8, num_kv_heads=4, head_dim=64, tie_word_embeddings=True,
    )  # fmt: skip


def build_update(kept: bool):
    """``(call, compiled HLO text)`` of the jitted update at the ``rl_step_peers`` shape."""
    import jax

    from mojax import learner
    from mojax import sharding as shl

    cfg = _config()
    mesh = shl.make_mesh(1, 1, 1)
    tx = learner.make_optimizer(learner.OptimizerConfig(learning_rate=1e-6, weight_decay=0.0))
    b, t = 128, 112
    ppo = learner.PPOConfig(microbatch_tokens=16 * t, shuffle=False, log_entropy=False,
                            logprob_chunk=1024, logprob_compact="batch", logprob_remat=not kept)  # fmt: skip
    step = learner.make_train_step(cfg, tx, ppo, mesh)
    box = [learner.create_train_state(cfg, tx, seed=0, mesh=mesh)]  # the state, donated per call
    rng = np.random.default_rng(0)
    loss_mask = np.zeros((b, t), np.float32)
    loss_mask[:, 48:] = 1.0
    batch = learner.PPOBatch(tokens=rng.integers(0, 16384, (b, t)).astype(np.int32),
                             loss_mask=loss_mask, old_logprobs=np.full((b, t), -9.7, np.float32),
                             advantages=rng.normal(size=(b,)).astype(np.float32))  # fmt: skip
    checked = step.check_batch(batch)
    hlo = step.jitted(checked).lower(box[0], checked).compile().as_text()

    def call():
        box[0], metrics = step(box[0], batch)
        jax.block_until_ready(metrics)

    return call, hlo


def build_generate():
    """``(call, None)`` of the sampler's call at the ``rl_step_peers`` shape."""
    import jax

    import mojax.models as mm
    import mojax.sampling as ms

    cfg = _config()
    model = mm.QwenModel(cfg, mm.init_params(cfg, jax.random.key(0)))
    rng = np.random.RandomState(0)
    lengths = rng.randint(16, 49, 16).astype(np.int32)
    tokens = np.zeros((16, 48), np.int32)
    for i, n in enumerate(lengths):
        tokens[i, :n] = rng.randint(2, 16384, n)

    def call():
        out = ms.generate(model, tokens, prompt_lengths=lengths, key=jax.random.key(0),
                          max_new_tokens=64, num_samples=8, stop_token_ids=[], temperature=1.0)  # fmt: skip
        jax.block_until_ready(out.tokens)

    return call, None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("update", "generate"), default="update")
    ap.add_argument("--kept", action="store_true", help="update: ppo.logprob_remat=False")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    import jax

    print(_harness.machine_info())
    call, hlo = build_update(args.kept) if args.part == "update" else build_generate()
    call()  # compiles
    t0 = time.perf_counter()
    call()
    print(f"{args.part}, untraced: {time.perf_counter() - t0:.2f} s")
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            call()
        paths = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)
        events, _ = kernel_events(paths[0])
    report(events, hlo, args.top)


def report(events, hlo: str | None, top: int) -> None:
    """Prints the busy time, the top thunk names and (with ``hlo``) the product fusions by shape."""
    s = summarise(events)
    print(f"traced: busy {s['busy'] / 1e9:.2f} s (union of the thunks)")
    for name in sorted(s["by_name"], key=lambda k: -s["by_name"][k])[:top]:
        print(f"  {name:45s} {s['by_name'][name] / 1e9:7.2f} s  {s['n_name'][name]:6d} thunks")
    if hlo is None:
        return
    products = fusion_products(hlo)
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
