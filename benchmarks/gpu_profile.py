"""Where a GPU decode step's time goes: the kernels of one step, read from a profiler trace.

One worker process per configuration (``variant:layout`` as in ``benchmarks/gpu_decode.py``): random
bf16 weights, a bf16 KV cache, ``--prompt`` prompt tokens, ``--batch`` rows, temperature 1. Two
calls of ``mojax.sampling.generate`` are traced with ``jax.profiler`` (budgets 1 and N + 1 new
tokens, after both ran once untraced) and their device kernel events read back with
``jax.profiler.ProfileData``; one decode step's share is the difference of the two calls divided by
N:

* kernels per step, and kernel time per step by kind: matrix products (cuBLAS, Triton or CUTLASS
  GEMM kernels), reductions, cache writes and copies, other fusions;
* the busy time (the union of the kernel intervals) against the step's wall time, timed untraced
  as ``(t(N + 1) - t(1)) / N``: the rest is the GPU idling between kernels (launch gaps, the loop's
  host round trip);
* the kernels that take the most time per step, names grouped without their numeric suffixes.

Run on a GPU host (``PARTS=fused bash benchmarks/gpu_suite.sh``)::

    python benchmarks/gpu_profile.py --configs 0.5b:unfused,0.5b:fused --batch 64
    python benchmarks/gpu_profile.py --configs tiny-qwen2:fused --batch 4 --prompt 16 \\
        --new_tokens 4                                          # CPU smoke test (XLA CPU thunks)
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

KINDS = (
    ("matmul", re.compile(r"gemm|xmma|nvjet|cutlass|cublas|\bdot|matmul|triton_dot", re.I)),
    ("reduce", re.compile(r"reduce|softmax", re.I)),
    (
        "cache write / copy",
        re.compile(r"dynamic.update.slice|dynamic_slice|copy|memcpy|memset", re.I),
    ),
)
_DERIVED = re.compile(r"^(XLA Modules|XLA Ops|Steps|Framework|Source|TensorFlow|python)", re.I)


def kind_of(name: str) -> str:
    """The kind of a kernel from its name (``KINDS``; anything else is ``"other fusion"``)."""
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other fusion"


def group_name(name: str) -> str:
    """A kernel name without its numeric suffixes (``loop_add_fusion.12`` -> ``loop_add_fusion``)."""
    prev = None
    while prev != name:
        prev, name = name, re.sub(r"[._]\d+$", "", name)
    return name


def kernel_events(xspace_path: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """``(name, start_ns, duration_ns)`` of every kernel on the device planes of a trace (on a
    CPU host, the XLA thunks of the host plane's XLA threads), and the lines read."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(xspace_path)
    planes = [p for p in data.planes if p.name.startswith("/device:")]
    cpu = not planes
    if cpu:
        planes = [p for p in data.planes if p.name == "/host:CPU"]
    events, lines = [], []
    for plane in planes:
        for line in plane.lines:
            keep = line.name.startswith("tf_XLA") if cpu else not _DERIVED.match(line.name)
            if not keep:
                continue
            lines.append(f"{plane.name}/{line.name}")
            events += [(e.name, int(e.start_ns), int(e.duration_ns)) for e in line.events]
    return events, lines


def busy_ns(events) -> int:
    """Length of the union of the events' intervals."""
    total, end = 0, None
    for _, start, dur in sorted(events, key=lambda e: e[1]):
        stop = start + dur
        if end is None or start >= end:
            total, end = total + dur, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def summarise(events) -> dict:
    """Counts and times (ns) of a call's kernels: all, by kind, by grouped name, and busy."""
    by_kind, by_name = collections.Counter(), collections.Counter()
    n_kind, n_name = collections.Counter(), collections.Counter()
    for name, _, dur in events:
        by_kind[kind_of(name)] += dur
        n_kind[kind_of(name)] += 1
        by_name[group_name(name)] += dur
        n_name[group_name(name)] += 1
    return {
        "count": len(events),
        "time": sum(d for _, _, d in events),
        "busy": busy_ns(events),
        "by_kind": dict(by_kind),
        "n_kind": dict(n_kind),
        "by_name": dict(by_name),
        "n_name": dict(n_name),
    }


def per_step(long: dict, short: dict, steps: int) -> dict:
    """``(long - short) / steps`` of every count and time of two ``summarise`` results."""

    def diff(a, b):
        return {k: (a.get(k, 0) - b.get(k, 0)) / steps for k in set(a) | set(b)}

    out = {k: (long[k] - short[k]) / steps for k in ("count", "time", "busy")}
    for k in ("by_kind", "n_kind", "by_name", "n_name"):
        out[k] = diff(long[k], short[k])
    return out


def _trace(call, budget):
    import jax

    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            call(budget)
        paths = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)
        if not paths:
            raise RuntimeError(f"jax.profiler.trace wrote no .xplane.pb under {d}")
        return kernel_events(paths[0])


def worker(args):
    import gpu_decode
    import jax
    import jax.numpy as jnp
    import numpy as np

    import mojax.sampling as ms

    model = gpu_decode._model(args.variant, args.layout, args.dtype)
    rng = np.random.default_rng(args.batch)
    tokens = rng.integers(1, model.config.vocab_size, (args.batch, args.prompt), dtype=np.int32)
    kw = dict(key=jax.random.key(0), temperature=1.0, max_response_len=args.new_tokens + 1,
              num_samples=1, cache_dtype=jnp.dtype(args.dtype))  # fmt: skip

    def call(budget):
        return jax.block_until_ready(ms.generate(model, tokens, max_new_tokens=budget, **kw).tokens)

    n = args.new_tokens
    call(n + 1)  # compiles (the budget is a runtime value)
    t1 = _harness.time_calls(lambda: call(1), args.iters)
    tn = _harness.time_calls(lambda: call(n + 1), args.iters, warmup=0)
    (short, lines), (long, _) = _trace(call, 1), _trace(call, n + 1)
    step = per_step(summarise(long), summarise(short), n)
    step["wall"] = (tn - t1) / n * 1e9
    step["lines"] = lines
    print("RESULT " + json.dumps(step), flush=True)


def report(spec: str, r: dict, top: int) -> None:
    """Prints one configuration's per-step table (microseconds)."""
    us = 1e-3
    wall, busy = r["wall"] * us, r["busy"] * us
    print(f"\n### {spec}: one decode step (trace lines: {', '.join(r['lines'][:6])})")
    print(f"wall {wall:.1f} us | kernels {r['count']:.1f} | kernel time {r['time'] * us:.1f} us "
          f"| busy {busy:.1f} us ({busy / wall:.0%} of wall) | idle {wall - busy:.1f} us")  # fmt: skip
    print("| kind | kernels per step | us per step | share of kernel time |")
    print("| --- | --- | --- | --- |")
    for kind in sorted(r["by_kind"], key=lambda k: -r["by_kind"][k]):
        t = r["by_kind"][kind]
        print(f"| {kind} | {r['n_kind'].get(kind, 0):.1f} | {t * us:.1f} | "
              f"{t / max(r['time'], 1):.0%} |")  # fmt: skip
    print(f"| kernel (top {top}) | per step | us per step | us each |")
    print("| --- | --- | --- | --- |")
    for name in sorted(r["by_name"], key=lambda k: -r["by_name"][k])[:top]:
        t, c = r["by_name"][name], r["n_name"].get(name, 0)
        print(
            f"| `{name[:70]}` | {c:.1f} | {t * us:.1f} | {t * us / c if c else float('nan'):.2f} |"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--configs", default="0.5b:unfused,0.5b:fused")
    ap.add_argument("--variant", default="0.5b")
    ap.add_argument(
        "--layout", default="gpu", choices=["gpu", "perlayer", "fused", "fused_oneq", "unfused"]
    )
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new_tokens", type=int, default=16, help="N: steps in the difference")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--config_timeout", type=int, default=120)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    print(_harness.machine_info())
    for spec in args.configs.split(","):
        variant, layout = spec.split(":")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--variant", variant,
                "--layout", layout] + [f"--{k}={getattr(args, k)}" for k in
                ("batch", "prompt", "new_tokens", "dtype", "iters")]  # fmt: skip
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=args.config_timeout)
        except subprocess.TimeoutExpired:
            print(f"{spec}: timed out after {args.config_timeout} s")
            continue
        rows = [json.loads(x[7:]) for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or not rows:
            print(f"{spec}: worker failed (rc {p.returncode}):\n{p.stderr[-2500:]}")
        for r in rows:
            report(f"{spec} batch {args.batch}", r, args.top)


if __name__ == "__main__":
    main()
