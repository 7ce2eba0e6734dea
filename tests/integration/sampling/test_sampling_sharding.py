"""Sharded sampling on 8 simulated CPU devices equals unsharded sampling.

Runs in a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (jax may already be
initialised in this process). Mesh ("data", "fsdp", "tensor") = (2, 2, 2); the params are placed by
``mojax.models.param_shardings`` and the sampler runs under ``DEFAULT_LOGICAL_AXIS_RULES`` (batch on
data x fsdp, kv heads on tensor). Reference: the same model and key unsharded; sampled tokens must
be identical and log-probs within 1e-5 (only reduction order differs), for a first call and a
resumed call after an append.
"""

import os
import pathlib

import numpy as np
import pytest

_REPO = os.fspath(pathlib.Path(__file__).resolve().parents[3])


def sharded_and_unsharded_generate():
    """Runs in the 8-device child: generate + append_and_continue with and without the mesh."""
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    import mojax.models as mm
    import mojax.sampling as ms

    assert jax.device_count() == 8
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    ref = mm.from_pretrained("tiny-qwen3", seed=3)
    params = jax.device_put(ref.params, mm.param_shardings(ref.config, mesh))
    sharded = ref.replace(params=params)
    k_spec = params["layers"]["self_attn"]["k_proj"]["kernel"].sharding.spec
    assert k_spec == P(None, "fsdp", "tensor", None), k_spec
    rng = np.random.RandomState(0)
    tokens = rng.randint(0, 256, (4, 12)).astype(np.int32)
    lengths = np.array([12, 5, 9, 1])
    kw = dict(prompt_lengths=lengths, key=jax.random.key(11), max_new_tokens=10, num_samples=2,
              temperature=0.9, top_p=0.95, stop_token_ids=(7, 19), max_response_len=32,
              max_total_len=72)  # fmt: skip
    cont = dict(max_new_tokens=6, temperature=0.9, top_k=40)
    obs = rng.randint(0, 256, (8, 5)).astype(np.int32)
    obs_len = np.array([5, 1, 0, 3, 4, 2, 5, 1])
    resume = np.array([1, 0, 1, 1, 0, 1, 1, 1], bool)
    results, specs = [], []
    for model, m in ((ref, None), (sharded, mesh)):
        out = ms.generate(model, tokens, mesh=m, **kw)
        first = (np.asarray(out.tokens), np.asarray(out.logprobs), np.asarray(out.lengths))
        if m is not None:
            spec = tuple(out.state.cache.k.sharding.spec)
            specs.append(spec + (None,) * (5 - len(spec)))
            specs.append(tuple(out.state.tokens.sharding.spec)[:1])
        out = ms.append_and_continue(model, out.state, obs, obs_len, resume, mesh=m, **cont)
        rest = (np.asarray(out.tokens), np.asarray(out.logprobs), np.asarray(out.lengths))
        results.append(first + rest + (np.asarray(out.finish_reason),))
    return results, specs


@pytest.mark.slow
def test_sharded_generate_equals_unsharded_on_8_devices():
    from conftest import run_with_devices

    (a, b), specs = run_with_devices(sharded_and_unsharded_generate, devices=8)
    assert specs[0] == (None, ("data", "fsdp"), None, "tensor", None), specs
    assert specs[1] == (("data", "fsdp"),), specs
    for i in (0, 2, 3, 5, 6):
        np.testing.assert_array_equal(a[i], b[i])
    for i in (1, 4):
        np.testing.assert_allclose(a[i], b[i], atol=1e-5)
    assert a[5].min() > 0
