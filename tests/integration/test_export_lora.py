"""LoRA export: the merged HF directory loads in transformers and the PEFT adapter directory loads
onto the base's transformers model with ``peft``; both decode greedily the tokens mojax decodes
with the adapters (a tiny random Qwen2 and Qwen3, adapters with non-zero B), and their logits
agree with mojax's."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import jax  # noqa: E402

from mojax import export, models  # noqa: E402
from mojax.models import lora  # noqa: E402
from mojax.sampling import InGraphSampler  # noqa: E402

PROMPT = np.array([[5, 9, 2, 33, 17, 8], [40, 3, 3, 12, 60, 1]], np.int32)
NEW = 12


def _hf_greedy(model):
    with torch.no_grad():
        out = model.generate(
            torch.tensor(PROMPT, dtype=torch.long),
            attention_mask=torch.ones(PROMPT.shape, dtype=torch.long),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
        logits = model(torch.tensor(PROMPT, dtype=torch.long)).logits.float().numpy()
    return out[:, PROMPT.shape[1] :].numpy(), logits


@pytest.mark.parametrize("variant,targets", [
    ("tiny-qwen3", lora.PROJECTIONS), ("tiny-qwen2", ("q_proj", "v_proj", "o_proj", "up_proj")),
])  # fmt: skip
def test_merged_and_peft_exports_decode_like_mojax(tmp_path, variant, targets):
    dense_cfg = models.get_variant(
        variant, vocab_size=64, eos_token_id=None, bos_token_id=None, pad_token_id=None
    )
    cfg = dense_cfg.replace(lora=lora.LoraConfig(rank=4, alpha=8.0, targets=targets))
    dense = models.init_params(dense_cfg, jax.random.key(0))
    dense = jax.tree.map(lambda x: x * 5.0 if x.ndim > 1 else x, dense)  # peaked logits
    ad = lora.init_adapters(cfg, jax.random.key(1), models.param_shapes(cfg))
    ad = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.key(2), x.shape), ad)
    full = lora.merge(dense, ad)

    sampler = InGraphSampler(cfg)
    sampler.update_weights(full)
    out = sampler.generate(PROMPT, key=jax.random.key(0), max_new_tokens=NEW, temperature=0.0)
    ours = np.asarray(out.tokens)
    our_logits = np.asarray(models.QwenModel(cfg, full)(PROMPT))

    base_dir, merged_dir, peft_dir = (str(tmp_path / n) for n in ("base", "merged", "peft"))
    models.save_pretrained(models.QwenModel(dense_cfg, dense), base_dir)
    export.write_merged(cfg, full, merged_dir)
    export.write_peft(cfg, ad, peft_dir, base=base_dir)

    merged = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    with_adapter = peft.PeftModel.from_pretrained(base, peft_dir).eval()
    n_lora = sum(1 for n, _ in with_adapter.named_parameters() if "lora_" in n)
    assert n_lora == 2 * len(targets) * dense_cfg.num_layers  # every adapter was loaded
    for hf in (merged.eval(), with_adapter):
        tokens, logits = _hf_greedy(hf)
        np.testing.assert_array_equal(tokens, ours)
        np.testing.assert_allclose(logits, our_logits, atol=2e-4 * np.abs(our_logits).max())
    # the adapters matter: the base alone decodes differently
    base_tokens, _ = _hf_greedy(
        transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    )
    assert not np.array_equal(base_tokens, ours)
