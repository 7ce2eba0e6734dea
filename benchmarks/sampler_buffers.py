"""What the compiled sampler's temporaries hold: XLA's buffer assignment, read back by HLO name.

``--config.dry_run=true`` reports one number for the sampler's temporaries (``sampler_temp``). This
script runs that dry run once with ``XLA_FLAGS=--xla_dump_to``, reads the buffer assignment of the
sampler's program (``jit__generate_jit``: the static engine's prefill + decode) and lists what its
temporary allocation holds: each HLO value with its shape and size, largest first, and the sizes
summed by kind (the HLO name without its numeric suffix). A value's bytes are its own; values share
the allocation at different times (offsets overlap), so the kinds' sums may exceed the allocation.

Run on any backend (the dry run compiles for the one it runs on)::

    python benchmarks/sampler_buffers.py --config 'configs/grpo.py:model=qwen2.5-0.5b,lora=16'
    python benchmarks/sampler_buffers.py --config 'configs/grpo.py:model=qwen2.5-0.5b' \\
        --set model.dtype=float32 --set model.param_dtype=float32

Findings on this CPU (``docs/performance.md``, "The sampler's memory"): ``wrapped_convert.N
f32[L, ...]`` (XLA CPU computes a bf16 product in f32 and hoists the conversion of every stacked
weight out of the prefill's layer scan), ``convert_bitcast_fusion.N`` / ``slice_bitcast_fusion.N
f32[in, out]`` (the decode loop's per-layer weights, ``Layouts.decode_per_layer``: one copy of
every weight per call, in f32 on the CPU), ``stack.N [L, B, T, K, D]`` (the per-layer KV cache
stacked back when the loop ends).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(.*)$")
_VALUE = re.compile(r"value: <\d+ (\S+) @\d+> \(size=(\d+),offset=\d+\): (\S+)")


def temp_values(text: str) -> tuple[int, list[tuple[str, int, str]]]:
    """``(bytes, values)`` of the ``preallocated-temp`` allocation of one buffer-assignment dump:
    its size and its ``(hlo name, bytes, shape)`` values, largest first."""
    size, values, inside = 0, [], False
    for line in text.splitlines():
        m = _ALLOC.match(line)
        if m:
            inside = "preallocated-temp" in m.group(3)
            size = int(m.group(2)) if inside else size
            continue
        v = _VALUE.search(line) if inside else None
        if v:
            values.append((v.group(1), int(v.group(2)), v.group(3)))
    return size, sorted(values, key=lambda x: -x[1])


def by_kind(values) -> list[tuple[str, int, int]]:
    """``(kind, bytes, count)`` with ``kind`` the HLO name without its numeric suffix."""
    sums: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for name, nbytes, _ in values:
        kind = re.sub(r"(\.\d+)+$", "", name)
        sums[kind][0] += nbytes
        sums[kind][1] += 1
    return sorted(((k, b, n) for k, (b, n) in sums.items()), key=lambda x: -x[1])


def dump_dry_run(config: str, sets: list[str], dump_dir: str) -> str:
    """Runs the dry run of ``config`` with XLA's dumps in ``dump_dir``; returns its output."""
    # a program read back from a persistent compilation cache is not compiled, so nothing would be
    # dumped (the cache key leaves out the dump flags): this dry run compiles
    env = dict(
        os.environ, XLA_FLAGS=f"--xla_dump_to={dump_dir}", JAX_ENABLE_COMPILATION_CACHE="false"
    )
    cmd = [sys.executable, "-m", "mojax.main", f"--config={config}", "--config.dry_run=true"]
    cmd += [f"--config.{s}" for s in sets]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(
            f"dry run failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
        )
    return out.stdout


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the --config argument of mojax.main")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE (a --config.KEY)")
    ap.add_argument("--top", type=int, default=12, help="values to list")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        report = dump_dry_run(a.config, a.set, d)
        files = sorted(
            glob.glob(f"{d}/*jit__generate_jit*after_optimizations-buffer-assignment.txt")
        )
        if not files:
            raise SystemExit("no buffer assignment of jit__generate_jit was dumped")
        with open(files[-1]) as f:
            size, values = temp_values(f.read())
    print("".join(line + "\n" for line in report.splitlines() if "sampler_temp" in line), end="")
    print(f"sampler program's temporary allocation: {size / 2**30:.3f} GiB")
    print(f"{'kind':32s} {'GiB':>8s} {'values':>6s}")
    for kind, nbytes, count in by_kind(values)[: a.top]:
        print(f"{kind:32s} {nbytes / 2**30:8.3f} {count:6d}")
    print("largest values:")
    for name, nbytes, shape in values[: a.top]:
        print(f"  {name:32s} {nbytes / 2**30:8.3f} GiB  {shape}")


if __name__ == "__main__":
    main()
