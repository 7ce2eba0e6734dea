"""AWPO (arXiv:2512.19126): gated reasoning reward, difficulty weights and dynamic clip radius, against
GRPO on the outcome reward only, on the ToolRL split with the offline overlap judge.

    python experiments/awpo_gate.py                 # full grid -> docs/results/awpo_gate.md
    python experiments/awpo_gate.py --quick         # 1 seed, 1 RL step, tmp root

``grpo_outcome`` is ``configs/awpo.py`` with every AWPO part switched off: ``eps_mix=0`` (the gate
``w_g = 1[r_g < eps_mix] r_g`` never opens, Eq. 25), ``alpha_prio=1`` (no difficulty weight, Eq. 27)
and ``clip_min=clip_max=0.2`` (a fixed clip, Eq. 29), so ``A = groupnorm(R_out)``: GRPO on the
outcome reward, with the same data, model, judge and rollout shapes as the AWPO cells.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from experiments import _cli, _grid, _report  # noqa: E402

TITLE = "# AWPO: variance-aware gating vs GRPO on the outcome reward (ToolRL, offline judge)"
NOT_RUN = """\
The 3-seed grid (`python experiments/awpo_gate.py`: `awpo` and `grpo_outcome` x seeds 0, 1, 2 x 20
RL steps) was not run in this session: the calculator grid (ParetoPO and SAW claims, higher in
issue 15's order) took the session's CPU time, and an AWPO cell is the most expensive one here (the
tiny model's output layer spans the real Qwen2 vocabulary of 151,936 tokens; the first RL step of
`--quick`, compilation included, took 224 s with 4 sequences).

It would most likely show nothing at this scale. In `--quick` mode (seed 0, 1 RL step,
2026-11-25) the randomly initialised model scored `r_out = 0` and `r_reason = 0` on every training
and held-out sample of both methods: every group is constant, so every advantage is 0 and neither
method gets a gradient (AWPO's gate counts as open, `gate_frac = 1`, but with weight `w_g = r_g = 0`;
clip radius 0.2). A meaningful AWPO comparison needs a warm start that gives non-zero, varying
outcome rewards, e.g. SFT on `../shared/data/toolrl/rlla_sft.json`. The tiny default turns the warm
start off for every non-calculator task (`defaults.apply_common_args`: `c.sft.steps = 0`);
`--config.sft.steps=N --config.sft.data_path=../shared/data/toolrl/rlla_sft.json` would turn it
back on (not tried here: an SFT over the 151,936-token vocabulary is itself costly on this CPU).

The default `configs/awpo.py` run itself does not fit this 23 GB machine: its 16-sequence PPO
update asks XLA for a 54.6 GB buffer (`RESOURCE_EXHAUSTED`); the cells below update in 8
micro-batches (`--config.ppo.num_microbatches=8`)."""
CLAIM = "awpo_gate"
COST = """\
A cell is the most expensive run of the four claims on this 2-core CPU: the prompts are ~4k tokens
of tool descriptions and the output layer spans the real Qwen2 vocabulary (151,936 tokens). The
PPO update projects onto the vocabulary only the chunks of positions that hold response tokens
(`need` in `mojax/learner/logprobs.py`; before, every one of the ~4k prompt positions was projected);
what remains is the attention over 4k-token sequences, recomputed under `remat`. In this grid (run
niced next to the VPO grid, 2026-11-26) one RL step took 340-605 s per cell (`time/step_s`), of
which the rollout 7-17 s and the PPO update 324-583 s (`time/train_s`). Each cell scored 16
training samples and 8 held-out problems before and after its step. An SFT warm start on
`rlla_sft.json` (to get non-zero rewards) would push ~4k-token sequences through the same model for
hundreds of steps: hours on this machine."""
M = _grid.Method
OFF = ("--config.advantage.eps_mix=0.0", "--config.advantage.alpha_prio=1.0")
METHODS = [
    M("awpo", "configs/awpo.py", warm_start=False),
    M("grpo_outcome", "configs/awpo.py", (*OFF, "--config.advantage.clip_min=0.2"), False),
]


def memory(s) -> tuple[str, ...]:
    """The PPO update in 8 micro-batches: the default's single 16-sequence update over the 151,936
    token vocabulary asks XLA for a 54.6 GB buffer (RESOURCE_EXHAUSTED on a 23 GB machine).
    ``--quick`` also shrinks the batch (2 prompts x 2 samples, 4 micro-batches) and the held-out
    split (4)."""
    if not s.quick:
        return ("--config.ppo.num_microbatches=8",)
    quick = ("--config.rollout.prompts_per_step=2", "--config.rollout.num_samples=2")
    return (*quick, "--config.ppo.num_microbatches=4", "--config.task.num_eval=4")


METRICS = {
    "final held-out r_out": _report.last("eval/r_out"),
    "final held-out accuracy": _report.last("eval/accuracy"),
    "train r_out, mean of last 5 steps": _report.mean_tail("reward/r_out/mean", 5),
    "gate fraction, mean over steps": _report.mean_tail("advantage/awpo/gate_frac", 10**9),
    "clip radius, mean over steps": _report.mean_tail("advantage/awpo/clip_eps", 10**9),
}


REWARD_KEYS = ("reward/r_out/mean", "reward/r_reason/mean", "eval/r_out", "eval/accuracy")


def reward_max(results) -> float:
    """The largest reward any cell logged (training means and held-out values, every step)."""
    vals = [
        float(r[k])
        for runs in results.values()
        for rows in runs.values()
        for r in rows
        for k in REWARD_KEYS
        if isinstance(r.get(k), (int, float))
    ]
    return max(vals) if vals else float("nan")


def verdict(results) -> tuple[str, str]:
    if not {"awpo", "grpo_outcome"} <= set(results):
        return "inconclusive", "AWPO and GRPO were not both in this grid."
    f = METRICS["final held-out r_out"]
    d, se = _report.difference(
        _report.values(results, "awpo", f), _report.values(results, "grpo_outcome", f)
    )
    if reward_max(results) == 0.0:
        cells = sum(len(runs) for runs in results.values())
        return "inconclusive: the setting is too small to show anything", (
            f"Every reward in all {cells} cells is 0: `r_out` and `r_reason` on every training "
            "sample, `r_out` and accuracy on every held-out problem, before and after RL. The "
            "randomly initialised tiny model never writes a parseable ToolRL answer (format 0, "
            "execution 0), so every group is constant, every advantage is 0, and AWPO and GRPO "
            "take the same zero-advantage update: AWPO's gate (Eq. 25) has only zero reasoning "
            "rewards to admit and its difficulty weights multiply zeros. Nothing here can separate "
            "the methods; that needs a model that already writes the format (a pretrained "
            "checkpoint, `paper=true`, or SFT on `rlla_sft.json`), which is out of this CPU's "
            f"reach (see Cost). Δ final held-out r_out = {d:+.4f} (2 SE = {2 * se:.4f})."
        )
    word = _report.verdict_word([(d, se)])
    gate = _report.values(results, "awpo", METRICS["gate fraction, mean over steps"])
    return word, (
        f"AWPO − GRPO (outcome only): Δ final held-out r_out = {d:+.4f} (2 SE = {2 * se:.4f}); "
        f"AWPO's gate opened on a mean fraction {_report.fmt(_report.mean_std(gate)[0])} of the "
        "groups per step. A gap within 2 SE is seed noise at this scale."
    )


def page(s, grid, methods, results, plots, missing) -> str:
    word, reason = verdict(results)
    cmds = [_grid.shell(_grid.cell_command(grid, m, seed)) for seed in grid.seeds for m in methods]
    rel = {k: os.path.relpath(v, s.out) for k, v in plots.items()}
    return f"""# AWPO: variance-aware gating vs GRPO on the outcome reward (ToolRL, offline judge)

Claim (AWPO, arXiv:2512.19126): gating a judge's reasoning reward into the advantage where it
helps, with difficulty weights and a dynamic clip radius, improves the outcome reward over GRPO on
the outcome reward alone.

Setting: `configs/awpo.py`'s tiny default: the real ToolRL test split in `../shared/data/toolrl`
(80 prompts), the real Qwen2 tokenizer, a randomly initialised tiny Qwen3-architecture model (no SFT
warm start: there is no tiny warm start for ToolRL), 4 prompts × 4 samples per step (the update in
8 micro-batches), responses of up to 32 tokens, the offline overlap judge, **{s.steps} RL step{"s" if s.steps != 1 else ""}**, held-out evaluation on 8
problems. `grpo_outcome` = the same config with every AWPO part off (see the script's docstring).
Grid: {len(methods)} methods × {len(grid.seeds)} seeds {list(grid.seeds)}. ± is the sample std over
seeds (ddof = 1). {_report.PAIRED_NOTE} {"**Quick mode: a smoke test, not a result.**" if s.quick else ""}

## Verdict: {word}

{reason}

## Cost

{COST}

## Mean ± std over seeds

{_report.summary_table(results, METRICS, digits=4)}

## Every seed

{_report.per_seed_table(results, METRICS, digits=4)}

## Plots

![curves]({rel["curves"]})

## Commands

The grid: `python experiments/{CLAIM}.py --seeds={",".join(map(str, grid.seeds))} --steps={s.steps}`.

{_report.commands_block(cmds)}

{_grid.missing_block(grid, missing)}
"""


def main(argv):
    del argv
    s = _cli.settings("awpo", steps=20, quick_steps=1, quick_methods=["awpo", "grpo_outcome"])
    methods = _grid.select(METHODS, s.methods)
    grid = _grid.Grid(root=s.root, seeds=s.seeds, rl=(f"--config.steps={s.steps}", *memory(s)))
    methods, results, missing = _grid.run_claim(CLAIM, grid, methods, s.report_only)
    if not results:  # --report_only before any cell finished
        page_path = os.path.join(s.out, f"{CLAIM}.md")
        text = _grid.not_run_text(TITLE, NOT_RUN, grid, missing)
        print(f"wrote {_report.write_page(page_path, text)}", flush=True)
        return
    keys = [
        "reward/r_out/mean",
        "reward/r_reason/mean",
        "advantage/awpo/gate_frac",
        "advantage/awpo/clip_eps",
    ]
    plots = {
        "curves": _report.plot_curves(
            results, keys, os.path.join(s.out, CLAIM, "curves.png"), "AWPO claim", ncols=2
        )
    }
    path = _report.write_page(
        os.path.join(s.out, f"{CLAIM}.md"), page(s, grid, methods, results, plots, missing)
    )
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    app.run(main)
