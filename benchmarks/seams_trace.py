"""The path of ``config`` and of one rollout through the package, measured by tracing a real run.

Runs a 3-step GRPO run of the embedded default (tiny sizes) in a subprocess whose ``mojax`` comes
from ``--repo`` (any checkout: the same measurement before and after a change), with a profile hook
on every Python call, and prints:

* **config path**: the modules whose functions receive the run config (an ``ml_collections``
  ``ConfigDict`` or one of its sections) as an argument, in first-call order; the number of them
  ("modules crossed"); and the calls that climb back up a layer (caller module -> callee module with
  the callee in a higher layer of ``RANKS``);
* **rollout path**: the same for every call inside the second training rollout
  (``EpisodeRunner.run`` of step 2, warm: no tracing or compilation), all mojax modules entered.

``RANKS`` orders the package from the foundation up; it places the modules of earlier layouts (the
learner under ``mojax.rl``, ``mojax.config_show``, ``mojax.logging``) where their code lives now, so
both checkouts are measured against one map.

    python benchmarks/seams_trace.py --repo .            # this checkout
    python benchmarks/seams_trace.py --repo /tmp/old     # another checkout of mojax
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

# (rank, module prefixes): the longest matching prefix gives a module's layer.
RANKS = [
    (
        0,
        (
            "mojax",
            "mojax.config",
            "mojax.distributed",
            "mojax.infra.jsonl",
            "mojax.infra.preemption",
        ),
    ),
    (0, ("mojax.infra.paths",)),
    (1, ("mojax.models", "mojax.sharding", "mojax.hf_tokenizer")),
    (2, ("mojax.pareto", "mojax.metrics", "mojax.advantages")),
    (3, ("mojax.sampling", "mojax.learner", "mojax.rl.losses", "mojax.rl.ppo")),
    (3, ("mojax.rl.train_step", "mojax.rl.logprobs", "mojax.rl.state", "mojax.rl.sft")),
    (4, ("mojax.rollout.tools",)),
    (5, ("mojax.tasks",)),
    (6, ("mojax.rollout",)),
    (
        7,
        (
            "mojax.infra.checkpoint",
            "mojax.infra.log_backends",
            "mojax.infra.plots",
            "mojax.logging",
        ),
    ),
    (7, ("mojax.infra.logbook", "mojax.infra.workdir")),
    (8, ("mojax.spec", "mojax.spec.sections", "mojax.spec.rules", "mojax.spec.model_config")),
    (8, ("mojax.spec.show", "mojax.config_show")),
    (9, ("mojax.rl",)),
    (10, ("mojax.main", "mojax.export", "mojax.defaults")),
]


def rank(module: str) -> int:
    best, out = -1, 0
    for r, prefixes in RANKS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, out = len(p), r
    return out


_CHILD = r"""
import json, os, sys, importlib.util
sys.path.insert(0, REPO)
import ml_collections
os.environ.setdefault("JAX_PLATFORMS", "cpu")
root = os.path.join(REPO, "mojax") + os.sep

def module_of(frame):
    f = frame.f_code.co_filename
    if not f.startswith(root):
        return None
    rel = f[len(REPO) + 1:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel

def caller_module(frame):
    f = frame.f_back
    while f is not None:
        m = module_of(f)
        if m is not None:
            return m
        f = f.f_back
    return None

def has_config(frame):
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    for name in code.co_varnames[:n]:
        v = frame.f_locals.get(name)
        if isinstance(v, ml_collections.ConfigDict):
            return True
    return False

config_mods, config_edges = [], []
rollout_calls, depth, runs = [], [0], [0]

def prof(frame, event, arg):
    if event != "call":
        if event == "return" and depth[0] and frame.f_code.co_name == "run" and \
                module_of(frame) == "mojax.rl.episodes" and frame is active[0]:
            depth[0] = 0
        return
    m = module_of(frame)
    if m is None:
        return
    if m == "mojax.rl.episodes" and frame.f_code.co_name == "run" and depth[0] == 0:
        runs[0] += 1
        if runs[0] == TARGET_RUN:
            depth[0], active[0] = 1, frame
    if depth[0]:
        c = caller_module(frame)
        if c is not None and c != m:
            rollout_calls.append((c, m))
        rollout_mods.setdefault(m, len(rollout_mods))
    if has_config(frame):
        if m not in config_mods:
            config_mods.append(m)
        c = caller_module(frame)
        if c is not None and c != m:
            config_edges.append((c, m, frame.f_code.co_name))

active, rollout_mods = [None], {}
spec = importlib.util.spec_from_file_location("cfg", os.path.join(REPO, "configs", "grpo.py"))
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
c = mod.get_config()
c.steps, c.eval_every, c.checkpoint_every = 3, 100, 100
c.sft.steps = 0
c.rollout.prompts_per_step, c.rollout.num_samples = 2, 2
c.task.num_train, c.task.num_eval = 64, 4
c.eval.num_samples, c.eval.ks = 1, (1,)
from mojax.rl import trainer
sys.setprofile(prof)
trainer.run(c, WORKDIR)
sys.setprofile(None)
print("RESULT " + json.dumps({"config_mods": config_mods, "config_edges": config_edges,
                               "rollout_mods": list(rollout_mods), "rollout_calls": rollout_calls}))
"""


def measure(repo: str) -> dict:
    repo = os.path.abspath(repo)
    with tempfile.TemporaryDirectory() as work:
        src = f"REPO = {repo!r}\nWORKDIR = {os.path.join(work, 'run')!r}\nTARGET_RUN = 3\n"
        env = dict(os.environ, PYTHONPATH=repo)
        out = subprocess.run(
            [sys.executable, "-c", src + _CHILD],
            env=env,
            capture_output=True,
            text=True,
            cwd=work,
        )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the traced run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def climbs(edges) -> list:
    return [e for e in edges if rank(e[1]) > rank(e[0])]


def report(res: dict) -> dict:
    cfg_climbs = climbs(res["config_edges"])
    roll_climbs = climbs(res["rollout_calls"])
    return {
        "config_modules": len(res["config_mods"]),
        "config_climbs": len(cfg_climbs),
        "config_path": res["config_mods"],
        "config_climb_calls": sorted({f"{a} -> {b}.{f}" for a, b, f in cfg_climbs}),
        "rollout_modules": len(res["rollout_mods"]),
        "rollout_climbs": len(roll_climbs),
        "rollout_path": res["rollout_mods"],
        "rollout_climb_edges": sorted({f"{a} -> {b}" for a, b in roll_climbs}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=".", help="the mojax checkout to measure")
    a = parser.parse_args()
    print(json.dumps(report(measure(a.repo)), indent=1))


if __name__ == "__main__":
    main()
