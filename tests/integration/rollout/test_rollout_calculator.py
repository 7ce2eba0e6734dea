"""End to end: tiny Qwen (random weights), the calculator task, its own sentencepiece vocabulary
and the real Calculator tool through the ToolPool, sampled at temperature 1.

An untrained model writes garbage, so most of its calls are malformed or fail in the tool: the
point is that nothing crashes, the transcripts parse, every executed call's observation appears,
observations are exactly the loss-masked spans, and the sampled log-probs equal a teacher-forced
forward pass (no cache) over the final transcripts (fp32, 1e-4).
"""

import jax
import numpy as np
import pytest

import mojax.models as mm
from mojax.rl.step import assemble_batch
from mojax.rollout import FINISH_REASONS, rollout
from mojax.rollout.observations import TRUNCATION_MARK, malformed_message
from mojax.rollout.tools import Calculator, ToolPool
from mojax.tasks.calculator import CalculatorTask, sft_demonstrations
from mojax.tasks.framework.vocab import build_sentencepiece

ATOL = 1e-4
TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
WIDTH = 192


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    task = CalculatorTask()
    examples = task.load("train", 200, seed=0)
    texts = [
        task.build_prompt(d.example, _ChatML()) + d.response for d in sft_demonstrations(examples)
    ]
    texts += [malformed_message("</calc>"), TRUNCATION_MARK, "Error: unsupported syntax"]
    path = build_sentencepiece(
        texts, tmp_path_factory.mktemp("sp") / "calc.model", user_symbols=TAGS
    )
    tok = mm.load_tokenizer(path)
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=tok.vocab_size)
    model = mm.QwenModel(config=cfg, params=mm.init_params(cfg, jax.random.key(3)))
    prompts = [tok.encode(task.build_prompt(ex, tok)) for ex in task.load("validation", 4)]
    return task, tok, model, prompts


class _ChatML:
    """Text-only chat template for building the vocabulary's training texts."""

    @staticmethod
    def apply_chat_template(messages, add_generation_prompt=True, tokenize=False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + "<|im_start|>assistant\n"


def test_calculator_rollout_end_to_end(setup):
    task, tok, model, prompts = setup
    with ToolPool(max_workers=4, timeout_s=10) as pool:
        res = rollout(
            model,
            tok,
            task,
            prompts,
            key=jax.random.key(7),
            num_samples=8,
            max_new_tokens=32,
            max_turns=3,
            max_obs_tokens=24,
            temperature=1.0,
            tool=Calculator(),
            pool=pool,
        )
        stats = dict(pool.stats)
    b, r = res.tokens.shape
    # the trainer's batch (design.md "Rollout batch"): the loss mask and old log-probs carry over
    zeros = np.zeros(b, np.float32)
    batch = assemble_batch(
        prompts, 8, res.tokens, res.logprobs, res.loss_mask, res.lengths, WIDTH, advantages=zeros
    )
    assert batch.loss_mask.sum() == res.loss_mask.sum()
    np.testing.assert_allclose(batch.old_logprobs.sum(), res.logprobs.sum(), rtol=1e-5)
    assert b == 32 and set(res.finish_reason) <= set(FINISH_REASONS)
    c = res.counters
    assert c["tool_calls"] >= 3, c  # the untrained model does write </calc> (1 in ~V tokens)
    assert sum(stats.values()) == c.get("tool_calls_run", 0)
    assert c.get("malformed", 0) == sum(t.malformed for turns in res.turns for t in turns)

    # teacher-forced log-probs over every final transcript (one batched forward, no cache)
    toks = np.zeros((b, WIDTH), np.int32)
    mask = np.zeros((b, WIDTH), np.int32)
    for i in range(b):
        seq = prompts[i // 8] + res.tokens[i, : res.lengths[i]].tolist()
        toks[i, : len(seq)], mask[i, : len(seq)] = seq, 1
    logits = np.asarray(model(toks, attention_mask=mask)).astype(np.float64)
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)

    for i in range(b):
        n, plen = int(res.lengths[i]), len(prompts[i // 8])
        assert 1 <= n <= r
        # the observations are exactly the masked spans
        want_mask = np.ones(n, bool)
        for t in res.turns[i]:
            if t.executed:
                want_mask[t.end : t.end + t.obs_tokens] = False
                assert t.observation in res.texts[i]  # the tool output appears
                assert t.obs_tokens <= 24
        np.testing.assert_array_equal(res.loss_mask[i, :n], want_mask)
        assert not res.loss_mask[i, n:].any()
        assert res.n_calls[i] == sum(t.executed for t in res.turns[i])
        pos = np.arange(plen - 1, plen - 1 + n)
        want = logp[i, pos, res.tokens[i, :n]]
        np.testing.assert_allclose(
            res.logprobs[i, :n][want_mask], want[want_mask], atol=ATOL, rtol=0
        )
        assert not res.logprobs[i, :n][~want_mask].any()
        # transcripts parse: calls counted by the task agree, rewards are scored without errors
        assert task.count_tool_calls(res.texts[i]) >= res.n_calls[i]
        reward = task.score(res.texts[i], task.load("validation", 4)[i // 8])
        assert reward.shape == (2,) and np.isfinite(reward).all()
        last = res.turns[i][-1]
        assert last.ended_by == res.finish_reason[i] and not last.executed
