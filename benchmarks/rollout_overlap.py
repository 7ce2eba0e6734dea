"""Tools overlapping decoding: a multi-turn rollout whose tool sleeps 50 ms per call.

Sides (each in its own process, alternating, >= 3 rounds; see ``benchmarks/_harness.py``):

* ``serial`` -- ``decode_segment=0``: a decode call runs until every row has stopped, then the
  round's calls run (in parallel on the pool) while the device idles, then the observations are
  appended;
* ``overlap`` -- ``decode_segment=--segment``, ``overlap_tools=True``: the decode runs in segments
  and a row's call starts at the end of the segment it stopped in, while the other rows decode on;
* ``segmented`` -- the same segments with ``overlap_tools=False`` (the calls wait for the round's
  end): isolates the cost of the segment boundaries from the gain of the overlap.

``overlap`` and ``segmented`` give bitwise the same rollout (checked here through a hash of the
tokens and log-probs); ``serial`` the same tokens up to the float rounding of the extra empty cache
slots (also reported). Printed: min / median / max of the wall time of one rollout (after a warm-up
rollout that compiles) and of the ratio ``serial / side`` (> 1: faster than serial).

The model is the tiny Qwen3 (random weights) over a byte-level toy tokenizer whose tool stop
``</calc>`` and eos are single ids; a logit bias on both makes rows call the tool at different
points of a turn (about one stop in ``1 / --p_call`` tokens), as a policy does. Every call is
answered (the toy task parses any text as a call) by a tool that sleeps ``--sleep_ms``; the pool
has one worker per row, so the tools cost their latency, not a queue.

Usage::

    python benchmarks/rollout_overlap.py                        # defaults: B = 8 x 8, 4 turns
    python benchmarks/rollout_overlap.py --prompts=2 --samples=2 --max_new=16 --force  # smoke
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

STOP = "</calc>"


class ByteTokenizer:
    """Bytes are ids 0..255; ``</calc>`` is id 256 and eos 257 (the tokenizer interface the
    rollout uses: encode / decode / vocab_size / eos_token_id / pad_token_id)."""

    vocab_size, stop_id, eos_token_id, pad_token_id = 258, 256, 257, 0

    def encode(self, text: str) -> list[int]:
        ids = []
        for k, part in enumerate(text.split(STOP)):
            ids += ([self.stop_id] if k else []) + list(part.encode())
        return ids

    def decode(self, ids) -> str:
        out, chunk = [], []
        for i in ids:
            if i < 256:
                chunk.append(i)
                continue
            out.append(bytes(chunk).decode(errors="replace") + (STOP if i == self.stop_id else ""))
            chunk = []
        return "".join(out) + bytes(chunk).decode(errors="replace")


class SleepTask:
    """Any text before the stop is a call; observations are ``<output>...</output>``."""

    name, tool_stop = "sleep-bench", STOP

    @staticmethod
    def parse_tool_call(text: str) -> str:
        return text[-16:]

    @staticmethod
    def format_observation(text: str) -> str:
        return f"<output>{text}</output>"


def sleep_tool(ms: float):
    from mojax.rollout.tools import ToolResult

    def run(text: str) -> ToolResult:
        time.sleep(ms / 1e3)
        return ToolResult(output="42")

    return run


def biased_model(vocab: int, p_call: float, p_eos: float, seed: int = 0):
    """Tiny Qwen3 whose logits add a bias on the tool stop and eos ids (target probabilities
    ``p_call`` / ``p_eos`` against a near-uniform rest)."""
    import flax.struct
    import jax
    import jax.numpy as jnp
    import numpy as np

    import mojax.models as mm
    from mojax.models.qwen import Qwen

    tok = ByteTokenizer()
    bias = np.zeros((vocab,), np.float32)
    bias[tok.stop_id] = np.log(p_call * (vocab - 2) / (1 - p_call - p_eos))
    bias[tok.eos_token_id] = np.log(p_eos * (vocab - 2) / (1 - p_call - p_eos))

    @flax.struct.dataclass
    class Biased(mm.QwenModel):
        bias: jax.Array = None

        @property
        def apply_fn(self):
            base, b = Qwen(self.config).apply, self.bias

            def apply(variables, x, *args, **kw):
                out = base(variables, x, *args, **kw)
                return out + b if kw.get("method") is Qwen.logits else out

            return apply

    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=vocab)
    params = mm.init_params(cfg, jax.random.key(seed))
    return Biased(config=cfg, params=params, bias=jnp.asarray(bias))


def worker(args) -> None:
    import jax
    import numpy as np

    from mojax.rollout import RolloutSpec, run_rollout
    from mojax.rollout.tools import ToolPool

    tok, task = ByteTokenizer(), SleepTask()
    model = biased_model(tok.vocab_size + 6, args.p_call, args.p_eos)
    rng = np.random.RandomState(0)
    prompts = [list(rng.randint(1, 256, rng.randint(8, 24))) for _ in range(args.prompts)]
    segment = {"serial": 0}.get(args.worker, args.segment)
    spec = RolloutSpec.create(
        tok,
        task,
        max_new_tokens=args.max_new,
        max_turns=args.turns,
        max_obs_tokens=32,
        temperature=1.0,
        decode_segment=segment,
        overlap_tools=args.worker == "overlap",
    )
    rows = args.prompts * args.samples
    with ToolPool(max_workers=rows, timeout_s=30) as pool:

        def once():
            return run_rollout(
                spec,
                model,
                tok,
                task,
                prompts,
                key=jax.random.key(1),
                num_samples=args.samples,
                tool=sleep_tool(args.sleep_ms),
                pool=pool,
            )

        res = once()  # compiles (every append bucket of this rollout)
        secs = _harness.time_calls(once, iters=args.iters, warmup=0)
    digest = hashlib.sha256(res.tokens.tobytes() + res.logprobs.tobytes()).hexdigest()[:16]
    _harness.emit(
        dict(
            secs=secs,
            digest=digest,
            tokens=hashlib.sha256(res.tokens.tobytes()).hexdigest()[:16],
            tool_calls=res.counters.get("tool_calls_run", 0),
            rounds=res.counters.get("decode_calls", 0) - res.counters.get("segment_resumes", 0),
            segment_resumes=res.counters.get("segment_resumes", 0),
        )
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max_new", type=int, default=64, help="tokens per turn")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--segment", type=int, default=16, help="decode segment of the overlap sides")
    ap.add_argument("--sleep_ms", type=float, default=50.0)
    ap.add_argument("--p_call", type=float, default=1 / 24)
    ap.add_argument("--p_eos", type=float, default=1 / 160)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    _harness.check_load(args.force, args.rounds)
    print(_harness.machine_info())
    shared = [f"--{k}={getattr(args, k)}" for k in ("prompts", "samples", "max_new", "turns")]
    shared += [f"--{k}={getattr(args, k)}" for k in ("segment", "sleep_ms", "p_call", "p_eos")]
    shared += [f"--iters={args.iters}"]
    sides = {name: shared for name in ("serial", "overlap", "segmented")}
    runs = _harness.alternate(__file__, sides, args.rounds)
    title = (
        f"rollout, B = {args.prompts} x {args.samples}, {args.turns} turns x {args.max_new} "
        f"tokens, tool {args.sleep_ms:g} ms/call, segment {args.segment}"
    )
    _harness.report(title, runs, "secs", anchor="serial", subjects=["overlap", "segmented"])
    for name, res in runs.items():
        calls = sorted({r["tool_calls"] for r in res})
        print(f"  {name:<10s} tool calls {calls}, rounds {res[0]['rounds']}, "
              f"segment resumes {res[0]['segment_resumes']}")  # fmt: skip
    same = {r["digest"] for r in runs["overlap"] + runs["segmented"]}
    print(f"  overlap == segmented (tokens and log-probs, bitwise): {len(same) == 1}")
    same_tokens = {r["tokens"] for r in runs["overlap"] + runs["serial"]}
    print(f"  overlap == serial (tokens): {len(same_tokens) == 1}")


if __name__ == "__main__":
    main()
