"""The rollout batch: prompts and responses laid out per row, masks and old log-probs aligned,
checked against a plain per-row loop."""

import numpy as np
import pytest

from mojax.learner import PPOBatch
from mojax.rl.state import PromptIterator
from mojax.rl.step import assemble_batch


def test_assemble_batch_equals_row_loop():
    rng = np.random.default_rng(0)
    prompts = [[5, 6, 7], [8], [9, 10]]
    g, r, t = 2, 5, 9
    b = len(prompts) * g
    toks = rng.integers(1, 50, (b, r))
    lps = -rng.random((b, r)).astype(np.float32)
    mask = (rng.random((b, r)) < 0.7).astype(np.float32)
    lengths = np.array([5, 0, 3, 1, 4, 2])
    adv = rng.normal(size=(len(prompts), g)).astype(np.float32)
    out = assemble_batch(prompts, g, toks, lps, mask, lengths, t, advantages=adv)
    assert isinstance(out, PPOBatch) and out.clip_eps is None and out.ref_logprobs is None
    for row in range(b):
        p = prompts[row // g]
        n = lengths[row]
        exp_t = np.zeros(t, np.int32)
        exp_t[: len(p)] = p
        exp_t[len(p) : len(p) + n] = toks[row, :n]
        np.testing.assert_array_equal(out.tokens[row], exp_t)
        exp_m = np.zeros(t)
        exp_m[len(p) : len(p) + n] = mask[row, :n]
        np.testing.assert_array_equal(out.loss_mask[row], exp_m)
        exp_lp = np.zeros(t, np.float32)
        exp_lp[len(p) : len(p) + n] = lps[row, :n] * mask[row, :n]
        np.testing.assert_array_equal(out.old_logprobs[row], exp_lp)
        np.testing.assert_array_equal(out.attention_mask[row], np.arange(t) < len(p) + n)
        assert out.advantages[row] == adv[row // g, row % g]


def test_assemble_batch_errors_name_the_argument():
    z = np.zeros((2, 3))
    with pytest.raises(ValueError, match="response_tokens has 2 rows"):
        assemble_batch([[1]], 3, z, z, z, np.zeros(2, int), 8, advantages=np.zeros(2))
    with pytest.raises(ValueError, match="response_mask"):
        assemble_batch(
            [[1]], 2, z, z, np.zeros((2, 4)), np.zeros(2, int), 8, advantages=np.zeros(2)
        )
    with pytest.raises(ValueError, match="total_len"):
        assemble_batch([[1, 2]], 2, z, z, z, np.zeros(2, int), 4, advantages=np.zeros(2))
    with pytest.raises(ValueError, match="advantages must hold B = 2"):
        assemble_batch([[1]], 2, z, z, z, np.zeros(2, int), 8, advantages=np.zeros(3))


def test_prompt_iterator_epochs_and_exact_resume():
    it = PromptIterator(list(range(10)), batch_size=4, seed=3)
    seen = [it.next() for _ in range(5)]  # 20 draws = two full epochs
    assert sorted(sum(seen[:2], []) + seen[2][:2]) == list(range(10))
    assert it.state_dict() == {"epoch": 2, "position": 0, "seed": 3}
    a = PromptIterator(list(range(10)), batch_size=4, seed=3)
    a.next(), a.next()
    b = PromptIterator(list(range(10)), batch_size=4, seed=3)
    b.load_state_dict(a.state_dict())
    assert [a.next() for _ in range(3)] == [b.next() for _ in range(3)]
    with pytest.raises(ValueError, match="seed"):
        PromptIterator([1], 1, seed=4).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="no training examples"):
        PromptIterator([], 1)
