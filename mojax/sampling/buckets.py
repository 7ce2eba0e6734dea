"""Static-shape buckets: prompt and observation lengths, and the decode segments of the cache.

Every shape the compiled sampler sees is chosen here, so a new prompt length only recompiles when
it crosses a power of two. Host-side helpers (plain Python ints).
"""

from __future__ import annotations

import math


def next_power_of_two(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def bucket_length(n: int, min_bucket: int = 16) -> int:
    """The padded length for chunks of up to ``n`` tokens: a power of two, at least ``min_bucket``."""
    return max(next_power_of_two(max(n, 1)), int(min_bucket))


def segment_caps(
    start: int, max_len: int, min_cap: int = 64, growth: float = 1.25, granularity: int = 32
) -> tuple[int, ...]:
    """Cache sizes of the decode segments, increasing, the last one ``max_len``.

    A decode segment runs the ``lax.while_loop`` over a cache truncated to ``cap`` slots (the
    attention of each step reads ``cap`` slots, not ``max_len``) while the write position is below
    ``cap``; then the next, larger, segment takes over. ``start`` is the smallest write position a
    segment can begin at (the prompt bucket for ``generate``; 0 when unknown at trace time).

    The first cap is ``start + 1`` rounded up to ``granularity`` (at least ``min_cap``); each next
    one is ``growth`` times the last, rounded up to ``granularity``. A step reads at most
    ``growth`` times the slots it needs (doubling reads up to 2x), for
    ``log(max_len / start) / log(growth)`` compiled loops instead of ``log2``.

    Example: ``segment_caps(32, 300) == (64, 96, 128, 160, 224, 288, 300)``.
    """
    if growth <= 1.0 or granularity < 1:
        raise ValueError(f"growth must be > 1 and granularity >= 1, got {growth}, {granularity}")

    def round_up(n: float) -> int:
        return -(-int(math.ceil(n)) // granularity) * granularity

    caps = []
    cap = max(round_up(start + 1), int(min_cap))
    while cap < max_len:
        caps.append(cap)
        cap = max(round_up(cap * growth), cap + granularity)
    caps.append(int(max_len))
    return tuple(caps)
