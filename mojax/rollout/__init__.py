"""Multi-turn agentic rollouts with sandboxed tools (issue 7).

``rollout(model, tokenizer, task, prompts_ids, key=..., max_new_tokens=..., tool=...)`` decodes,
stops at the task's tool stop, runs the tool on the host, appends the observation (loss-masked)
and resumes in the same KV cache (``mojax.rollout.agent``); ``tools`` holds the host-side tools
(Python sandbox, calculator, retrieval, worker pool); ``stops`` maps tool stop strings to ids.
"""

from mojax.rollout import tools
from mojax.rollout.agent import (
    FINISH_REASONS,
    RolloutResult,
    Turn,
    encode_observation,
    malformed_message,
    rollout,
)
from mojax.rollout.stops import StopSpec, candidate_end_ids, tool_stop_spec

__all__ = [
    "FINISH_REASONS",
    "RolloutResult",
    "StopSpec",
    "Turn",
    "candidate_end_ids",
    "encode_observation",
    "malformed_message",
    "rollout",
    "tool_stop_spec",
    "tools",
]
