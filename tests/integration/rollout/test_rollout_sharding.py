"""A sharded multi-turn rollout (8 simulated CPU devices) equals the unsharded one.

Runs in a child process with 8 forced CPU devices (``conftest.run_with_devices``). Mesh ("data",
"fsdp", "tensor") = (2, 2, 2), params placed by ``mojax.models.param_shardings``; the driver passes
the mesh to every sampler call. Same model, key, tokenizer and tool: the transcripts, tool calls
and finish reasons must be identical and the log-probs within 1e-5 (reduction order only). The
sharded side also decodes in segments with the tool calls overlapping the decode
(``decode_segment``), which must not change the result either. A third rollout runs the
continuous sampler on the same mesh (8 slots for 16 rows, over the data x fsdp shards).
"""

import numpy as np
import pytest


def sharded_and_unsharded_rollouts(tmp: str):
    """Runs in the 8-device child: the same rollout unsharded and sharded; returns both."""
    import jax
    from jax.sharding import Mesh

    import mojax.models as mm
    from mojax.rollout import RolloutSpec, run_rollout
    from mojax.rollout.tools import Calculator
    from mojax.sampling.continuous.engine import ContinuousSampler
    from mojax.tasks.calculator import CalculatorTask, sft_demonstrations
    from mojax.tasks.framework.vocab import build_sentencepiece

    assert jax.device_count() == 8
    task = CalculatorTask()
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    texts = [
        chat.format(d.example.messages[0]["content"]) + d.response
        for d in sft_demonstrations(task.load("train", 200, seed=0))
    ]
    tags = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
    tok = mm.load_tokenizer(build_sentencepiece(texts, tmp + "/sp.model", user_symbols=tags))
    vocab = -(-tok.vocab_size // 64) * 64  # padded past the tokenizer's ids, as real models are
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=vocab)
    ref = mm.QwenModel(config=cfg, params=mm.init_params(cfg, jax.random.key(3)))
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    sharded = ref.replace(params=jax.device_put(ref.params, mm.param_shardings(cfg, mesh)))
    prompts = [tok.encode(task.build_prompt(ex, tok)) for ex in task.load("validation", 4)]
    spec = RolloutSpec.create(
        tok, task, max_new_tokens=32, max_turns=3, max_obs_tokens=16, temperature=1.0, top_p=0.95
    )
    kw = dict(key=jax.random.key(7), num_samples=4, tool=Calculator())
    engine = ContinuousSampler.of(sharded, slots=8, mesh=mesh)  # 16 rows in 8 slots on 4 shards
    out = []
    for model, m, s in ((ref, None, spec), (sharded, mesh, spec.replace(decode_segment=8)),
                        (engine, None, spec)):  # fmt: skip
        r = run_rollout(s, model, tok, task, prompts, mesh=m, **kw)
        out.append(
            dict(
                tokens=r.tokens,
                logprobs=r.logprobs,
                loss_mask=r.loss_mask,
                n_calls=r.n_calls,
                finish_reason=r.finish_reason,
                texts=r.texts,
                counters=r.counters,
            )
        )
    return out


@pytest.mark.slow
def test_sharded_rollout_equals_unsharded(tmp_path):
    from conftest import run_with_devices

    a, *others = run_with_devices(sharded_and_unsharded_rollouts, str(tmp_path), devices=8)
    assert a["counters"].get("tool_calls", 0) >= 1, a["counters"]
    assert others[0]["counters"]["segment_resumes"] >= 1, others[0]["counters"]
    for b in others:  # the static sampler on the mesh, the continuous sampler on the mesh
        for field in ("tokens", "loss_mask", "n_calls"):
            np.testing.assert_array_equal(a[field], b[field])
        assert a["finish_reason"] == b["finish_reason"] and a["texts"] == b["texts"]
        np.testing.assert_allclose(a["logprobs"], b["logprobs"], atol=1e-5, rtol=0)
