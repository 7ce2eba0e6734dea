"""Padding fraction of the PPO batch with and without sequence packing, on ToolRL's lengths.

The rows are those of ``configs/awpo.py``'s run on the real ToolRL data (``$MOJAX_SHARED_DIR/data/
toolrl``, the real Qwen2 tokenizer): each prompt rendered by the task with the chat template, each
response its gold answer (the ToolRL target, tokenized), ``G`` samples per prompt, ``P`` prompts per
step in data order, rows right-padded to the run's ``T`` (the bucket of the longest prompt + the
longest response) as ``mojax.rl.step.assemble_batch`` lays them out, then packed to ``T`` tokens per
row by ``mojax.learner.packing.pack_batch``. Not a timing: it counts tokens::

    python benchmarks/packing_padding.py                  # P=4, G=4 (the tiny AWPO run)
    python benchmarks/packing_padding.py --prompts 16 --samples 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=4, help="P prompts per step")
    ap.add_argument("--samples", type=int, default=4, help="G samples per prompt")
    ap.add_argument("--steps", type=int, default=0, help="steps to count (0 = the whole data)")
    a = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from mojax_test_utils import load_config

    from mojax import spec as spec_lib
    from mojax.learner import SFTBatch, packing
    from mojax.rl import builders
    from mojax.sampling import bucket_length

    spec = spec_lib.validate(load_config("awpo"), num_devices=None)
    task = spec.build_task()
    splits = builders.load_splits(task, spec)
    tok = builders.build_tokenizer(spec, task, splits, "/tmp")
    examples = list(splits.train)
    prompts = [tok.encode(task.build_prompt(ex, tok, num_answers=None)) for ex in examples]
    answers = [tok.encode(str(ex.target)) + [int(tok.eos_token_id)] for ex in examples]
    t = bucket_length(max(len(p) for p in prompts)) + max(len(r) for r in answers)
    p_, g = a.prompts, a.samples
    steps = len(examples) // p_ if not a.steps else min(a.steps, len(examples) // p_)
    before, after, rows = [], [], []
    for s in range(steps):
        idx = range(s * p_, (s + 1) * p_)
        b = p_ * g
        tokens = np.zeros((b, t), np.int32)
        mask = np.zeros((b, t), np.int32)
        loss = np.zeros((b, t), np.float32)
        for j, i in enumerate(idx):
            seq = prompts[i] + answers[i]
            for k in range(g):
                r = j * g + k
                tokens[r, : len(seq)] = seq
                mask[r, : len(seq)] = 1
                loss[r, len(prompts[i]) : len(seq)] = 1
        batch = SFTBatch(tokens=tokens, loss_mask=loss, attention_mask=mask)
        packed = packing.pack_batch(batch, t)
        before.append(packing.padding_fraction(mask))
        after.append(packing.padding_fraction(packed.attention_mask))
        rows.append(packed.tokens.shape[0])
    lengths = np.array([len(p) + len(r) for p, r in zip(prompts, answers)])
    out = {
        "examples": len(examples),
        "T": t,
        "rows_per_step": p_ * g,
        "seq_len_p10_p50_p90": [int(x) for x in np.percentile(lengths, [10, 50, 90])],
        "padding_frac_unpacked_mean": float(np.mean(before)),
        "padding_frac_packed_mean": float(np.mean(after)),
        "packed_rows_per_step_mean": float(np.mean(rows)),
        "steps": steps,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
