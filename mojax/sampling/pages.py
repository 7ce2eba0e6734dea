"""The host-side page allocator of the paged continuous sampler (``mojax.models.paged_cache``).

``PagePool`` owns the free list of a ``PagedKVCache``'s pool and the page table the device cache
gets a copy of at each segment boundary (``mojax.sampling.continuous``):

* a row enters a slot only if the pool can **reserve** the pages of its bound for this call (its
  real context tokens plus the tokens it may still sample: ``max_new_tokens``, the response
  buffer and the cache width cap it); otherwise it waits for rows to end. The reservations never
  exceed the pool, so a running row can always grow: no row is ever stopped for lack of pages;
* pages are **allocated** lazily: before each decode segment a slot owns the pages of its real
  tokens plus the segment's most new tokens (``grow``), never more than its reservation;
* a slot whose row ended **releases** its pages and its reservation at the next boundary.

Pages in use are therefore at most ``ceil(live tokens / Ps) + ceil(segment tokens / Ps)`` per
running slot, not slots x cache width. Host-only state; the continuous sampler runs on one process.

Shape legend: N slots, Np pool pages, Ps page size, Pr pages per slot.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def pages_for(tokens, page_size: int):
    """Pages that hold ``tokens`` tokens (elementwise for arrays)."""
    return -(-np.asarray(tokens) // page_size)


class PagePool:
    """Free list, reservations and page table of ``num_pages`` pages (module docstring).

    Attributes:
      table: int32 [N, Pr], each slot's pages in token order (``num_pages`` where it owns none).
      owned, reserved: int [N], pages each slot owns / has reserved.
    """

    def __init__(self, num_pages: int, page_size: int, slots: int, max_len: int):
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.pages_per_slot = int(pages_for(max_len, page_size))
        self.table = np.full((slots, self.pages_per_slot), self.num_pages, np.int32)
        self.owned = np.zeros((slots,), np.int64)
        self.reserved = np.zeros((slots,), np.int64)
        self._free = list(range(self.num_pages - 1, -1, -1))  # pop() gives the lowest page
        self.peak = 0

    @property
    def in_use(self) -> int:
        return self.num_pages - len(self._free)

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def bound_pages(self, tokens) -> np.ndarray:
        """Pages a row of at most ``tokens`` tokens may need (capped at a slot's page table)."""
        return np.minimum(pages_for(tokens, self.page_size), self.pages_per_slot)

    def unreserved(self) -> int:
        return self.num_pages - int(self.reserved.sum())

    def reserve(self, slot: int, tokens: int) -> bool:
        """Reserves the pages of a row of at most ``tokens`` tokens for the empty ``slot``;
        False (nothing reserved) when the pool cannot."""
        need = int(self.bound_pages(tokens))
        if self.reserved[slot] or self.owned[slot]:
            raise ValueError(f"slot {slot} still holds pages; release it first")
        if need > self.unreserved():
            return False
        self.reserved[slot] = need
        return True

    def grow(self, slot: int, tokens: int) -> None:
        """``slot`` owns the pages of its first ``tokens`` tokens (within its reservation)."""
        need = min(int(self.bound_pages(tokens)), int(self.reserved[slot]))
        while self.owned[slot] < need:
            self.table[slot, self.owned[slot]] = self._free.pop()
            self.owned[slot] += 1
        self.peak = max(self.peak, self.in_use)

    def release(self, slot: int) -> None:
        """Returns ``slot``'s pages to the free list and drops its reservation."""
        n = int(self.owned[slot])
        self._free.extend(int(p) for p in self.table[slot, :n][::-1])
        self.table[slot] = self.num_pages
        self.owned[slot] = self.reserved[slot] = 0

    def all_free(self) -> bool:
        """Every page is back on the free list, no slot owns or reserves any."""
        return (
            self.free_pages == self.num_pages
            and sorted(self._free) == list(range(self.num_pages))
            and not self.owned.any()
            and not self.reserved.any()
            and (self.table == self.num_pages).all()
        )


class PagedSlots:
    """The continuous sampler's use of a ``PagePool``: which queued rows enter, how far the running
    slots grow before a segment, what the device page table is (module docstring).

    Args:
      pool: the ``PagePool``.
      budget: the most decode steps of one segment (the pages a slot gets ahead of its tokens).
      max_len: C, a slot's cache width (a row holds at most C tokens).
    """

    def __init__(self, pool: PagePool, budget: int, max_len: int):
        self.pool, self.budget, self.max_len = pool, int(budget), int(max_len)
        self.log: list[tuple[int, int, int]] = []  # (pages in use, live tokens, running slots)

    def bounds(self, state, work, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(context tokens, bound tokens)`` [n] of queued ``rows``: the real tokens a row enters
        with (prompt, response so far), and at most after this call (plus the tokens it may
        sample: its ``max_new_tokens`` within the response buffer), capped at C."""
        context = state.prompt_lengths[rows].astype(np.int64) + state.length[rows]
        room = state.tokens.shape[1] - state.length[rows]
        bound = context + np.minimum(work.max_new[rows], room)
        return context, np.minimum(bound, self.max_len)

    def check(self, state, work) -> None:
        """One clear error, before anything decodes, when a queued row cannot fit the pool."""
        rows = np.asarray(work.queue, np.int64)
        if not rows.size:
            return
        _, bound = self.bounds(state, work, rows)
        need = self.pool.bound_pages(bound)
        big = need > self.pool.num_pages
        if big.any():
            i = int(np.argmax(big))
            raise ValueError(
                f"config.rollout.num_pages={self.pool.num_pages} pages of "
                f"config.rollout.page_size={self.pool.page_size} tokens cannot hold row "
                f"{int(rows[i])} ({int(bound[i])} tokens: its context and max_new_tokens need "
                f"{int(need[i])} pages); raise config.rollout.num_pages"
            )

    def admit(self, rows: np.ndarray, free: np.ndarray, state, work) -> int:
        """Reserves and allocates the pages of the leading ``rows`` for slots ``free`` (in order)
        while the pool can reserve them; returns how many enter."""
        if not rows.size:
            return 0
        context, bound = self.bounds(state, work, rows)
        for i in range(len(rows)):
            if not self.pool.reserve(int(free[i]), int(bound[i])):
                return i
            self.pool.grow(int(free[i]), int(context[i]) + self.budget)
        return len(rows)

    def before_segment(self, s, held: np.ndarray):
        """Grows every running slot to its tokens plus one segment's budget; logs the pages in use
        against the live tokens; returns ``s`` with the page table uploaded."""
        lengths = np.asarray(s.cache.lengths).astype(np.int64)
        running = np.flatnonzero(held >= 0)
        for slot in running:
            self.pool.grow(int(slot), int(lengths[slot]) + self.budget)
        self.log.append((self.pool.in_use, int(lengths[running].sum()), int(running.size)))
        return self.upload(s)

    def release(self, slots: np.ndarray) -> None:
        for slot in slots:
            self.pool.release(int(slot))

    def upload(self, s):
        """``s`` with the device cache's page table set to the pool's."""
        return s.replace(cache=s.cache.replace(page_table=jnp.asarray(self.pool.table)))
