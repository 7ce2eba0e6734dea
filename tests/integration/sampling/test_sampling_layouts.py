"""The decode layouts give the same rollout: the portable one (scanned layers, stacked cache), the
GPU's (unrolled layers with the per-layer cache, einsum attention, fused q/k/v and gate/up products;
its cuDNN prefill swapped for the reference attention, which is what runs on this CPU) and the CPU's
(multiply-reduce attention), also with the fused projections.

Reference: the portable layout's own rollout, itself checked against an uncached greedy loop in
``test_sampling_decode.py``; greedy tokens against that loop here too.
"""

import dataclasses

import jax
import numpy as np
from test_sampling_decode import greedy_reference

import mojax.models as mm
import mojax.sampling as ms
from mojax.models import layouts

LAYOUTS = {
    "portable": layouts.PORTABLE,
    "gpu": dataclasses.replace(layouts.GPU, attention="reference"),
    "cpu": layouts.CPU,
    # the CPU's with the fused q/k/v and gate/up (``mojax.models.fused``; the GPU's are fused)
    "cpu_fused": dataclasses.replace(layouts.CPU, fuse_decode_projections=True),
}


def test_gpu_layouts_decode_per_layer():
    assert layouts.for_backend("gpu").decode_per_layer
    assert not layouts.for_backend("gpu").one_query_reduce
    assert layouts.for_backend("gpu").fuse_decode_projections
    assert not layouts.for_backend("cpu").fuse_decode_projections


def _model(name):
    model = mm.from_pretrained("tiny-qwen3", dtype="float32", seed=1)
    return model.replace(config=model.config.replace(layouts=LAYOUTS[name]))


def _rollout(model, temperature):
    prompts = np.asarray([[5, 9, 3, 7, 0, 0], [4, 1, 8, 2, 6, 11]], np.int32)
    kw = dict(key=jax.random.key(3), temperature=temperature, max_response_len=40)
    out = ms.generate(model, prompts, prompt_lengths=[4, 6], num_samples=2, max_new_tokens=9, **kw)
    obs = np.asarray([[17, 18, 19]] * 4, np.int32)
    out2 = ms.append_and_continue(
        model,
        out.state,
        obs,
        [3, 1, 0, 2],
        [True, True, False, True],
        max_new_tokens=6,
        temperature=temperature,
    )
    return out, out2


def test_layouts_give_the_same_rollout():
    """At temperature 1 (drawn tokens and their log-probs: the logits agree to 1e-5 wherever a
    token is drawn); greedy, the GPU layout's first turn against the uncached loop."""
    ref_outs = _rollout(_model("portable"), 1.0)
    want = [np.asarray(o.tokens) for o in ref_outs]
    want_lp = [np.asarray(o.logprobs) for o in ref_outs]
    for name in ("gpu", "cpu", "cpu_fused"):
        outs = _rollout(_model(name), 1.0)
        for w, wl, o in zip(want, want_lp, outs):
            np.testing.assert_array_equal(np.asarray(o.tokens), w, err_msg=name)
            np.testing.assert_allclose(np.asarray(o.logprobs), wl, atol=1e-5, err_msg=name)
    model = _model("gpu")
    greedy, _ = _rollout(model, 0.0)
    ref, _ = greedy_reference(model, [5, 9, 3, 7], 9)
    np.testing.assert_array_equal(np.asarray(greedy.tokens)[0, :9], ref)
