"""The decode loop of a sampler whose rows are split over devices runs without collectives.

Each row's token, log-prob and k/v writes stay on the device that holds the row
(``mojax.models.cache.set_rows``). Written as scatters with explicit row indices, XLA's SPMD
partitioner all-gathered every row's update onto every device: one collective per write, per
layer and per decode step (27 per step for a 4-layer model on 2 devices, measured 2026-12-04),
paid as latency on a GPU/TPU sampler and, between processes on the CPU, a gloo collective each.

Runs in a 2-device child process: the compiled ``generate`` and ``append_and_continue`` programs,
and the continuous sampler's decode segment, on a ("data", "fsdp", "tensor") = (2, 1, 1) mesh; a collective whose op name lies in ``while/body``
fails the test, and the loop condition takes one reduction (whether any row still runs).
"""

import re

import numpy as np
import pytest

_COLLECTIVE = re.compile(
    r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)\("
)


def _loop_collectives(hlo: str) -> dict[str, int]:
    """Collectives of an optimized HLO text by where their op name says they come from."""
    out = {"body": 0, "cond": 0, "outside": 0}
    for line in hlo.splitlines():
        if not _COLLECTIVE.search(line):
            continue
        name = re.search(r'op_name="([^"]*)"', line)
        name = name.group(1) if name else ""
        where = "body" if "while/body" in name else "cond" if "while/cond" in name else "outside"
        out[where] += 1
    return out


def decode_collectives(layout: str):
    """In the 2-device child: the collectives of the compiled decode programs, by place, with the
    CPU's layout (a cache per layer, unrolled layers) or the portable one (a stacked cache)."""
    import jax
    from jax.sharding import Mesh

    import mojax.models as mm
    import mojax.sampling as ms
    from mojax.models import layouts
    from mojax.sampling import decode

    mesh = Mesh(np.array(jax.devices()).reshape(2, 1, 1), ("data", "fsdp", "tensor"))
    model = mm.from_pretrained("tiny-qwen3", seed=3)
    chosen = {"cpu": layouts.CPU, "portable": layouts.PORTABLE}[layout]
    model = model.replace(config=model.config.replace(layouts=chosen))
    model = model.replace(
        params=jax.device_put(model.params, mm.param_shardings(model.config, mesh))
    )
    calls = {}

    def recording(name, fn):
        def wrapped(*args, **kwargs):
            calls[name] = (fn, args, kwargs)
            return fn(*args, **kwargs)

        return wrapped

    decode._generate_jit = recording("generate", decode._generate_jit)
    decode._continue_jit = recording("continue", decode._continue_jit)
    rng = np.random.RandomState(0)
    tokens = rng.randint(0, 256, (2, 12)).astype(np.int32)
    out = ms.generate(model, tokens, prompt_lengths=np.array([12, 5]), key=jax.random.key(1),
                      max_new_tokens=6, num_samples=2, temperature=1.0, stop_token_ids=(7,),
                      max_response_len=24, max_total_len=48, mesh=mesh)  # fmt: skip
    obs = rng.randint(0, 256, (4, 3)).astype(np.int32)
    ms.append_and_continue(model, out.state, obs, np.array([3, 1, 2, 3]), np.ones(4, bool),
                           max_new_tokens=4, temperature=1.0, mesh=mesh)  # fmt: skip
    counts = {}
    for name, (fn, args, kwargs) in calls.items():
        with decode._mesh_context(mesh):
            counts[name] = _loop_collectives(fn.lower(*args, **kwargs).compile().as_text())
    counts["segment"] = _segment_collectives(model, mesh, tokens)
    return counts


def _segment_collectives(model, mesh, tokens):
    """The collectives of the continuous sampler's decode segment (4 slots over the 2 devices)."""
    import jax

    from mojax.sampling.continuous import engine as continuous
    from mojax.sampling.continuous import slots

    seen, segment = [], slots.segment

    def recording(m, s, *args, **kwargs):
        if not seen:
            seen.append(_loop_collectives(segment.lower(m, s, *args, **kwargs).compile().as_text()))
        return segment(m, s, *args, **kwargs)

    slots.segment = recording
    sampler = continuous.ContinuousSampler.of(model, slots=4, mesh=mesh)
    sampler.generate(tokens, prompt_lengths=np.array([12, 5]), key=jax.random.key(1),
                     max_new_tokens=6, num_samples=2, temperature=1.0, stop_token_ids=(7,),
                     max_response_len=24, max_total_len=48)  # fmt: skip
    return seen[0]


@pytest.mark.parametrize("layout", ["cpu", "portable"])
def test_the_decode_loop_of_rows_split_over_devices_has_no_collectives(layout):
    from conftest import run_with_devices

    counts = run_with_devices(decode_collectives, layout, devices=2)
    assert set(counts) == {"generate", "continue", "segment"}, counts
    for name, where in counts.items():
        assert where["body"] == 0, (name, where)
        assert where["cond"] == 1, (name, where)  # the loop's "any row still running"


def test_the_collective_count_reads_op_names():
    hlo = "\n".join(
        [
            '%a = f32[8] all-gather(%x), metadata={op_name="jit(f)/while/body/scatter"}',
            '%b = pred[] all-reduce(%y), metadata={op_name="jit(f)/while/cond/reduce_or"}',
            '%c = s32[2] all-gather(%z), metadata={op_name="jit(f)/concatenate"}',
            '%d = f32[8] add(%x, %x), metadata={op_name="jit(f)/while/body/add"}',
        ]
    )
    assert _loop_collectives(hlo) == {"body": 1, "cond": 1, "outside": 1}
