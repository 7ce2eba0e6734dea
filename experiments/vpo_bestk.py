"""VPO (arXiv:2605.22817, the best@k figures): does VPO's best@k rise faster with k than GRPO's? On the
maze, against GRPO on the scalar ``w*·r`` and Multi-RLVR, all with the same answer pool.

    python experiments/vpo_bestk.py                 # full grid -> docs/results/vpo_bestk.md
    python experiments/vpo_bestk.py --quick         # vpo and grpo, 1 seed, 1 RL step, tmp root

Pool: ``configs/vpo.py``'s tiny default evaluates 2 chains x S = 2 answers per problem; ``grpo``
(single answers, ``task.num_answers=0``) evaluates 4 chains, so every method's best@k runs over k =
1..4 answers.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from experiments import _cli, _grid, _report  # noqa: E402

TITLE = "# VPO: best@k against k on the maze"
NOT_RUN = """\
The 3-seed grid (`python experiments/vpo_bestk.py`: `vpo`, `grpo` and `multi_rlvr` x seeds 0, 1, 2,
each after the seed's BFS-route SFT warm start) has not finished yet: no cell is done."""
CLAIM = "vpo_bestk"
POOL = 4
KS = tuple(range(1, POOL + 1))
M = _grid.Method
SINGLE = (
    "--config.estimator=grpo",
    "--config.task.num_answers=0",
    f"--config.eval.num_samples={POOL}",
)
BASELINE = "configs/vpo.py:estimator=multi_rlvr"
# one warm start per seed for all three: the maze SFT teaches both the single-answer and the
# S = 2 route format, over a vocabulary trained on both prompt layouts (mojax.tasks.maze_sft)
METHODS = [
    M("vpo", "configs/vpo.py"),
    M("grpo", BASELINE, SINGLE),
    M("multi_rlvr", BASELINE),
]


def warm_start(s) -> tuple[str, ...]:
    """The keys every SFT run and cell share: 1000 training mazes (each a single-answer and a
    2-route demonstration), the warm start's schedule, a 512-piece vocabulary (the prompt is ~395 tokens instead of ~595 with
    the default 256), room for two routes (<= 74 tokens), and the held-out mazes."""
    steps, batch, held_out = sft_shape(s)
    return (
        "--config.task.num_train=1000",
        "--config.sft.num_examples=1000",
        f"--config.sft.steps={steps}",
        f"--config.sft.batch_size={batch}",
        "--config.tokenizer.vocab_size=512",
        "--config.rollout.max_new_tokens=80",
        "--config.rollout.max_response_len=80",
        f"--config.task.num_eval={held_out}",
    )


SFT_STEPS, SFT_BATCH, HELD_OUT = 300, 32, 32


def sft_shape(s) -> tuple[int, int, int]:
    """(SFT steps, SFT batch, held-out mazes); ``--quick``: (4, 4, 4)."""
    return (4, 4, 4) if s.quick else (SFT_STEPS, SFT_BATCH, HELD_OUT)


METRICS = {
    **{f"best@{k}": _report.last(f"eval/best@{k}") for k in KS},
    **{f"E_w[best@{k}]": _report.last(f"eval/E_w[best@{k}]") for k in KS},
    "best@4 − best@1": lambda rows: (
        _report.last(f"eval/best@{POOL}")(rows) - _report.last("eval/best@1")(rows)
    ),
    "diversity": _report.last("eval/diversity"),
    "collinearity": _report.last("eval/collinearity"),
    "completion (reaches E)": _report.last("eval/completion"),
    "valid fraction": _report.last("eval/valid_fraction"),
    "after SFT: best@1": _report.first("eval/best@1"),
    f"after SFT: best@{POOL}": _report.first(f"eval/best@{POOL}"),
    "after SFT: completion": _report.first("eval/completion"),
}
GAIN = METRICS["best@4 − best@1"]


def GAIN0(rows):  # noqa: N802 - the rise after SFT (step 0), as GAIN
    return _report.first(f"eval/best@{POOL}")(rows) - _report.first("eval/best@1")(rows)


def verdict(results) -> tuple[str, str]:
    if not {"vpo", "grpo"} <= set(results):
        return "inconclusive", "VPO and GRPO were not both in this grid."
    d, se = _report.difference(
        _report.values(results, "vpo", GAIN), _report.values(results, "grpo", GAIN)
    )
    word = _report.verdict_word([(d, se)])
    rise0 = {m: _report.mean_std(_report.values(results, m, GAIN0))[0] for m in ("vpo", "grpo")}
    b1 = _report.mean_std(_report.values(results, "vpo", _report.last("eval/best@1")))[0]
    moved, beyond = [], False
    for m in ("vpo", "grpo"):
        dm, sm = _report.difference(
            _report.values(results, m, _report.last(f"eval/best@{POOL}")),
            _report.values(results, m, _report.first(f"eval/best@{POOL}")),
        )
        moved.append(f"{m} {dm:+.4f} (2 SE = {2 * sm:.4f})")
        beyond |= abs(dm) > 2 * sm
    return word, (
        f"VPO − GRPO in the rise best@{POOL} − best@1 after RL: {d:+.4f} (2 SE = {2 * se:.4f}, "
        f"paired by seed). After SFT, before RL, the rises were VPO {_report.fmt(rise0['vpo'], 4)}"
        f" and GRPO {_report.fmt(rise0['grpo'], 4)}; VPO's final best@1 is {_report.fmt(b1, 4)}. "
        f"RL itself moved best@{POOL} by {', '.join(moved)} from the warm start"
        + (
            "."
            if beyond
            else f": at this scale (4 prompts × 4 samples per step, held-out estimates from "
            f"{HELD_OUT} mazes at temperature 1) the RL phase changes nothing beyond the noise, so "
            "the comparison cannot separate the methods."
        )
    )


def page(s, grid, methods, results, plots, missing) -> str:
    word, reason = verdict(results)
    cmds = [_grid.shell(_grid.cell_command(grid, m, seed)) for seed in grid.seeds for m in methods]
    rel = {k: os.path.relpath(v, s.out) for k, v in plots.items()}
    sft_steps, sft_batch, held_out = sft_shape(s)
    return f"""# VPO: best@k against k on the maze

Claim (VPO, arXiv:2605.22817): training on a Dirichlet-scalarised set maximum over S answers makes
best@k rise faster with k than GRPO on the fixed scalar `w*·r`.

Setting: `configs/vpo.py`'s tiny maze recipe: the VPO maze (App. A.1; objectives completion, gold,
diamond, avoid_lava; `w*` = 0.25 each), a 512-piece sentencepiece vocabulary trained on the maze
prompts, a tiny Qwen3-architecture model (4 layers, width 128). **Warm start:** SFT on BFS-solver
routes (`mojax/tasks/maze_sft.py`): per training maze (1000) a single-answer demonstration (one of
the direct / via-gold / via-diamond routes) and a 2-route demonstration (two different kinds),
{sft_steps} steps of {sft_batch} sequences, one warm start per seed shared by the three methods (the
`sft/s<seed>` command below). Then **{s.steps} RL steps** of 4 prompts × 4 samples, S = 2 answers
(GRPO: single answers), and evaluation on {held_out} held-out mazes at temperature 1 with a pool of
{POOL} answers per maze (2 chains × 2 answers; GRPO: 4 single answers), before RL (step 0, "after
SFT") and after.
Grid: {len(methods)} methods × {len(grid.seeds)} seeds {list(grid.seeds)}. ± is the sample std over
seeds (ddof = 1). {_report.PAIRED_NOTE} {"**Quick mode: a smoke test, not a result.**" if s.quick else ""}

## Verdict: {word}

{reason}

## Mean ± std over seeds

{_report.summary_table(results, METRICS, digits=4)}

## Every seed

{_report.per_seed_table(results, METRICS, digits=4)}

## Plots

![best@k]({rel["bestk"]})

## Commands

The grid: `python experiments/{CLAIM}.py --seeds={",".join(map(str, grid.seeds))} --steps={s.steps}`.
The shared warm starts (each cell copies its seed's `checkpoints_sft`; a cell's command run in an
empty workdir trains the identical warm start itself):

{_report.commands_block([_grid.shell(_grid.sft_command(grid, seed)) for seed in grid.seeds])}

The cells:

{_report.commands_block(cmds)}

{_grid.missing_block(grid, missing)}
"""


def plot_bestk(results, path: str) -> str:
    """best@k and E_w[best@k] against k after RL (solid) and after SFT (dashed): mean over seeds,
    error bars = std."""
    plt = _report._pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, name in zip(axes, ("best@{}", "E_w[best@{}]")):
        for i, m in enumerate(results):
            for when, style in ((_report.last, "-"), (_report.first, "--")):
                stats = [
                    _report.mean_std(_report.values(results, m, when("eval/" + name.format(k))))
                    for k in KS
                ]
                mu, sd = zip(*stats)
                ax.errorbar(KS, mu, yerr=sd, marker="os^D"[i % 4], capsize=3, ls=style,
                            color=f"C{i}", label=m if style == "-" else f"{m} (after SFT)")  # fmt: skip
        ax.set_xlabel("k (answers)")
        ax.set_title(name.format("k") + ": after RL (solid), after SFT (dashed)")
        ax.set_xticks(KS)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv):
    del argv
    s = _cli.settings("vpo", steps=60, quick_steps=1, quick_methods=["vpo", "grpo"])
    methods = _grid.select(METHODS, s.methods)
    ks = "(" + ",".join(map(str, KS)) + ")"
    rl = (f"--config.steps={s.steps}", f"--config.eval.ks={ks}")
    rl += ("--config.rollout.prompts_per_step=4",)
    grid = _grid.Grid(
        root=s.root,
        seeds=s.seeds,
        common=warm_start(s),
        rl=rl,
        sft_config="configs/vpo.py",
        sft=("--config.steps=0", "--config.eval_every=1"),
    )
    methods, results, missing = _grid.run_claim(CLAIM, grid, methods, s.report_only)
    if not results:  # --report_only before any cell finished
        page_path = os.path.join(s.out, f"{CLAIM}.md")
        text = _grid.not_run_text(TITLE, NOT_RUN, grid, missing)
        print(f"wrote {_report.write_page(page_path, text)}", flush=True)
        return
    plots = {"bestk": plot_bestk(results, os.path.join(s.out, CLAIM, "bestk.png"))}
    path = _report.write_page(
        os.path.join(s.out, f"{CLAIM}.md"), page(s, grid, methods, results, plots, missing)
    )
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    app.run(main)
