"""The learner's batches (``mojax.learner.batch``): frozen typed pytrees whose absent fields are no
leaves, validated with errors that name the field, cast to one dtype per field, and placed with
the shardings the dict batch had (each field's rows over the mesh's batch axes, a scalar
replicated: ``mojax.sharding.batch_sharding`` of its rank)."""

import dataclasses

import jax
import numpy as np
import pytest

from mojax import sharding as shl
from mojax.learner import PPOBatch, SFTBatch
from mojax.learner import batch as batch_lib

B, T = 4, 6


def _ppo(**extra) -> PPOBatch:
    rng = np.random.default_rng(0)
    return PPOBatch(
        tokens=rng.integers(0, 50, (B, T)),  # int64 on the host
        loss_mask=np.ones((B, T), bool),
        old_logprobs=np.full((B, T), -2.0),  # float64
        advantages=rng.normal(size=B),
        **extra,
    )


def test_absent_fields_are_no_leaves_and_the_batch_is_frozen():
    batch = _ppo()
    assert list(batch.arrays()) == ["tokens", "loss_mask", "old_logprobs", "advantages"]
    assert len(jax.tree.leaves(batch)) == 4
    full = _ppo(attention_mask=np.ones((B, T)), clip_eps=np.float32(0.2))
    assert len(jax.tree.leaves(full)) == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.tokens = None
    assert len(jax.tree.leaves(batch_lib.rows_only(full))) == 5  # the scalar left out
    assert batch_lib.signature(full) != batch_lib.signature(batch)  # its own compiled step


def test_checked_casts_one_dtype_per_field():
    out = batch_lib.checked(_ppo(attention_mask=np.ones((B, T)), clip_eps=0.2))
    dtypes = {k: v.dtype for k, v in out.arrays().items()}
    assert dtypes == {
        "tokens": np.int32,
        "loss_mask": np.float32,
        "old_logprobs": np.float32,
        "advantages": np.float32,
        "attention_mask": np.int32,
        "clip_eps": np.float32,
    }
    sft = batch_lib.checked(SFTBatch(tokens=np.zeros((B, T), np.int64), loss_mask=np.ones((B, T))))
    assert sft.tokens.dtype == np.int32 and sft.attention_mask is None


@pytest.mark.parametrize(
    "change, says",
    [
        (dict(old_logprobs=np.zeros((B, T - 1))), r"PPOBatch\.old_logprobs must have the shape of tokens \(4, 6\), got \(4, 5\)"),
        (dict(advantages=np.zeros(B + 1)), r"PPOBatch\.advantages must be \[B\]=4 or \[B, T\]=\(4, 6\), got \(5,\)"),
        (dict(clip_eps=np.zeros(2)), r"PPOBatch\.clip_eps must be a scalar, got shape \(2,\)"),
        (dict(tokens=np.zeros(B, np.int32)), r"PPOBatch\.tokens must be \[B, T\], got shape \(4,\)"),
        (dict(tokens=np.zeros((B, T))), r"PPOBatch\.tokens must be an integer array, got float64"),
        (dict(is_weights=np.ones((B + 1, T))), r"PPOBatch\.is_weights must have the shape of tokens"),
    ],
)  # fmt: skip
def test_a_bad_field_is_named(change, says):
    with pytest.raises(ValueError, match=says):
        batch_lib.checked(dataclasses.replace(_ppo(), **change))


def test_required_fields_and_the_row_divisor_are_named():
    with pytest.raises(
        ValueError, match=r"PPOBatch is missing required field\(s\) \['ref_logprobs'\]"
    ):
        batch_lib.checked(_ppo(), required=("ref_logprobs",))
    with pytest.raises(ValueError, match="PPOBatch has B=4 rows, not a multiple of 3"):
        batch_lib.checked(_ppo(), row_divisor=3)
    assert batch_lib.checked(_ppo(ref_logprobs=np.zeros((B, T))), ("ref_logprobs",), 2).tokens.shape


def test_shard_places_each_field_as_the_dict_batch_was():
    """Rows over the batch axes, the scalar replicated: field for field the shardings
    ``mojax.sharding.shard_batch`` gives the same arrays as a dict."""
    mesh, rules = shl.make_mesh(1, 1, 1, devices=jax.devices()[:1]), shl.logical_axis_rules()
    batch = batch_lib.checked(_ppo(clip_eps=np.float32(0.2)))
    placed = batch_lib.shard(batch, mesh, rules)
    want = shl.shard_batch(batch.arrays(), mesh, rules)
    assert type(placed) is PPOBatch and list(placed.arrays()) == list(want)
    for k, v in placed.arrays().items():
        assert v.sharding == want[k].sharding, k
        np.testing.assert_array_equal(np.asarray(v), np.asarray(want[k]))
    shardings = batch_lib.shardings(batch, mesh, rules)
    assert shardings.ref_logprobs is None
    for k, s in shardings.arrays().items():
        assert s == shl.batch_sharding(mesh, rules, np.ndim(getattr(batch, k))), k
