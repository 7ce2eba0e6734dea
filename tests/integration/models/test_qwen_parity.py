"""Logits parity with transformers' PyTorch Qwen2 / Qwen3 (random weights, fp32, padded batches).

The reference is transformers itself: a tiny HF model is built in-process with torch, every weight
(norm scales and biases included) is randomised, it is saved with HF ``save_pretrained`` and loaded
by ``mojax.models.from_pretrained``. Rows are full, left-padded and right-padded; HF gets the same
``position_ids = cumsum(mask) - 1``. Only real-token logits are compared (padding rows are garbage
in both). Tolerance: max |Δ| <= 1e-4 (never loosened).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402
from mojax_test_utils import (  # noqa: E402
    ATOL,
    build_hf,
    hf_config,
    hf_logits,
    max_masked_diff,
    padded_batch,
)

import mojax.models as mm  # noqa: E402

CASES = {
    "qwen2-mha-untied": ("qwen2", dict(heads=4, kv_heads=4, tie=False)),
    "qwen2-gqa-tied": ("qwen2", dict(heads=4, kv_heads=2, tie=True)),
    "qwen2-mqa-untied": ("qwen2", dict(heads=4, kv_heads=1, tie=False)),
    "qwen3-gqa-untied-headdim32": ("qwen3", dict(heads=4, kv_heads=2, tie=False, head_dim=32)),
    "qwen3-mqa-tied-headdim8": ("qwen3", dict(heads=4, kv_heads=1, tie=True, head_dim=8)),
    "qwen3-mha-tied": ("qwen3", dict(heads=4, kv_heads=4, tie=True)),
    "qwen3-yarn": (
        "qwen3",
        dict(
            heads=4,
            kv_heads=2,
            tie=False,
            head_dim=32,
            rope_scaling={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
    ),
    "qwen2-yarn": (
        "qwen2",
        dict(heads=4, kv_heads=2, tie=True, rope_scaling={"type": "yarn", "factor": 2.0}),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case, tmp_path):
    model_type, kw = CASES[case]
    hf = build_hf(hf_config(model_type, **kw))
    hf.save_pretrained(tmp_path)
    model = mm.from_pretrained(tmp_path, dtype="float32", scan_layers=case.endswith("tied"))
    assert model.config.model_type == model_type
    tokens, mask = padded_batch()
    ours = np.asarray(model(jnp.asarray(tokens), attention_mask=jnp.asarray(mask)))
    ref = hf_logits(hf, tokens, mask)
    assert ours.dtype == np.float32
    assert max_masked_diff(ours, ref, mask) <= ATOL


def test_yarn_frequencies_match_transformers():
    """The YaRN inverse frequencies and attention factor equal transformers' own computation."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from mojax.models.layers import rope_frequencies

    rs = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}
    cfg = hf_config("qwen3", heads=4, kv_heads=2, tie=False, head_dim=128, rope_scaling=rs)
    ref_inv, ref_scale = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    ours_inv, ours_scale = rope_frequencies(mm.QwenConfig.from_hf(cfg.to_dict()))
    np.testing.assert_allclose(ours_inv, ref_inv.numpy(), rtol=1e-6)
    assert ours_scale == pytest.approx(ref_scale, rel=1e-9)
    assert ours_scale != 1.0


@pytest.mark.parametrize("block, t", [(5, 12), (None, 150)])
def test_query_blocked_attention_matches_transformers(block, t, tmp_path):
    """The uncached forward with its attention in query blocks (``layers.attend_causal``,
    ``Layouts.causal_block``), scanned and unrolled, against transformers: 5-row blocks at T = 12
    and the CPU layouts' blocks at T = 150 (32 rows: 32, 32, 32, 32, 22)."""
    import jax

    from mojax.models import layouts

    lay = layouts.CPU if block is None else layouts.Layouts(causal_block=block)
    assert lay.causal_block_rows(t) < t  # the blocked path runs
    hf = build_hf(hf_config("qwen3", heads=4, kv_heads=2, tie=False, head_dim=32))
    hf.save_pretrained(tmp_path)
    tokens, mask = padded_batch(seed=3, t=t)
    ref = hf_logits(hf, tokens, mask)
    for scan_layers in (True, False):
        model = mm.from_pretrained(tmp_path, dtype="float32", scan_layers=scan_layers)
        model = model.replace_config(layouts=lay)
        fwd = jax.jit(lambda p, x, m, f=model.apply_fn: f({"params": p}, x, attention_mask=m))
        ours = np.asarray(fwd(model.params, jnp.asarray(tokens), jnp.asarray(mask)))
        assert max_masked_diff(ours, ref, mask) <= ATOL, scan_layers
