"""A sharded multi-turn rollout (8 simulated CPU devices) equals the unsharded one.

Runs in a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Mesh ("data",
"fsdp", "tensor") = (2, 2, 2), params placed by ``mojax.models.param_shardings``; the driver passes
the mesh to every sampler call. Same model, key, tokenizer and tool: the transcripts, tool calls
and finish reasons must be identical and the log-probs within 1e-5 (reduction order only).
"""

import os
import subprocess
import sys
import textwrap

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = textwrap.dedent(
    """
    import sys, jax, numpy as np
    from jax.sharding import Mesh
    import mojax.models as mm
    from mojax.rollout import rollout
    from mojax.rollout.tools import Calculator
    from mojax.tasks.calculator import CalculatorTask, sft_demonstrations
    from mojax.tasks.vocab import build_sentencepiece

    assert jax.device_count() == 8
    task = CalculatorTask()
    chat = "<|im_start|>user\\n{}<|im_end|>\\n<|im_start|>assistant\\n"
    texts = [chat.format(d.example.messages[0]["content"]) + d.response
             for d in sft_demonstrations(task.load("train", 200, seed=0))]
    tags = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
    tok = mm.load_tokenizer(build_sentencepiece(texts, sys.argv[1] + "/sp.model", user_symbols=tags))
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=128)  # padded vocab
    ref = mm.QwenModel(config=cfg, params=mm.init_params(cfg, jax.random.key(3)))
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    sharded = ref.replace(params=jax.device_put(ref.params, mm.param_shardings(cfg, mesh)))
    prompts = [tok.encode(task.build_prompt(ex, tok)) for ex in task.load("validation", 4)]
    kw = dict(key=jax.random.key(7), num_samples=4, max_new_tokens=32, max_turns=3,
              max_obs_tokens=16, temperature=1.0, top_p=0.95, tool=Calculator())
    a = rollout(ref, tok, task, prompts, **kw)
    b = rollout(sharded, tok, task, prompts, mesh=mesh, **kw)
    assert a.counters.get("tool_calls", 0) >= 1, a.counters
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.loss_mask, b.loss_mask)
    np.testing.assert_array_equal(a.n_calls, b.n_calls)
    assert a.finish_reason == b.finish_reason and a.texts == b.texts
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
    print("OK", a.counters)
    """
)


@pytest.mark.slow
def test_sharded_rollout_equals_unsharded(tmp_path):
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "OK" in proc.stdout
