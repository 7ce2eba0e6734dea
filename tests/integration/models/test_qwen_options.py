"""Execution options change speed/memory, never values: remat, scan vs unrolled, dtype policy.

References: the plain (no remat, scanned, fp32) forward; a numpy log-softmax for ``token_logprobs``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm


@pytest.fixture(scope="module")
def base():
    return mm.from_pretrained("tiny-qwen3", seed=2)


def _batch(cfg, seed=0):
    rng = np.random.RandomState(seed)
    tokens = jnp.asarray(rng.randint(0, cfg.vocab_size, (2, 9)), jnp.int32)
    mask = jnp.asarray([[1] * 9, [0, 0, 0] + [1] * 6], jnp.int32)
    return tokens, mask


def _loss(model, params, tokens, mask):
    logits = model.apply_fn({"params": params}, tokens, attention_mask=mask)
    lp = mm.token_logprobs(logits, jnp.roll(tokens, -1, 1))
    return -jnp.sum(lp * mask) / jnp.sum(mask)


@pytest.mark.parametrize("remat", ["full", "dots"])
def test_remat_gives_same_loss_and_grads(base, remat):
    tokens, mask = _batch(base.config)
    ref_v, ref_g = jax.jit(jax.value_and_grad(lambda p: _loss(base, p, tokens, mask)))(base.params)
    other = base.replace_config(remat=remat)
    v, g = jax.jit(jax.value_and_grad(lambda p: _loss(other, p, tokens, mask)))(base.params)
    np.testing.assert_allclose(v, ref_v, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), g, ref_g)


def test_unrolled_layers_equal_scanned(base, tmp_path):
    mm.save_pretrained(base, tmp_path)
    unrolled = mm.from_pretrained(tmp_path, scan_layers=False, remat="full")
    assert "layers_1" in unrolled.params and "layers" not in unrolled.params
    tokens, mask = _batch(base.config, seed=1)
    np.testing.assert_allclose(
        unrolled(tokens, attention_mask=mask), base(tokens, attention_mask=mask), atol=1e-5
    )
    with pytest.raises(ValueError, match="scan_layers changes the parameter layout"):
        base.replace_config(scan_layers=False)


def test_unstack_layers_equals_loading_unrolled(base, tmp_path):
    """``unstack_layers`` (the CPU decode loop's layout) = the checkpoint loaded unrolled."""
    from mojax.models.qwen import unstack_layers

    mm.save_pretrained(base, tmp_path)
    loaded = mm.from_pretrained(tmp_path, scan_layers=False)
    unstacked = jax.jit(unstack_layers)(base)
    assert not unstacked.config.scan_layers and unstacked.config == loaded.config
    assert jax.tree.structure(unstacked.params) == jax.tree.structure(loaded.params)
    jax.tree.map(np.testing.assert_array_equal, unstacked.params, loaded.params)
    assert unstack_layers(loaded) is loaded  # already unrolled: unchanged
    tokens, mask = _batch(base.config, seed=3)
    np.testing.assert_allclose(
        unstacked(tokens, attention_mask=mask), base(tokens, attention_mask=mask), atol=1e-5
    )


def test_policy_logprobs_through_unstacked_layers_equal_scanned(base):
    """``mojax.rl.token_logprobs`` unstacks scanned layers on the CPU backend: its log-probs and
    its gradient with respect to the *stacked* parameters equal those of the scanned model applied
    as is (the hidden states by ``Qwen.apply`` with ``scan_layers=True``, the same head)."""
    from mojax.learner import logprobs as lp_lib

    assert base.config.scan_layers
    tokens, mask = _batch(base.config, seed=5)
    weights = jnp.asarray(np.random.RandomState(6).rand(*tokens.shape), jnp.float32)

    def scanned(params):
        hidden = mm.Qwen(base.config).apply(
            {"params": params}, tokens, attention_mask=mask, return_hidden=True
        )
        lp, _ = lp_lib.logprobs_from_hidden(base.config, params, hidden, tokens)
        return jnp.sum(lp * weights), lp

    def policy(params):
        lp, _ = lp_lib.token_logprobs(base.config, params, tokens, attention_mask=mask)
        return jnp.sum(lp * weights), lp

    (_, want), g_want = jax.jit(jax.value_and_grad(scanned, has_aux=True))(base.params)
    (_, got), g_got = jax.jit(jax.value_and_grad(policy, has_aux=True))(base.params)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert jax.tree.structure(g_got) == jax.tree.structure(base.params)  # stacked, as given
    for path, a, b in zip(
        jax.tree_util.tree_leaves_with_path(g_got), jax.tree.leaves(g_got), jax.tree.leaves(g_want)
    ):
        scale = float(np.abs(np.asarray(b)).max()) or 1.0
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale, err_msg=str(path[0]))


def test_dtype_policy(base, tmp_path):
    mm.save_pretrained(base, tmp_path)
    tokens, mask = _batch(base.config, seed=2)
    ref = np.asarray(base(tokens, attention_mask=mask))
    # bf16 params + bf16 compute: logits still fp32, close to the fp32 model
    bf16 = mm.from_pretrained(tmp_path, dtype="bfloat16")
    assert {x.dtype for x in jax.tree.leaves(bf16.params)} == {jnp.dtype(jnp.bfloat16)}
    out = bf16(tokens, attention_mask=mask)
    assert out.dtype == jnp.float32
    rel = np.abs(np.asarray(out) - ref).max() / np.abs(ref).max()
    assert rel < 0.05
    # fp32 master params, bf16 compute
    mixed = mm.from_pretrained(tmp_path, dtype="bfloat16", param_dtype="float32")
    assert {x.dtype for x in jax.tree.leaves(mixed.params)} == {jnp.dtype(jnp.float32)}
    assert mixed(tokens, attention_mask=mask).dtype == jnp.float32


def test_hidden_then_logits_equals_logits(base):
    tokens, mask = _batch(base.config, seed=3)
    variables = {"params": base.params}
    hidden = base.apply_fn(variables, tokens, attention_mask=mask, return_hidden=True)
    assert hidden.shape == (2, 9, base.config.hidden_size)
    logits = base.apply_fn(variables, hidden[:, 3:5], method=mm.Qwen.logits)
    np.testing.assert_allclose(logits, base(tokens, attention_mask=mask)[:, 3:5], atol=1e-6)


def test_token_logprobs_matches_numpy_log_softmax():
    rng = np.random.RandomState(0)
    logits = rng.randn(3, 5, 11).astype(np.float32) * 4
    targets = rng.randint(0, 11, (3, 5))
    shifted = logits - logits.max(-1, keepdims=True)
    ref = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    ref = np.take_along_axis(ref, targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(mm.token_logprobs(jnp.asarray(logits), targets), ref, atol=1e-5)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="num_heads=6 must be a multiple of num_kv_heads=4"):
        mm.get_variant("tiny-qwen3", num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match="dtype='float64'"):
        mm.get_variant("tiny-qwen3", dtype="float64")
    with pytest.raises(ValueError, match="remat='some'"):
        mm.get_variant("tiny-qwen3", remat="some")
    with pytest.raises(ValueError, match="unknown model variant 'qwen4'"):
        mm.get_variant("qwen4")
    with pytest.raises(TypeError, match=r"no field\(s\) \['n_layers'\]"):
        mm.get_variant("tiny-qwen3").replace(n_layers=3)
