"""What every side of ``benchmarks/rl_step_peers.py`` shares: the inputs file, the reward, timing.

Standard library and numpy only: this module is imported by workers running under three different
virtualenvs (mojax's, TRL's, Tunix's).

The preparation worker writes, next to the checkpoint, ``inputs.json``::

    {"prompts": [[ids], ...],        # P prompts, token ids in [2, V)
     "num_samples": G, "max_new_tokens": N, "pad_id": 0, "eos_id": 1,
     "lr": ..., "seed": ..., "eos_logit_shift": ..., "expected_tail_mean": ...}

and a word-level tokenizer whose word ``w<i>`` is token ``i`` (``<pad>`` = 0, ``<eos>`` = 1), so
a prompt written as text (TRL and Tunix take text prompts) tokenizes to exactly its ids and a
completion's text parses back to its ids.
"""

from __future__ import annotations

import json
import os
import sys
import time

PAD_ID, EOS_ID = 0, 1


def word(i: int) -> str:
    """The tokenizer's word of token ``i``."""
    return {PAD_ID: "<pad>", EOS_ID: "<eos>"}.get(i, f"w{i}")


def ids_to_text(ids) -> str:
    return " ".join(word(int(i)) for i in ids)


def text_to_ids(text: str) -> list[int]:
    """The ids of a decoded completion (special tokens may have been dropped by the decoder)."""
    out = []
    for w in text.split():
        if w == "<eos>":
            out.append(EOS_ID)
        elif w.startswith("w") and w[1:].isdigit():
            out.append(int(w[1:]))
    return out


def reward_of_ids(ids) -> float:
    """The step's Python reward of one completion: the mean of a fixed hash of its tokens in [0, 1)
    (the stop token and padding excluded). Deterministic, cheap, and it varies within a group, so
    every GRPO group has a signal."""
    vals = [((int(t) * 2654435761) % 1000) / 1000.0 for t in ids if int(t) > EOS_ID]
    return sum(vals) / len(vals) if vals else 0.0


def load_inputs(ckpt: str) -> dict:
    with open(os.path.join(ckpt, "inputs.json")) as f:
        return json.load(f)


def add_worker_args(ap) -> None:
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--dist", choices=("fixed", "tail"), required=True)
    ap.add_argument("--steps", type=int, default=3, help="timed steps (the min is reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")


class StepTimer:
    """Collects ``generation`` / ``update`` / ``step`` seconds per step; the worker reports the min
    of each over the timed steps (each min taken separately) and the step's token counts."""

    def __init__(self):
        self.rows: list[dict] = []

    def add(self, gen: float, upd: float, step: float, **extra) -> None:
        self.rows.append({"generation": gen, "update": upd, "step": step, **extra})

    def result(self, warmup: int, **extra) -> dict:
        timed = self.rows[warmup:]
        if not timed:
            sys.exit(f"no timed step after {warmup} warm-up steps")
        out = {k: min(r[k] for r in timed) for k in ("generation", "update", "step")}
        for k in timed[0]:
            if k not in out:
                out[k] = sum(r[k] for r in timed) / len(timed)  # means of the counters
        out["first_step"] = self.rows[0]["step"]
        out["steps_timed"] = len(timed)
        out.update(extra)
        return out


def now() -> float:
    return time.perf_counter()
