"""Static-shape buckets: prompt and observation lengths, and the decode segments of the cache.

Every shape the compiled sampler sees is chosen here, so a new prompt length only recompiles when
it crosses a power of two. Host-side helpers (plain Python ints).
"""

from __future__ import annotations


def next_power_of_two(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def bucket_length(n: int, min_bucket: int = 16) -> int:
    """The padded length for chunks of up to ``n`` tokens: a power of two, at least ``min_bucket``."""
    return max(next_power_of_two(max(n, 1)), int(min_bucket))


def segment_caps(start: int, max_len: int, min_cap: int = 64) -> tuple[int, ...]:
    """Cache sizes of the decode segments, increasing, the last one ``max_len``.

    A decode segment runs the ``lax.while_loop`` over a cache truncated to ``cap`` slots (the
    attention of each step reads ``cap`` slots, not ``max_len``) while the write position is below
    ``cap``; then the next, doubled, segment takes over. ``start`` is the smallest write position a
    segment can begin at (the prompt bucket for ``generate``; 0 when unknown at trace time).

    Example: ``segment_caps(32, 300) == (64, 128, 256, 300)``.
    """
    caps = []
    cap = max(next_power_of_two(start + 1), int(min_cap))
    while cap < max_len:
        caps.append(cap)
        cap *= 2
    caps.append(int(max_len))
    return tuple(caps)
