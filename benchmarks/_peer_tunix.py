"""Tunix's side of ``benchmarks/rl_step_peers.py``: ``GRPOLearner`` on an ``RLCluster``.

Runs under its own virtualenv (``/work/venvs/tunix``: google-tunix and its jax). The checkpoint is
loaded with ``tunix.models.qwen3.params.create_model_from_safe_tensors`` on a 1 x 1 mesh
(``("fsdp", "tp")``, ``AxisType.Auto`` axes: jax 0.10 meshes default to explicit axes, which Tunix's
sharding does not use). Actor and rollout share the model and mesh (colocated, no reference
model); the rollout engine is ``"vanilla"`` (Tunix's own sampler) with ``top_p = 1.0`` (the
vanilla sampler is greedy unless top-p or top-k is set), temperature 1. ``GRPOConfig``:
``num_generations = G``, ``num_iterations = 1``, ``beta = 0``, ε 0.2, ``loss_agg_mode =
"token-mean"``; ``RLTrainingConfig``: the whole batch in one optimizer update, ``optax`` AdamW
(b1 0.9, b2 0.999, eps 1e-8, no weight decay) after global-norm clipping at 1.

``fixed``: ``eos_tokens = [V]`` (an id outside the vocabulary, never sampled), so every row runs
``max_tokens_to_generate``; ``tail``: ``eos_tokens = [<eos>]``.

Timed without touching Tunix's code, by wrapping the cluster's methods on the instance:
``generation`` = ``RLCluster.generate``, ``update`` = ``RLCluster.update_actor``, ``step`` = from
the start of ``generate`` to the end of ``update_actor``, plus ``sync_weights`` (the trainer-to-
sampler weight copy) when the learner makes one (not when actor and rollout share the model).
"""

from __future__ import annotations

import json
import os

import _harness
import numpy as np
from _peer_common import StepTimer, ids_to_text, load_inputs, now, reward_of_ids, text_to_ids


def _model(ckpt: str, mesh):
    from tunix.models.qwen3 import model as qwen3
    from tunix.models.qwen3 import params as qwen3_params

    with open(os.path.join(ckpt, "config.json")) as f:
        hf = json.load(f)
    cfg = qwen3.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"], head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"],
        rope_theta=int(hf.get("rope_theta") or hf["rope_parameters"]["rope_theta"]),
        norm_eps=hf["rms_norm_eps"], use_tied_embedding=hf["tie_word_embeddings"],
    )  # fmt: skip
    return qwen3_params.create_model_from_safe_tensors(ckpt, cfg, mesh), hf["vocab_size"]


def main(args) -> None:
    import jax
    import optax
    import transformers
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    inp = load_inputs(args.ckpt)
    prompts, g, n = inp["prompts"], inp["num_samples"], inp["max_new_tokens"]
    p = len(prompts)
    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=auto, devices=jax.devices()[:1])
    model, vocab = _model(args.ckpt, mesh)
    tok = transformers.AutoTokenizer.from_pretrained(args.ckpt)
    total = args.warmup + args.steps
    eos = [inp["eos_id"]] if args.dist == "tail" else [vocab]
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=n, max_prompt_length=inp["max_prompt"],
        kv_cache_size=inp["max_prompt"] + n + 8, temperature=1.0, top_p=1.0, top_k=None,
        eos_tokens=eos,
    )  # fmt: skip
    opt = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(inp["lr"], b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0),
    )
    training = rlc.RLTrainingConfig(actor_optimizer=opt, eval_every_n_steps=10**9, max_steps=total)
    cluster = rlc.ClusterConfig(
        role_to_mesh={rlc.Role.ACTOR: mesh, rlc.Role.REFERENCE: mesh, rlc.Role.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False, training_config=training,
        rollout_config=rollout,
    )  # fmt: skip
    rl_cluster = rlc.RLCluster(actor=model, tokenizer=tok, cluster_config=cluster)
    algo = grpo_learner.GRPOConfig(num_generations=g, num_iterations=1, beta=0.0, epsilon=0.2,
                                   loss_agg_mode="token-mean")  # fmt: skip
    lengths: list[float] = []

    def reward(prompts, completions, **_):
        ids = [text_to_ids(c) for c in completions]
        lengths.append(sum(len(x) for x in ids) / len(ids))
        return [reward_of_ids(x) for x in ids]

    learner = grpo_learner.GRPOLearner(rl_cluster=rl_cluster, algo_config=algo, reward_fns=reward)
    timer, marks = StepTimer(), {}

    def wrap(name, before=None, after=None):
        fn = getattr(rl_cluster, name)

        def timed(*a, **kw):
            t = now()
            if before:
                before(t)
            out = fn(*a, **kw)
            if after:
                after(t, now())
            return out

        setattr(rl_cluster, name, timed)

    def updated(t, e):
        timer.add(marks["gen"], e - t, e - marks["begin"], response_len=lengths[-1])

    def synced(t, e):  # the weight copy closes the step (when the learner makes one)
        timer.rows[-1]["step"] += e - t

    wrap("generate", before=lambda t: marks.update(begin=t),
         after=lambda t, e: marks.update(gen=e - t))  # fmt: skip
    wrap("update_actor", after=updated)
    wrap("sync_weights", after=synced)
    texts = [ids_to_text(x) for x in prompts]
    assert tok(texts[0], add_special_tokens=False)["input_ids"] == prompts[0], "tokenizer mismatch"
    # a numpy array: the learner repeats each leaf G times (a list's strings would be leaves)
    learner.train([{"prompts": np.array(texts)} for _ in range(total)])
    assert len(timer.rows) == total, f"{len(timer.rows)} steps timed, expected {total}"
    _harness.emit(timer.result(args.warmup, side="tunix", jax=jax.__version__, rows=p * g,
                               synced=bool(learner.should_sync_weights)))  # fmt: skip
