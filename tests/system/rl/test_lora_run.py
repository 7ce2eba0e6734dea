"""A LoRA + packed GRPO run end to end: the state holds adapters only (the optimizer's moments are
adapter-sized), checkpoints hold the adapters and name the base, a resumed run ends where an
uninterrupted one does, and packing logs a padding fraction below the unpacked one."""

import json

import jax
import pytest
from mojax_test_utils import load_config, shrink


def _config(steps):
    c = shrink(load_config("grpo", "lora=4,pack=true"))
    c.sft.steps = 0
    c.steps = steps
    c.checkpoint_every = 1
    c.packing.width = 192  # three rows' worth: short calculator episodes share a row
    return c


def _records(path):
    return [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_lora_packed_run_checkpoints_adapters_and_resumes(tmp_path):
    from mojax import learner
    from mojax import spec as spec_lib
    from mojax.infra import checkpoint as ckpt_lib
    from mojax.rl import builders, trainer

    full, part = tmp_path / "full", tmp_path / "part"
    trainer.run(_config(2), str(full))
    trainer.run(_config(1), str(part))
    c2 = _config(2)
    c2.resume = "force"
    trainer.run(c2, str(part))
    a, b = _records(full), _records(part)
    keep = lambda r: {k: v for k, v in r.items() if not k.startswith("time/")}
    assert keep(a[-1]) == keep(b[-1])  # resumed == uninterrupted
    assert a[-1]["batch/padding_frac"] < a[-1]["batch/padding_frac_unpacked"]

    spec = spec_lib.validate(_config(2))
    with ckpt_lib.Checkpointer(str(full / "checkpoints"), read_only=True) as ckpt:
        run = builders.build_run(spec, str(full), pool=None)
        target = learner.abstract_train_state(
            run.learner.model_config, run.learner.tx, run.learner.mesh, run.learner.rules
        )
        state, host, _ = ckpt.restore(target)
    assert host["lora_base"]["rank"] == 4 and host["lora_base"]["variant"] == "tiny-qwen3"
    leaves = jax.tree_util.tree_flatten_with_path(state.params)[0]
    assert leaves and all("lora_" in str(p[-1]) for p, _ in leaves)  # adapters only
    n_adapter = sum(x.size for x in jax.tree.leaves(state.params))
    n_moments = sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim > 0)
    assert n_moments == 2 * n_adapter  # AdamW's mu and nu of the adapters, nothing full-size
    assert state.frozen is None  # the base is not in the checkpoint
