"""Generation overlapping the update: RL step wall time with ``rollout.staleness = 1`` vs synchronous.

Sides (each a short RL run of the embedded default in its own process, alternating, >= 3 rounds;
``benchmarks/_harness.py``), all on the same ``--devices`` forced CPU devices:

* ``sync`` -- today's loop: ``staleness = 0``, the sampler on the learner's mesh of all devices;
* ``sync_split`` -- ``staleness = 0``, the sampler on its own ``--sampler`` devices
  (``mesh.sampler``), the learner on the others: the same devices as ``async``, no overlap;
* ``async`` -- ``staleness = 1`` on the split meshes: the rollout of step t + 1 is generated on the
  sampler's devices while step t's update runs on the learner's (``mojax.rl.async_loop``).

Per run: the median ``time/step_s`` of ``metrics.jsonl`` over the steps after ``--warmup`` (the
compiling steps), the last step (the final evaluation) left out. Printed: min / median / max over
rounds of each side and of the ratios ``sync_split / async`` and ``sync / async`` (> 1: the
overlap is faster).

GPU mode (``--mode gpu``): one device, so ``sync`` vs ``async`` with the sampler sharing the
learner's device (the host's work, tools and scoring overlap the update), on ``--model`` in
bfloat16 with ``ppo.old_logprobs = "recompute"`` (the runs log ``mismatch/*``; the step-1 values,
policy lag 0, are the sampler-vs-learner numerics)::

    python benchmarks/async_overlap.py                            # CPU, 8 devices, 4 + 4
    python benchmarks/async_overlap.py --steps 4 --warmup 2 --sft_steps 20 --rounds 1 --force  # smoke
    python benchmarks/async_overlap.py --mode gpu --model qwen2.5-0.5b --steps 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

MISMATCH = ("kl_k3", "ratio_mean", "ratio_p99", "ratio_max", "frac_outside")


def _flags(args, side: str, workdir: str) -> list[str]:
    arg = f"steps={args.steps}" + ("" if args.model == "tiny" else f",model={args.model}")
    flags = [
        f"--config=configs/paretopo.py:{arg}",
        f"--workdir={workdir}",
        f"--config.sft.steps={args.sft_steps}",
        f"--config.rollout.prompts_per_step={args.prompts}",
        f"--config.rollout.num_samples={args.samples}",
        f"--config.eval_every={args.steps}",
        f"--config.checkpoint_every={args.steps}",
        "--config.transcripts_per_step=0",
        f"--config.rollout.staleness={1 if side == 'async' else 0}",
    ]
    if args.mode == "cpu" and side != "sync":
        flags.append(f"--config.mesh.sampler={args.sampler}")
    if args.tokenizer:
        flags.append(f"--config.tokenizer.path={args.tokenizer}")
    if args.recompute:
        flags.append("--config.ppo.old_logprobs=recompute")
    return flags


def worker(args) -> None:
    """One run (``python -m mojax.main`` in a child of this worker); emits the median step time
    and the step-1 mismatch."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = os.path.join(tmp, "run")
        cmd = [sys.executable, "-m", "mojax.main", *_flags(args, args.worker, workdir)]
        proc = subprocess.run(cmd, cwd=_harness.REPO, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stdout[-3000:] + proc.stderr[-5000:])
        with open(os.path.join(workdir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f][1:]
    timed = records[args.warmup : -1]
    if not timed:
        sys.exit(f"--steps={args.steps} leaves no step after --warmup={args.warmup} and the last")
    out = {"step_s": statistics.median(r["time/step_s"] for r in timed), "steps_timed": len(timed)}
    for k in ("time/rollout_s", "time/train_s", "time/weight_transfer_s"):
        vals = [r[k] for r in timed if k in r]
        if vals:
            out[k.split("/")[1]] = statistics.median(vals)
    out.update({f"mismatch/{k}": records[0][f"mismatch/{k}"] for k in MISMATCH
                if f"mismatch/{k}" in records[0]})  # fmt: skip
    _harness.emit(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _harness.add_args(ap)
    ap.add_argument("--mode", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--model", default="tiny", help='"tiny" (the default run) or a variant')
    ap.add_argument("--tokenizer", default="", help="a tokenizer path (default: the config's)")
    ap.add_argument("--devices", type=int, default=8, help="cpu: forced host devices")
    ap.add_argument("--sampler", type=int, default=4, help="cpu: the sampler's devices")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out (compilation)")
    ap.add_argument("--sft_steps", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--recompute", action="store_true", help="ppo.old_logprobs=recompute")
    args = ap.parse_args(argv)
    if args.mode == "gpu":
        args.recompute = True
    if args.worker:
        return worker(args)
    _harness.check_load(args.force, args.rounds)
    print(_harness.machine_info(), flush=True)
    common = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--force"]
    sides = ["sync", "sync_split", "async"] if args.mode == "cpu" else ["sync", "async"]
    env = _harness.worker_env({"JAX_PLATFORMS": "cpu"} if args.mode == "cpu" else {})
    if args.mode == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    runs = _harness.alternate(__file__, {s: common for s in sides}, args.rounds, env=env)
    where = f"{args.devices} CPU devices" if args.mode == "cpu" else "one device"
    _harness.report(
        f"RL step wall time, {args.model}, P={args.prompts} x G={args.samples}, {where}",
        runs, "step_s", anchor="sync", subjects=["async"], scale=1.0, unit="s",
    )  # fmt: skip
    if args.mode == "cpu":
        _harness.report("same split devices", runs, "step_s", anchor="sync_split",
                        subjects=["async"], scale=1.0, unit="s")  # fmt: skip
    for side, res in runs.items():
        mm = {k: v for k, v in res[0].items() if k.startswith("mismatch/")}
        if mm:
            print(f"  {side} step-1 mismatch (sampler vs learner): {json.dumps(mm)}")


if __name__ == "__main__":
    main()
