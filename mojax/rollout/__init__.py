"""Multi-turn agentic rollouts with sandboxed tools.

Build the fixed settings once, then roll out batch after batch::

    spec = RolloutSpec.create(tokenizer, task, max_new_tokens=..., max_turns=..., ...)
    result = run_rollout(spec, model, tokenizer, task, prompts_ids, key=key, num_samples=G,
                         tool=tool, pool=pool)

``rollout(model, tokenizer, task, prompts_ids, key=..., max_new_tokens=..., tool=...)`` does both in
one call. The driver (``agent``) decodes, stops at the task's tool stop, runs the tool on the host,
appends the observation (loss-masked) and resumes in the same KV cache; ``spec`` holds the settings,
``rows`` the per-row state, ``calls`` the tool phase, ``observations`` the observation encoding,
``stops`` maps tool stop strings to ids, and ``tools`` holds the host-side tools (Python sandbox,
calculator, retrieval, worker pool).
"""

from mojax.rollout import tools
from mojax.rollout.agent import RolloutResult, rollout, run_rollout
from mojax.rollout.observations import encode_observation, malformed_message
from mojax.rollout.rows import Turn
from mojax.rollout.spec import FINISH_REASONS, RolloutSpec
from mojax.rollout.stops import StopSpec, candidate_end_ids, tool_stop_spec

__all__ = [
    "FINISH_REASONS",
    "RolloutResult",
    "RolloutSpec",
    "StopSpec",
    "Turn",
    "candidate_end_ids",
    "encode_observation",
    "malformed_message",
    "rollout",
    "run_rollout",
    "tool_stop_spec",
    "tools",
]
