"""The two ceilings of a GPU, measured once per lease (``docs/performance.md`` section 6).

* memory: a device-to-device copy of ``--gib`` GiB (bytes read + bytes written) / time;
* matrix: an 8192^3 bf16 matrix product on random data, FLOP / time.

Each is the median of ``--iters`` event-timed repeats after 3 warm-ups (torch on CUDA)::

    python benchmarks/gpu_ceilings.py
    python benchmarks/gpu_ceilings.py --device cpu --gib 0.01 --n 256   # the suite's dry run

``--device cpu`` times the same two operations on the CPU with the host clock (the suite's ``--dry``
mode: it checks that the script runs, not a ceiling anyone should quote).
"""

from __future__ import annotations

import argparse
import json
import statistics


def _time(fn, iters, device="cuda"):
    import time

    import torch

    for _ in range(3):
        fn()
    if device == "cpu":
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv=None):
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_ceilings.py: no CUDA device visible to torch")
    n_el = int(args.gib * 2**30) // 4
    src = torch.randn(n_el, device=dev)
    dst = torch.empty_like(src)
    copy_s = _time(lambda: dst.copy_(src), args.iters, dev)
    a = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16)
    mm_s = _time(lambda: a @ b, args.iters, dev)
    out = {
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "copy_gbps": 2 * src.numel() * 4 / copy_s / 1e9,
        "bf16_matmul_tflops": 2 * args.n**3 / mm_s / 1e12,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
