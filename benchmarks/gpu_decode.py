"""GPU decode as a fraction of the measured HBM bandwidth, and where the rest of a step goes.

Per configuration (model variant x decode layout x XLA flags) one worker process: random bf16
weights, a bf16 KV cache, ``--prompt`` prompt tokens, temperature 1; for each batch size the
per-token time of ``mojax.sampling.generate`` is ``(t(N) - t(1)) / (N - 1)`` (budgets N and 1,
``--iters`` timed calls each, min kept, repeated ``--repeats`` times in the process: min / median /
max over the repeats). Bytes per step: every weight read once (a gathered untied input embedding
excluded, the head counted) plus the k/v of the positions attended, as ``benchmarks/sampler.py``
counts them; the fraction is of the device-to-device copy bandwidth measured first in the same run
(bytes read + written of a 2 GiB array, jax).

Where the rest goes, from three contrasts and the compiled program:

* ``cmdbuf``: the same program with XLA's command buffers (CUDA graphs) over the decode loop's
  body, ``WHILE`` and ``CONDITIONAL`` included, so a token runs as one graph launch instead of one
  launch per kernel and a host round trip per loop test: the gap to the default is launch and
  round-trip overhead;
* ``perlayer``: unrolled layers with one cache array per layer (``Layouts.decode_per_layer``):
  no inner ``while`` over the layers (a scanned layer is one loop iteration, with its own host test,
  per layer per token);
* ``fused``: per-layer decode with each layer's q/k/v as one product and gate/up as one
  (``Layouts.fuse_decode_projections``, ``mojax.models.fused``): three launches fewer per layer;
  ``unfused`` is the backend's layouts with that switched off, ``fused_oneq`` adds the CPU's
  multiply-reduce attention for a decode step (``Layouts.one_query_reduce``);
* ``kernel``: the backend's layouts with a decode step's attention half in the Pallas kernels of
  ``mojax.models.decode_kernel`` (``Layouts.decode_kernel="pallas_gpu"``: norm, q/k/v, q/k norm
  and RoPE in one launch, the attention over the per-layer cache in another), against ``gpu``;
* ``kernels``: the launches per decode step read from the optimised HLO (fusions, library calls,
  copies in the decode loop's body, and in the layer loop's body times L).

Run on a GPU host (part of ``benchmarks/gpu_suite.sh``)::

    python benchmarks/gpu_decode.py --configs 0.5b:gpu,0.5b:gpu:cmdbuf --batches 1,64,256
    python benchmarks/gpu_decode.py --configs tiny-qwen2:gpu,tiny-qwen2:perlayer --batches 1,4 \\
        --prompt 16 --new_tokens 8 --force                                  # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

VARIANTS = {"0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b"}
CMDBUF = (
    "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE"
    " --xla_gpu_graph_min_graph_size=1"
)
_LAUNCH = re.compile(
    r"=\s*\S+\s+(fusion|custom-call|copy|copy-start|dynamic-update-slice|"
    r"dynamic-slice|gather|scatter|reduce|sort|convert|select)\("
)


def _computations(hlo: str) -> dict[str, list[str]]:
    """HLO text -> {computation name: its instruction lines}."""
    comps, name = {}, None
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            name = head.group(1)
            comps[name] = []
        elif name is not None and line.startswith(" "):
            comps[name].append(line)
    return comps


def _whiles(lines):
    """(body name, known trip count or None) of each while instruction in ``lines``."""
    out = []
    for line in lines:
        m = re.search(r"body=%?([\w.\-]+)", line)
        if m and " while(" in line:
            n = re.search(r'known_trip_count":\{"n":"(\d+)"', line)
            out.append((m.group(1), int(n.group(1)) if n else None))
    return out


def kernel_counts(hlo: str) -> dict:
    """Launch-like instructions per iteration of the decode loop (the outermost loop body with
    the most of them), an inner loop of known trip count n counted n times (e.g. a scan over the
    layers); an inner loop of unknown count is counted once and reported."""
    comps = _computations(hlo)

    def total(name, depth=0):
        lines = comps.get(name, ())
        own = sum(bool(_LAUNCH.search(x)) for x in lines)
        inner = [(b, n, total(b, depth + 1)[0]) for b, n in _whiles(lines)] if depth < 4 else []
        return own + sum((n or 1) * c for _, n, c in inner), own, inner

    bodies = {b for lines in comps.values() for b, _ in _whiles(lines)}
    nested = {b for n in bodies for b, _ in _whiles(comps.get(n, ()))}
    outer = sorted(bodies - nested)
    if not outer:
        return {"per_step": None}
    best = max(outer, key=lambda b: total(b)[0])
    per_step, own, inner = total(best)
    return {"per_step": per_step, "own": own, "inner": [(n, c) for _, n, c in inner]}


def measure_bandwidth(gib=2.0, iters=10):
    """Device-to-device copy bandwidth (GB/s, bytes read + written), median of ``iters``."""
    import jax
    import jax.numpy as jnp

    n = int(gib * 2**30) // 4
    x = jnp.arange(n, dtype=jnp.float32)
    copy = jax.jit(lambda a: a + 1.0)
    jax.block_until_ready(copy(x))
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        jax.block_until_ready(copy(x))
        times.append(time.perf_counter() - t)
    return 2 * n * 4 / statistics.median(times) / 1e9


def _model(variant, layout, dtype):
    import dataclasses

    import jax

    from mojax.models import layouts
    from mojax.models.qwen import QwenModel, init_params
    from mojax.models.variants import get_variant

    cfg = get_variant(VARIANTS.get(variant, variant), dtype=dtype, param_dtype=dtype)
    lay = layouts.for_backend()
    if layout == "perlayer":
        lay = dataclasses.replace(lay, decode_per_layer=True)
    elif layout == "fused":  # one product for q/k/v and one for gate/up (``mojax.models.fused``)
        lay = dataclasses.replace(lay, decode_per_layer=True, fuse_decode_projections=True)
    elif layout == "fused_oneq":  # and a decode step's attention as multiply-reduces
        lay = dataclasses.replace(
            lay, decode_per_layer=True, fuse_decode_projections=True, one_query_reduce=True
        )
    elif layout == "unfused":
        lay = dataclasses.replace(lay, fuse_decode_projections=False)
    elif layout == "kernel":  # the Pallas decode kernels (``mojax.models.decode_kernel``)
        lay = dataclasses.replace(lay, decode_kernel="pallas_gpu")
    cfg = cfg.replace(layouts=lay)
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    return QwenModel(config=cfg, params=params)


def _bytes_per_step(model, b, prompt, n, itemsize):
    import jax

    cfg = model.config
    param = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(model.params))
    if not cfg.tie_word_embeddings:
        param -= cfg.vocab_size * cfg.hidden_size * itemsize
    mean_pos = prompt + (n - 1) / 2
    return param + 2 * cfg.num_layers * b * mean_pos * cfg.num_kv_heads * cfg.head_dim * itemsize


def worker(args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import mojax.sampling as ms
    from mojax.sampling import decode

    model = _model(args.variant, args.layout, args.dtype)
    dtype = jnp.dtype(args.dtype)
    seen = {}
    real = decode.generate_from_arrays

    def capture(*a, **kw):  # the compiled core's arguments, to read its optimised HLO
        seen.setdefault("call", (a, kw))
        return real(*a, **kw)

    decode.generate_from_arrays = capture
    batches = [int(x) for x in args.batches.split(",")]
    for b in batches:
        rng = np.random.default_rng(b)
        tokens = rng.integers(1, model.config.vocab_size, (b, args.prompt), dtype=np.int32)
        kw = dict(
            key=jax.random.key(0),
            temperature=1.0,
            max_response_len=args.new_tokens,
            num_samples=1,
            cache_dtype=dtype,
        )

        def call(budget, tokens=tokens, kw=kw):
            out = ms.generate(model, tokens, max_new_tokens=budget, **kw)
            return jax.block_until_ready(out.tokens)

        seen.clear()
        call(args.new_tokens)  # compiles (the budget is a runtime value)
        kernels = None
        if args.kernels and b == batches[len(batches) // 2]:  # one compile more, one batch
            a, k = seen["call"]
            hlo = decode._generate_jit.lower(*a, **k).compile().as_text()
            kernels = kernel_counts(hlo)
        steps = []
        for _ in range(args.repeats):
            t1 = _harness.time_calls(lambda: call(1), args.iters)
            tn = _harness.time_calls(lambda: call(args.new_tokens), args.iters, warmup=0)
            steps.append((tn - t1) / max(args.new_tokens - 1, 1))
        print(
            "RESULT "
            + json.dumps(
                {
                    "batch": b,
                    "steps_s": steps,
                    "bytes_per_step": _bytes_per_step(
                        model, b, args.prompt, args.new_tokens, dtype.itemsize
                    ),
                    "kernels": kernels,
                    "device": jax.devices()[0].device_kind,
                }
            ),
            flush=True,
        )


def _run_config(args, spec, bw):
    """One worker process for ``variant:layout[:cmdbuf]``; prints its table rows."""
    variant, layout, *rest = spec.split(":")
    env = dict(os.environ)
    if "cmdbuf" in rest:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + CMDBUF).strip()
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--variant",
        variant,
        "--layout",
        layout,
        "--batches",
        args.batches,
        "--prompt",
        str(args.prompt),
        "--new_tokens",
        str(args.new_tokens),
        "--dtype",
        args.dtype,
        "--iters",
        str(args.iters),
        "--repeats",
        str(args.repeats),
        "--kernels",
        str(args.kernels),
    ]
    try:
        p = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=args.config_timeout
        )
        out = p.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(f"{spec}: timed out after {args.config_timeout} s (rows so far below)")
        p = None
    rows = [json.loads(x[7:]) for x in out.splitlines() if x.startswith("RESULT ")]
    if p is not None and p.returncode != 0:
        print(f"{spec}: worker failed (rc {p.returncode}):\n{p.stderr[-2500:]}")
    for r in rows:
        s = sorted(r["steps_s"])
        med = statistics.median(s)
        frac = r["bytes_per_step"] / med / 1e9 / bw if bw else float("nan")
        k = r["kernels"] or {}
        print(
            f"| {spec} | {r['batch']} | {s[0] * 1e3:.3f} / **{med * 1e3:.3f}** / "
            f"{s[-1] * 1e3:.3f} ms | {r['bytes_per_step'] / 1e6:.1f} MB | **{frac:.1%}** | "
            f"{k.get('per_step')} (own {k.get('own')}, inner loops (trips, launches) {k.get('inner')}) |",
            flush=True,
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument(
        "--configs",
        default="0.5b:gpu,1.5b:gpu,0.5b:gpu:cmdbuf,0.5b:perlayer,"
        "0.5b:perlayer:cmdbuf,1.5b:perlayer:cmdbuf",
    )
    ap.add_argument("--variant", default="0.5b")
    ap.add_argument(
        "--layout",
        default="gpu",
        choices=["gpu", "perlayer", "fused", "fused_oneq", "unfused", "kernel"],
    )
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new_tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kernels", type=int, default=1)
    ap.add_argument("--config_timeout", type=int, default=150)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    print(_harness.machine_info())
    bw = measure_bandwidth(0.0625 if args.force else 2.0)
    print(f"measured device-to-device copy: {bw:.0f} GB/s (bytes read + written)")
    print(
        "| config | batch | step min / median / max | bytes per step | HBM fraction (median) "
        "| launches per step |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for spec in args.configs.split(","):
        _run_config(args, spec, bw)


if __name__ == "__main__":
    main()
