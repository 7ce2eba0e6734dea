"""LoRA in the RL loop: the frozen base a run's adapters train on, and what its checkpoints name.

With ``config.lora.enabled`` the train state holds the adapters (``TrainState.params``) and their
optimizer moments only; the frozen base (``TrainState.frozen``, quantised for QLoRA) is the run's
initial policy (``mojax.rl.warm_start.initial_params``: the HF checkpoint, the seeded random init,
or the SFT warm start), rebuilt deterministically on every start and resume and never checkpointed:
each checkpoint's host state names it (``lora_base``). Every process builds the same base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mojax import learner
from mojax import workdir as workdir_lib
from mojax.models import lora as lora_lib
from mojax.rl.warm_start import initial_params

if TYPE_CHECKING:
    from mojax.rl.spec import RunSpec


def enabled(run) -> bool:
    return run.model_config.lora is not None


def base_name(spec: RunSpec) -> dict[str, Any]:
    """What a LoRA checkpoint's frozen base is: the run's initial policy and its storage."""
    return {
        "checkpoint": spec.model.checkpoint,
        "variant": "" if spec.model.checkpoint else spec.model.variant,
        "seed": spec.seed,
        "sft_steps": spec.sft.steps,
        "quant": spec.lora.quant,
        "rank": spec.lora.rank,
        "alpha": spec.lora.alpha,
        "targets": list(spec.lora.targets),
    }


def saved_host(run, host) -> dict[str, Any]:
    """The host state a checkpoint saves: ``host``, the run's resolved config (``config``: the
    copy ``python -m mojax.workdir_restore`` rewrites a damaged ``config.json`` from) and, under
    LoRA, the base's name."""
    out = host.to_dict()
    out["config"] = workdir_lib.config_tree(run.spec.resolved)
    if enabled(run):
        out["lora_base"] = base_name(run.spec)
    return out


def with_base(run, workdir: str, state):
    """A restored state with its frozen base attached (itself without LoRA)."""
    if not enabled(run):
        return state
    dense = initial_params(run, workdir)
    return learner.attach_frozen(run.model_config, state, dense, run.mesh, run.rules)


def reference_params(run, workdir: str, state, resumed: bool):
    """The KL reference: the initial policy (under LoRA: the base with zero-update adapters)."""
    if not resumed:
        return learner.policy_params(state)
    dense = initial_params(run, workdir)
    if not enabled(run):
        return dense
    fresh = learner.create_train_state(
        run.model_config, run.tx, seed=run.spec.seed, mesh=run.mesh, rules=run.rules, params=dense
    )
    return lora_lib.merge(fresh.frozen, fresh.params)
