"""mojax: multi-objective reinforcement learning post-training of LLMs in JAX.

Subpackages are imported lazily (``mojax.advantages``, ``mojax.pareto``, ...), so ``import mojax`` has no
side effects and does not initialise JAX backends.

Shape legend used in every docstring: ``P`` prompts in a batch, ``G`` samples per prompt (group), ``S``
answers in a VPO set, ``M`` objectives, ``B = P*G`` sequences, ``T`` tokens, ``V`` vocabulary, ``L``
layers, ``H`` heads, ``K`` kv heads, ``D`` head dim, ``E`` embed dim. Letters added for the model and
sampler internals, each with one meaning: ``C`` KV-cache (key) slots, ``R`` response slots, ``Q = H / K``
query heads per kv head, ``F`` MLP width, ``J`` stop ids per row, ``N`` items of a flat batch (responses,
examples) where no group structure applies.
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "advantages",
    "infra",
    "config",
    "metrics",
    "models",
    "pareto",
    "rl",
    "rollout",
    "sampling",
    "sharding",
    "spec",
    "tasks",
)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"mojax.{name}")
    raise AttributeError(f"module 'mojax' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
