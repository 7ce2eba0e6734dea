"""``mojax.sampling.buckets.segment_caps``: the decode segments' cache sizes, checked against the
rules its docstring states (rounding, growth bound, coverage) and a loop written from them."""

from __future__ import annotations

import math

import pytest

from mojax.sampling import buckets


def _reference(start, max_len, min_cap, growth, granularity):
    """A plain loop written from the docstring: round up, grow, stop at max_len."""
    out = []
    cap = max(granularity * math.ceil((start + 1) / granularity), min_cap)
    while cap < max_len:
        out.append(cap)
        cap = max(granularity * math.ceil(cap * growth / granularity), cap + granularity)
    return tuple(out) + (max_len,)


CASES = [(0, 40), (16, 96), (32, 300), (64, 192), (0, 1024), (0, 8192), (4096, 4608), (200, 201)]


@pytest.mark.parametrize("start,max_len", CASES)
@pytest.mark.parametrize("growth,granularity", [(1.25, 32), (1.5, 16), (2.0, 1), (1.1, 64)])
def test_segment_caps_rules(start, max_len, growth, granularity):
    caps = buckets.segment_caps(start, max_len, growth=growth, granularity=granularity)
    assert caps == _reference(start, max_len, 64, growth, granularity)
    assert caps[-1] == max_len and list(caps) == sorted(set(caps))
    assert caps[0] > start or caps == (max_len,)
    for a, b in zip(caps, caps[1:-1]):
        assert b % granularity == 0
        # a step never reads more than growth x (plus one rounding unit) the slots it uses
        assert b <= max(a * growth + granularity, a + granularity)


def test_segment_caps_examples():
    assert buckets.segment_caps(32, 300) == (64, 96, 128, 160, 224, 288, 300)
    assert buckets.segment_caps(64, 192) == (96, 128, 160, 192)  # the 50M sampler benchmark
    # growth 2 with granularity 1 is the former doubling
    assert buckets.segment_caps(32, 300, growth=2.0, granularity=1) == (64, 128, 256, 300)


@pytest.mark.parametrize("growth,granularity", [(1.0, 32), (0.5, 32), (1.25, 0)])
def test_segment_caps_rejects_bad_growth(growth, granularity):
    with pytest.raises(ValueError, match="growth"):
        buckets.segment_caps(0, 100, growth=growth, granularity=granularity)
