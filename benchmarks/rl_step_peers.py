"""One GRPO step, three frameworks: mojax vs TRL's ``GRPOTrainer`` vs Tunix's ``GRPOLearner``.

Every side runs in its own virtualenv and process (``--mojax_python``, ``--trl_python``,
``--tunix_python``; ``benchmarks/peer_envs.sh`` builds the peers' envs), sides alternating (A B C,
C B A, ...) for ``--rounds`` rounds (>= 3, ``benchmarks/_harness.py``); the script refuses to start
when the 1-minute load average exceeds the core count (``--force`` overrides, loudly).

The driver first writes ONE checkpoint with transformers ``save_pretrained`` (a randomly initialised
Qwen3, default ~34M parameters: vocab 16384, E 512, F 1536, 8 layers, 8 heads, 4 kv heads, head
dim 64, tied embeddings, seed 0, fp32), a word-level tokenizer (token ``i`` is the word ``w<i>``,
``<pad>`` 0, ``<eos>`` 1) and ``inputs.json`` (the P prompts as token ids, lengths uniform in
``--min_prompt..--max_prompt``), so every side starts from the same weights and prompts
(``benchmarks/_peer_common.py``). Each worker loads them, runs ``--warmup`` untimed steps
(compilation), then ``--steps`` timed steps of: generate P x G samples (temperature 1, no top-k /
top-p), score them with the same Python reward, GRPO advantages, one AdamW update (lr ``--lr``, no
weight decay, max grad norm 1), no reference model (KL 0), one PPO epoch, the whole batch in one
optimizer update. Reported per side: generation, update and whole step seconds (min over the timed
steps of each), and the mean response length.

Two length distributions (``--dists``), each with its own checkpoint directory:

* ``fixed``: the random init as it is; exactly ``--new_tokens`` new tokens per sample (mojax: no
  stop id, every row runs its budget; TRL: ``min_new_tokens = max_new_tokens``; Tunix: no minimum
  length in its rollout config, so ``eos_tokens = [V]``, an id outside the vocabulary that is never
  sampled).
* ``tail``: the stop token ``<eos>`` allowed, and made likely: the same weights with embedding
  column 0 set to a constant 4.0 on every row (it dominates the residual stream's RMS, so the
  probability of ``<eos>`` barely depends on the context) and to a larger value on ``<eos>``'s row
  (tied embeddings: its logit rises), calibrated by bisection so the mean P(<eos>) per position is
  ``1 / --tail_mean``. Responses then stop at a geometric, long-tailed length capped at
  ``--new_tokens`` (at the default shape, two draws of 128 rows: mean 15.9 / 14.2, median 11,
  90th percentile 31 / 32, max 64 / 59). Each side's own sampler draws the lengths from the same
  model, so they differ by sampling noise (each side reports its mean length; the peers' padded
  width follows the longest row of the batch, which is near the cap).

Forced differences (what the APIs impose; the rest is matched):

* Prompts: TRL and Tunix take text, so prompts are written as words and tokenized by the word-level
  tokenizer (asserted to give the same ids); the reward of TRL and mojax reads completion ids,
  Tunix's reads the completion text parsed back to ids (the same values).
* Generation: TRL generates with transformers ``generate`` (left-padded prompts, each prompt
  repeated G times, eager PyTorch, KV cache; it keeps decoding finished rows until the longest
  ends); Tunix with its vanilla sampler (``RLCluster`` rollout ``"vanilla"``: each prompt repeated
  G times, left-padded to ``max_prompt_length``, a ``kv_cache_size`` cache, sampling by top-p with
  ``top_p = 1.0``: the sampler is greedy unless top-p or top-k is set); mojax with
  ``mojax.sampling.generate`` (one shared prefill per prompt for its G samples, temperature
  sampling by Gumbel-max, or with ``--mojax_draw inverse_cdf`` by one uniform per row against the
  cumulative distribution: the same distribution, one random number per row instead of V).
* Fixed length: TRL masks ``<eos>`` until ``min_new_tokens`` (the distribution differs at one
  token, the cost does not); Tunix and mojax stop on no id at all.
* GRPO advantages: all three normalise by the group's unbiased std (TRL ``+ 1e-4``, Tunix and mojax
  ``+ 1e-6``; mojax ``grpo(std_ddof=1)``).
* Loss aggregation: token-mean on all three (TRL's default ``loss_type="dapo"``, Tunix
  ``loss_agg_mode="token-mean"``, mojax ``agg="token-mean"``); PPO-clip ε 0.2 both sides.
* Old log-probs: with one PPO epoch, TRL and Tunix take the ratio against the detached current
  log-probs (no separate forward); mojax against the sampler's log-probs (``ppo.old_logprobs =
  "sampler"``, no extra forward either).
* Vocabulary projection in the update: TRL projects only the completion positions
  (``logits_to_keep``); Tunix and plain mojax project every position of the row (the
  ``mojax-rows`` / ``mojax-batch`` sides only the loss positions).
* Update batch layout: TRL pads every row to the longest prompt + the longest completion of the
  batch; Tunix to ``max_prompt_length + max_tokens_to_generate`` always; mojax to a fixed ``T`` =
  ``--max_prompt + --new_tokens`` (``fixed``) or packs the sequences into rows of ``T`` tokens
  (``tail``, ``mojax.learner.packing``; the row count rounded up to a multiple of 16 so few shapes
  compile; ``compiles`` in its result counts compilations inside the timed steps).
* Micro-batches (``--micro_rows R``, default off: the whole batch in one forward and backward):
  mojax ``ppo.microbatch_tokens = R x T``, TRL ``per_device_train_batch_size = R`` with gradient
  accumulation over P x G / R micro-steps; both still one optimizer update per step. Tunix is left
  out of such runs (the flag refuses the side).
* Compilation: mojax and Tunix jit the update (compiled in the warm-up steps); TRL runs eager.
* Weight copy: Tunix's actor and rollout share one model on one mesh, so its learner copies no
  weights between steps (it reports ``synced``); mojax's sampler reads the learner's params.
* Threads: each framework's default (torch intra-op threads = cores; XLA's CPU thread pool).

Sides ``mojax-rows`` / ``mojax-batch`` (not in the default ``--sides``): mojax with
``ppo.logprob_compact = "rows"`` / ``"batch"`` (only the loss positions projected onto the
vocabulary; ``benchmarks/_peer_mojax.py``). Ratios are printed peer / mojax side and mojax /
mojax variant (> 1: the second is faster).

Usage (a quiet machine; at the default shape a worker runs 5 steps of 35-45 s after loading and
compiling, so 3 sides x 3 rounds x 2 distributions take about 1 hour; the compaction ablation
about 40 minutes)::

    bash benchmarks/peer_envs.sh                       # once: /work/venvs/trl, /work/venvs/tunix
    python benchmarks/rl_step_peers.py                 # both distributions, mojax / TRL / Tunix
    python benchmarks/rl_step_peers.py --sides mojax,mojax-rows,mojax-batch   # compaction
    python benchmarks/rl_step_peers.py --dists fixed --sides mojax-batch,trl --micro_rows 16
    python benchmarks/rl_step_peers.py --vocab 512 --hidden 64 --ffn 128 --layers 2 --heads 4 \\
        --kv_heads 2 --head_dim 16 --prompts 2 --samples 2 --new_tokens 8 --min_prompt 4 \\
        --max_prompt 8 --steps 1 --warmup 1 --rounds 1 --force   # smoke test (~3 minutes)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402

SIDES = ("mojax", "trl", "tunix")
#: the issue's targets: TRL / mojax and Tunix / mojax per step (median over rounds)
TARGETS = {"trl": 2.0, "tunix": 1.5}


def _shape_args(ap) -> None:
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv_heads", type=int, default=4)
    ap.add_argument("--head_dim", type=int, default=64)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    _harness.add_args(ap)
    _shape_args(ap)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--new_tokens", type=int, default=64)
    ap.add_argument("--min_prompt", type=int, default=16)
    ap.add_argument("--max_prompt", type=int, default=48)
    ap.add_argument("--tail_mean", type=float, default=16.0, help="tail: 1 / P(<eos>) per token")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per worker (min is kept)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    ap.add_argument("--dists", default="fixed,tail")
    ap.add_argument(
        "--sides",
        default=",".join(SIDES),
        help="of mojax, trl, tunix and mojax-rows / mojax-batch (mojax with ppo.logprob_compact); "
        "a -fused suffix fuses q/k/v and gate/up (mojax-fused, mojax-batch-fused); a -kept suffix "
        "keeps the logits chunks for the backward (ppo.logprob_remat=False: mojax-batch-kept)",
    )
    ap.add_argument("--compact_chunk", type=int, default=0, help="mojax-rows/-batch: logprob_chunk")
    ap.add_argument(
        "--mojax_draw",
        default="gumbel",
        choices=("gumbel", "inverse_cdf"),
        help='mojax sides: "gumbel" (the default) or "inverse_cdf" (rollout.draw; same distribution)',
    )
    ap.add_argument(
        "--micro_rows",
        type=int,
        default=0,
        help="rows per micro-batch of the one update, mojax and TRL (0 = the whole batch at once)",
    )
    ap.add_argument("--trl_device", default="cpu", choices=("cpu", "cuda"),
                    help="the TRL side's device (cuda: bf16 mixed precision; benchmarks/gpu_suite.sh)")  # fmt: skip
    ap.add_argument("--mojax_python", default=sys.executable)
    ap.add_argument("--trl_python", default="/work/venvs/trl/bin/python")
    ap.add_argument("--tunix_python", default="/work/venvs/tunix/bin/python")
    ap.add_argument("--ckpt", default=None, help="internal (workers): the shared checkpoint")
    ap.add_argument("--dist", default="fixed", help="internal (workers)")
    return ap.parse_args(argv)


# --------------------------------------------------------------------------------------------------
# the shared checkpoint (run once, in the mojax venv: it has torch and transformers)


def _calibrate_eos(model, vocab: int, target: float, seed: int = 0) -> tuple[float, float]:
    """Sets embedding column 0 (a constant ``c`` on every row, ``a`` on ``<eos>``'s) so the mean
    P(<eos>) over the positions of random sequences is ``target``; returns ``(a, measured)``."""
    import torch
    from _peer_common import EOS_ID

    emb = model.get_input_embeddings().weight
    g = torch.Generator().manual_seed(seed)
    probe = torch.randint(2, vocab, (4, 64), generator=g)
    c = 4.0  # dominates the residual stream's RMS: P(<eos>) barely depends on the context

    def p_eos(a: float) -> float:
        with torch.no_grad():
            emb[:, 0] = c
            emb[EOS_ID, 0] = a
            logits = model(input_ids=probe).logits.float()
            return float(torch.softmax(logits, -1)[..., EOS_ID].mean())

    lo, hi = c, c + 16.0
    for _ in range(24):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if p_eos(mid) < target else (lo, mid)
    a = 0.5 * (lo + hi)
    return a, p_eos(a)


def _save(model, tok, inputs: dict, out: str) -> None:
    import json

    model.save_pretrained(out)
    tok.save_pretrained(out)
    with open(os.path.join(out, "inputs.json"), "w") as f:
        json.dump(inputs, f)


def prepare_worker(args) -> None:
    """Writes ``<ckpt>/fixed`` (the random init) and ``<ckpt>/tail`` (the same weights, ``<eos>``
    made likely), each with the tokenizer and ``inputs.json``."""
    import numpy as np
    import tokenizers
    import torch
    import transformers
    from _peer_common import EOS_ID, PAD_ID, word

    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim, tie_word_embeddings=True,
        max_position_embeddings=4096, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        bos_token_id=None, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.bos_token_id = None
    vocab = {word(i): i for i in range(args.vocab)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<pad>"
    )
    fast.padding_side = "left"
    rng = np.random.RandomState(0)
    lens = rng.randint(args.min_prompt, args.max_prompt + 1, args.prompts)
    prompts = [rng.randint(2, args.vocab, n).tolist() for n in lens]
    inputs = dict(
        prompts=prompts, num_samples=args.samples, max_new_tokens=args.new_tokens,
        pad_id=PAD_ID, eos_id=EOS_ID, lr=args.lr, seed=0, max_prompt=args.max_prompt,
    )  # fmt: skip
    _save(model, fast, inputs, os.path.join(args.ckpt, "fixed"))
    a, p = _calibrate_eos(model, args.vocab, 1.0 / args.tail_mean)
    _save(model, fast, {**inputs, "eos_embedding": a, "p_eos": p}, os.path.join(args.ckpt, "tail"))
    n = sum(x.numel() for x in model.parameters())
    _harness.emit({"params": n, "eos_embedding": a, "p_eos": p})


# --------------------------------------------------------------------------------------------------
# the driver


def _worker(args) -> None:
    if args.worker == "prepare":
        return prepare_worker(args)
    module = {"trl": "_peer_trl", "tunix": "_peer_tunix"}.get(args.worker, "_peer_mojax")
    __import__(module).main(args)


def _report(dist: str, runs: dict, sides: list[str]) -> None:
    """Per side: min / median / max of generation, update and step; then per (peer, mojax side)
    and per mojax variant vs plain mojax, the per-round ratios (> 1: the second is faster)."""
    print(f"\n== {dist}: per-side seconds (min / median / max over rounds)")
    print(f"  {'side':<12s}{'generation':>24s}{'update':>24s}{'step':>24s}{'resp len':>10s}")
    for side in sides:
        cells = []
        for k in ("generation", "update", "step"):
            lo, med, hi = _harness.spread([r[k] for r in runs[side]])
            cells.append(f"{lo:6.2f} {med:6.2f} {hi:6.2f}")
        mean_len = sum(r["response_len"] for r in runs[side]) / len(runs[side])
        print(f"  {side:<12s}" + "".join(f"{c:>24s}" for c in cells) + f"{mean_len:10.1f}")
    ours = [s for s in sides if s.startswith("mojax")]
    pairs = [(o, m) for o in sides if o not in ours for m in ours]
    pairs += [("mojax", m) for m in ours if m != "mojax" and "mojax" in ours]
    for other, mine in pairs:
        for k in ("generation", "update", "step"):
            rat = [o[k] / m[k] for o, m in zip(runs[other], runs[mine])]
            lo, med, hi = _harness.spread(rat)
            goal = TARGETS.get(other) if k == "step" else None
            verdict = f"  target >= {goal:g}x: {'MET' if med >= goal else 'MISSED'}" if goal else ""
            print(f"  {other}/{mine} {k:<10s} min {lo:5.2f}x median {med:5.2f}x max {hi:5.2f}x"
                  f"{verdict}")  # fmt: skip


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        _worker(args)
        return 0
    print(_harness.machine_info(), flush=True)
    _harness.check_load(args.force, args.rounds)
    sides = [s for s in args.sides.split(",") if s]
    rows = args.prompts * args.samples
    if args.micro_rows and ("tunix" in sides or rows % args.micro_rows):
        sys.exit(f"--micro_rows {args.micro_rows}: must divide P x G = {rows}, and is implemented "
                 "for mojax and TRL only (drop the tunix side)")  # fmt: skip
    pythons = {s: args.mojax_python for s in sides if s.startswith("mojax")}
    pythons.update(trl=args.trl_python, tunix=args.tunix_python)
    env = _harness.worker_env({"JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false"})
    with tempfile.TemporaryDirectory() as ckpt:
        shape = ["--vocab", str(args.vocab), "--hidden", str(args.hidden), "--ffn", str(args.ffn),
                 "--layers", str(args.layers), "--heads", str(args.heads), "--kv_heads",
                 str(args.kv_heads), "--head_dim", str(args.head_dim)]  # fmt: skip
        data = ["--prompts", str(args.prompts), "--samples", str(args.samples), "--new_tokens",
                str(args.new_tokens), "--min_prompt", str(args.min_prompt), "--max_prompt",
                str(args.max_prompt), "--tail_mean", str(args.tail_mean), "--lr", str(args.lr)]  # fmt: skip
        prep = _harness.run_worker(
            __file__, ["--worker", "prepare", "--ckpt", ckpt, *shape, *data], env,
            python=args.mojax_python,
        )  # fmt: skip
        print(f"checkpoint: Qwen3 {prep['params'] / 1e6:.1f}M params, vocab {args.vocab}, "
              f"P={args.prompts} x G={args.samples}, {args.new_tokens} new tokens, prompts "
              f"{args.min_prompt}..{args.max_prompt}, tail: mean P(<eos>) {prep['p_eos']:.4f}",
              flush=True)  # fmt: skip
        for dist in args.dists.split(","):
            argv_w = ["--ckpt", os.path.join(ckpt, dist), "--dist", dist, "--steps",
                      str(args.steps), "--warmup", str(args.warmup), "--compact_chunk",
                      str(args.compact_chunk), "--micro_rows", str(args.micro_rows),
                      "--mojax_draw", args.mojax_draw, "--trl_device", args.trl_device]  # fmt: skip
            print(f"\n-- distribution {dist}", flush=True)
            runs = _harness.alternate(
                __file__, {s: argv_w for s in sides}, args.rounds, env=env,
                pythons={s: pythons[s] for s in sides},
            )  # fmt: skip
            _report(dist, runs, sides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
