"""Sharded placement: logical axes -> mesh shardings, slice-wise checkpoint reads, equal logits.

The 8-device part runs in a child process with 8 forced CPU devices (``conftest.run_with_devices``;
jax may already be initialised in this process) and returns its measurements as data. Reference: the same checkpoint loaded unsharded.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from mojax_test_utils import build_hf, hf_config  # noqa: E402

import mojax.models as mm  # noqa: E402
from mojax.models import hf as hf_io  # noqa: E402
from mojax.models import safetensors_io  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_shard")
    build_hf(hf_config("qwen3", 4, 2, tie=False, head_dim=32), seed=7).save_pretrained(path)
    return path


@pytest.mark.parametrize("scan_layers", [True, False])
def test_slice_reads_equal_full_reads(ckpt, scan_layers):
    """Every TensorMap returns ``full[idx]`` for slices on any axis (inner head_dim slices too)."""
    f = safetensors_io.SafetensorsFile(ckpt / "model.safetensors")
    config = mm.QwenConfig.from_hf(ckpt, scan_layers=scan_layers)
    rng = np.random.RandomState(0)
    for key, m in hf_io.tensor_maps(config).items():
        full_shape = ((len(m.hf_names),) if m.stacked else ()) + m.shape
        full = m.read_slice(f.get, tuple(slice(None) for _ in full_shape))
        if m.stacked:
            np.testing.assert_array_equal(full[1], m.to_mojax(np.asarray(f.get(m.hf_names[1]))))
        for _ in range(4):
            idx = []
            for n in full_shape:
                parts = rng.choice([1, 2, 4]) if n % 4 == 0 else 1
                j = rng.randint(parts)
                idx.append(slice(j * n // parts, (j + 1) * n // parts))
            np.testing.assert_array_equal(m.read_slice(f.get, tuple(idx)), full[tuple(idx)], key)


def sharded_load_and_forward(ckpt: str) -> dict:
    """In the 8-device child: load sharded vs unsharded, forward/backward and a cached prefill."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    assert jax.device_count() == 8
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    ref = mm.from_pretrained(ckpt)
    model = mm.from_pretrained(ckpt, mesh=mesh)
    cfg, rules = model.config, mm.DEFAULT_LOGICAL_AXIS_RULES
    q = model.params["layers"]["self_attn"]["q_proj"]["kernel"]  # [L, E, H, D]
    out = {"q_spec": q.sharding.spec, "q_shard": q.addressable_shards[0].data.shape}
    out["embed_spec"] = model.params["embed_tokens"].sharding.spec
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), ref.params, model.params)
    out["params_equal"] = all(jax.tree.leaves(same))
    rng = np.random.RandomState(0)
    tokens = jnp.asarray(rng.randint(0, cfg.vocab_size, (4, 16)), jnp.int32)
    mask = jnp.asarray(np.arange(16)[None] >= np.array([0, 3, 0, 7])[:, None], jnp.int32)
    from mojax.models.layouts import Layouts

    # the reference attends in one block, the sharded forward / backward in 4-row query blocks
    ref = ref.replace_config(layouts=Layouts())
    model = model.replace_config(layouts=Layouts(causal_block=4))
    want = np.asarray(ref(tokens, attention_mask=mask))

    def loss(params, tokens, mask):
        logits = model.apply_fn({"params": params}, tokens, attention_mask=mask)
        return jnp.mean(jax.nn.logsumexp(logits, -1) * mask), logits

    with mesh, nn.logical_axis_rules(rules):
        grad_fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
        (_, logits), grads = grad_fn(model.params, tokens, mask)
        text = jax.jit(loss).lower(model.params, tokens, mask).compile().as_text()
    out["logits_diff"] = float(np.abs(np.asarray(logits) - want).max())
    out["grad_spec"] = grads["layers"]["mlp"]["up_proj"]["kernel"].sharding.spec
    out["collective"] = any(c in text for c in ("all-reduce", "reduce-scatter", "all-gather"))
    cache = mm.init_cache(cfg, 4, 24)
    cache = jax.device_put(cache, nn.logical_to_mesh_sharding(cache.logical_axes(), mesh, rules))
    out["cache_spec"] = cache.k.sharding.spec
    with mesh, nn.logical_axis_rules(rules):
        prefill = jax.jit(
            lambda p, t, m, c: model.apply_fn({"params": p}, t, attention_mask=m, cache=c)
        )
        got, cache = prefill(model.params, tokens, mask, cache)
    diff = np.where(np.asarray(mask)[..., None] > 0, np.asarray(got) - want, 0)
    out["prefill_diff"] = float(np.abs(diff).max())
    tiny = mm.from_pretrained("tiny-qwen3", mesh=mesh)  # random init, created already sharded
    out["tiny_spec"] = tiny.params["layers"]["mlp"]["down_proj"]["kernel"].sharding.spec
    return out


def test_sharded_load_and_forward_on_8_devices(ckpt):
    from jax.sharding import PartitionSpec as P

    from conftest import run_with_devices

    out = run_with_devices(sharded_load_and_forward, str(ckpt), devices=8, timeout=600)
    assert out["q_spec"] == P(None, "fsdp", "tensor", None), out["q_spec"]
    assert out["q_shard"] == (2, 32, 2, 32)
    assert out["embed_spec"] == P("tensor", "fsdp")
    assert out["params_equal"]
    assert out["logits_diff"] <= 1e-5
    assert out["grad_spec"] == P(None, "fsdp", "tensor"), out["grad_spec"]
    assert out["collective"]
    assert out["cache_spec"] == P(None, ("data", "fsdp"), None, "tensor", None)
    assert out["prefill_diff"] <= 1e-5
    assert out["tiny_spec"] == P(None, "tensor", "fsdp"), out["tiny_spec"]
