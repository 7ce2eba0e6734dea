"""HF checkpoints in and out: round trips through transformers, sharded files, clear errors, sizes.

References: transformers itself (it writes the input checkpoints, loads what mojax writes, and
counts real-size parameters on the meta device) and the real Qwen2-1.5B-Instruct config.json.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
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
from mojax.models import safetensors_io  # noqa: E402


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    rs = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    hf = build_hf(hf_config("qwen3", 4, 2, tie=False, head_dim=32, rope_scaling=rs), seed=3)
    path = tmp_path_factory.mktemp("qwen3")
    hf.save_pretrained(path)
    return path, hf


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    hf = build_hf(hf_config("qwen2", 4, 2, tie=True), seed=4)
    path = tmp_path_factory.mktemp("qwen2")
    hf.save_pretrained(path)
    return path, hf


def _state(model):
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("which", ["qwen2", "qwen3"])
@pytest.mark.parametrize("scan_layers", [True, False])
def test_round_trip_through_transformers(which, scan_layers, qwen2_dir, qwen3_dir, tmp_path):
    src, hf = {"qwen2": qwen2_dir, "qwen3": qwen3_dir}[which]
    model = mm.from_pretrained(src, scan_layers=scan_layers)
    mm.save_pretrained(model, tmp_path)
    back = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ref, got = _state(hf), _state(back)
    assert set(ref) == set(got)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    assert back.config.rope_parameters == hf.config.rope_parameters
    tokens, mask = padded_batch(seed=5)
    np.testing.assert_array_equal(hf_logits(back, tokens, mask), hf_logits(hf, tokens, mask))
    ours = np.asarray(model(jnp.asarray(tokens), attention_mask=jnp.asarray(mask)))
    assert max_masked_diff(ours, hf_logits(back, tokens, mask), mask) <= ATOL


def test_bf16_save_loads_in_transformers(qwen3_dir, tmp_path):
    src, hf = qwen3_dir
    model = mm.from_pretrained(src, dtype="bfloat16")
    assert jax.tree.leaves(model.params)[0].dtype == jnp.bfloat16
    mm.save_pretrained(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    for k, v in hf.state_dict().items():
        assert torch.equal(back.state_dict()[k], v.to(torch.bfloat16)), k


def test_save_with_tokenizer_serves_as_is(qwen2_dir, qwen2_tokenizer_dir, tmp_path):
    src, _ = qwen2_dir
    mm.save_pretrained(mm.from_pretrained(src), tmp_path, tokenizer_dir=qwen2_tokenizer_dir)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert tok.eos_token_id == 151645 and tok.chat_template
    assert mm.load_tokenizer(tmp_path).encode("Hello world") == [9707, 1879]
    with pytest.raises(FileNotFoundError, match="tokenizer_dir"):
        mm.save_pretrained(mm.from_pretrained(src), tmp_path / "x", tokenizer_dir=tmp_path / "no")


def test_sharded_checkpoints_both_ways(qwen3_dir, tmp_path):
    src, hf = qwen3_dir
    hf.save_pretrained(tmp_path / "hf_sharded", max_shard_size="40KB")
    assert (tmp_path / "hf_sharded" / "model.safetensors.index.json").is_file()
    single = mm.from_pretrained(src)
    sharded = mm.from_pretrained(tmp_path / "hf_sharded")
    jax.tree.map(np.testing.assert_array_equal, single.params, sharded.params)

    mm.save_pretrained(single, tmp_path / "ours", max_shard_bytes=40_000)
    index = json.loads((tmp_path / "ours" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours", dtype=torch.float32)
    for k, v in hf.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def _rewrite(src, dst, edit):
    """Copies an HF checkpoint dir, editing its tensor dict with ``edit``."""
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    f = safetensors_io.SafetensorsFile(src / "model.safetensors")
    tensors = {n: np.array(f.get(n)) for n in f.names}
    edit(tensors)
    safetensors_io.save_file(tensors, dst / "model.safetensors")
    return dst


def test_missing_extra_and_misshaped_tensors_are_named(qwen3_dir, tmp_path):
    src, _ = qwen3_dir
    miss = _rewrite(
        src, tmp_path / "miss", lambda t: t.pop("model.layers.1.self_attn.k_norm.weight")
    )
    with pytest.raises(ValueError, match=r"missing tensors: \['model.layers.1.self_attn.k_norm"):
        mm.from_pretrained(miss)

    def misshape(t):
        t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"][:, :-1]

    bad = _rewrite(src, tmp_path / "bad", misshape)
    with pytest.raises(
        ValueError, match=r"mis-shaped.*model.layers.0.mlp.up_proj.weight.*\(96, 63\)"
    ):
        mm.from_pretrained(bad)

    def extra(t):
        t["model.layers.2.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"]

    ext = _rewrite(src, tmp_path / "extra", extra)
    with pytest.raises(ValueError, match=r"unexpected tensors: \['model.layers.2.mlp.up_proj"):
        mm.from_pretrained(ext)


def test_unsupported_architecture_and_unknown_keys(qwen2_dir, tmp_path):
    src, _ = qwen2_dir
    cfg = json.loads((src / "config.json").read_text())
    llama = dict(cfg, architectures=["LlamaForCausalLM"], model_type="llama")
    with pytest.raises(ValueError, match="unsupported architecture.*LlamaForCausalLM"):
        mm.QwenConfig.from_hf(llama)
    moe = dict(cfg, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe")
    (tmp_path / "config.json").write_text(json.dumps(moe))
    with pytest.raises(ValueError, match="unsupported architecture.*Qwen2MoeForCausalLM"):
        mm.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"unknown config.json key\(s\) \['num_experts'\]"):
        mm.QwenConfig.from_hf(dict(cfg, num_experts=8))
    assert mm.QwenConfig.from_hf(dict(cfg, num_experts=8), strict=False).num_layers == 2
    with pytest.raises(ValueError, match="rope_scaling type 'llama3' is not supported"):
        mm.QwenConfig.from_hf(dict(cfg, rope_scaling={"rope_type": "llama3", "factor": 8.0}))
    with pytest.raises(ValueError, match="neither a checkpoint directory nor a variant"):
        mm.from_pretrained("qwen9-1b")
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        mm.from_pretrained(tmp_path)


@pytest.mark.parametrize("variant", ["qwen2.5-1.5b", "qwen3-1.7b"])
def test_real_size_param_count_equals_transformers(variant):
    config = mm.get_variant(variant)
    hf_cfg = transformers.AutoConfig.for_model(**config.to_hf_dict())
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    n_hf = sum(p.numel() for p in hf.parameters())  # tied weights are one parameter
    assert mm.param_count(config) == n_hf
    assert config.num_params() == n_hf
    shapes = mm.param_shapes(config)  # eval_shape: no memory for 1.5B parameters
    assert shapes["layers"]["self_attn"]["q_proj"]["kernel"].shape == (
        config.num_layers, config.hidden_size, config.num_heads, config.head_dim
    )  # fmt: skip


@pytest.mark.parametrize("variant", sorted(mm.VARIANTS))
def test_every_variant_builds_in_transformers_with_same_count(variant):
    config = mm.get_variant(variant)
    hf_cfg = transformers.AutoConfig.for_model(**config.to_hf_dict())
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    assert config.num_params() == sum(p.numel() for p in hf.parameters())
    assert mm.QwenConfig.from_hf(config.to_hf_dict()) == config


def test_real_qwen2_config_matches_variant_shapes(shared):
    real = mm.QwenConfig.from_hf(shared / "assets" / "qwen2-tokenizer" / "config.json")
    variant = mm.get_variant("qwen2.5-1.5b")
    fields = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")
    fields += ("head_dim", "vocab_size", "tie_word_embeddings", "qkv_bias", "qk_norm")
    for field in fields:
        assert getattr(real, field) == getattr(variant, field), field
    assert real.eos_token_id == 151645 and real.rope_theta == 1e6
