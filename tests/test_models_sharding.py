"""Sharded placement: logical axes -> mesh shardings, slice-wise checkpoint reads, equal logits.

The 8-device part runs in a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
(jax may already be initialised in this process). Reference: the same checkpoint loaded unsharded.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from mojax_test_utils import build_hf, hf_config  # noqa: E402

import mojax.models as mm  # noqa: E402
from mojax.models import hf as hf_io  # noqa: E402
from mojax.models import safetensors_io  # noqa: E402

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


_SCRIPT = textwrap.dedent(
    """
    import sys
    import flax.linen as nn
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, PartitionSpec as P
    import mojax.models as mm

    ckpt = sys.argv[1]
    assert jax.device_count() == 8
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    ref = mm.from_pretrained(ckpt)
    model = mm.from_pretrained(ckpt, mesh=mesh)
    cfg = model.config
    q = model.params["layers"]["self_attn"]["q_proj"]["kernel"]  # [L, E, H, D]
    assert q.sharding.spec == P(None, "fsdp", "tensor", None), q.sharding.spec
    assert q.addressable_shards[0].data.shape == (2, 32, 2, 32)
    assert model.params["embed_tokens"].sharding.spec == P("tensor", "fsdp")
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 ref.params, model.params)

    rng = np.random.RandomState(0)
    tokens = jnp.asarray(rng.randint(0, cfg.vocab_size, (4, 16)), jnp.int32)
    mask = jnp.asarray(np.arange(16)[None] >= np.array([0, 3, 0, 7])[:, None], jnp.int32)
    want = np.asarray(ref(tokens, attention_mask=mask))

    def loss(params, tokens, mask):
        logits = model.apply_fn({"params": params}, tokens, attention_mask=mask)
        return jnp.mean(jax.nn.logsumexp(logits, -1) * mask), logits

    with mesh, nn.logical_axis_rules(mm.DEFAULT_LOGICAL_AXIS_RULES):
        (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(
            model.params, tokens, mask)
        text = jax.jit(loss).lower(model.params, tokens, mask).compile().as_text()
    assert np.abs(np.asarray(logits) - want).max() <= 1e-5
    g = grads["layers"]["mlp"]["up_proj"]["kernel"]
    assert g.sharding.spec == P(None, "fsdp", "tensor"), g.sharding.spec
    assert "all-reduce" in text or "reduce-scatter" in text or "all-gather" in text

    # the cache shards by its logical axes too; a prefill under the mesh equals the unsharded one
    cache = mm.init_cache(cfg, 4, 24)
    rules = mm.DEFAULT_LOGICAL_AXIS_RULES
    cache_sh = nn.logical_to_mesh_sharding(cache.logical_axes(), mesh, rules)
    cache = jax.device_put(cache, cache_sh)
    assert cache.k.sharding.spec == P(None, ("data", "fsdp"), None, "tensor", None)
    with mesh, nn.logical_axis_rules(mm.DEFAULT_LOGICAL_AXIS_RULES):
        got, cache = jax.jit(lambda p, t, m, c: model.apply_fn({"params": p}, t,
                             attention_mask=m, cache=c))(model.params, tokens, mask, cache)
    diff = np.where(np.asarray(mask)[..., None] > 0, np.asarray(got) - want, 0)
    assert np.abs(diff).max() <= 1e-5
    # random init of a variant is created already sharded too
    tiny = mm.from_pretrained("tiny-qwen3", mesh=mesh)
    spec = tiny.params["layers"]["mlp"]["down_proj"]["kernel"].sharding.spec
    assert spec == P(None, "tensor", "fsdp"), spec
    print("SHARDING-OK")
    """
)


def test_sharded_load_and_forward_on_8_devices(ckpt, tmp_path):
    script = tmp_path / "sharded.py"
    script.write_text(_SCRIPT)
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, str(script), str(ckpt)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "SHARDING-OK" in proc.stdout
