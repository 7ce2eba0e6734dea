"""The host-side page allocator of the paged continuous sampler (``mojax.models.paged_cache``).

``PagePool`` owns the free list of a ``PagedKVCache``'s pool and the page table the device cache
gets a copy of at each segment boundary; ``PagedSlots`` is how the continuous sampler
(``mojax.sampling.continuous.engine``) uses it. At each boundary:

* every running slot **grows** to the pages of its real tokens plus the coming segment's most new
  tokens (``budget`` decode steps), never past its row's **bound** (its context plus the tokens
  it may still sample: ``max_new_tokens``, the response buffer and the cache width cap it);
* if the free pages cannot cover that growth, the most recently placed rows are **preempted**
  (vLLM's recompute preemption, Kwon et al., "Efficient Memory Management for Large Language
  Model Serving with PagedAttention", arXiv:2309.06180): the slot's pages go back to the free list
  and its row returns to the front of the queue with its tokens so far; placed again, it is
  prefilled from its whole context and samples on from the same position of its random stream.
  The oldest running row is never preempted, and a row whose bound exceeds the whole pool is one
  clear error before anything decodes (``check``), so every call finishes;
* a queued row **enters** a free slot when the free pages, less the running slots' growth, hold
  its context plus one segment; otherwise it waits, in order;
* a slot whose row ended **releases** its pages.

Pages in use are therefore at most ``ceil(live tokens / Ps) + ceil(budget / Ps)`` per running slot,
not slots x cache width. On a mesh the pool is one pool per shard of slots (``PagePool``'s
``shards``): a slot grows, and rows are preempted, within its own shard's pool. Host-only state:
each process's engine has its own (``mojax.sampling.continuous.engine``).

Shape legend: N slots, Np pool pages, Ps page size, Pr pages per slot.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def pages_for(tokens, page_size: int):
    """Pages that hold ``tokens`` tokens (elementwise for arrays)."""
    return -(-np.asarray(tokens) // page_size)


class PagePool:
    """Free lists and page table of ``num_pages`` pages shared by ``slots`` slots.

    ``shards`` (a mesh, ``mojax.models.paged_cache``): the slots split into that many contiguous
    shards, each with its own pool of ``num_pages / shards`` pages; a slot takes pages of its
    shard's pool only, and the table holds shard-local ids.

    Attributes:
      table: int32 [N, Pr], each slot's pages in token order (``local_pages`` where it owns none).
      owned, limit: int [N], pages each slot owns / may own at most (its row's bound).
      peak: the most pages in use so far (all shards).
    """

    def __init__(self, num_pages: int, page_size: int, slots: int, max_len: int, shards=1):
        if int(num_pages) % int(shards) or int(slots) % int(shards):
            raise ValueError(
                f"{num_pages} pages and {slots} slots must split evenly into the {shards} shards "
                "of the mesh's batch axes"
            )
        self.num_pages, self.page_size, self.shards = int(num_pages), int(page_size), int(shards)
        self.local_pages = self.num_pages // self.shards
        self.slots_per_shard = int(slots) // self.shards
        self.pages_per_slot = int(pages_for(max_len, page_size))
        self.table = np.full((slots, self.pages_per_slot), self.local_pages, np.int32)
        self.owned = np.zeros((slots,), np.int64)
        self.limit = np.zeros((slots,), np.int64)
        # per shard; pop() gives the lowest page
        self._free = [list(range(self.local_pages - 1, -1, -1)) for _ in range(self.shards)]
        self.peak = 0

    def shard(self, slot: int) -> int:
        return int(slot) // self.slots_per_shard

    @property
    def in_use(self) -> int:
        return self.num_pages - self.free_pages

    @property
    def free_pages(self) -> int:
        return sum(len(f) for f in self._free)

    def free_in(self, shard: int) -> int:
        """Free pages of one shard's pool."""
        return len(self._free[shard])

    def bound_pages(self, tokens) -> np.ndarray:
        """Pages a row of at most ``tokens`` tokens may need (capped at a slot's page table)."""
        return np.minimum(pages_for(tokens, self.page_size), self.pages_per_slot)

    def open(self, slot: int, bound_tokens: int) -> None:
        """The empty ``slot`` takes a row of at most ``bound_tokens`` tokens."""
        if self.owned[slot]:
            raise ValueError(f"slot {slot} still holds pages; release it first")
        self.limit[slot] = int(self.bound_pages(bound_tokens))

    def need(self, slot: int, tokens: int) -> int:
        """Pages ``grow(slot, tokens)`` would take from the free list."""
        target = min(int(self.bound_pages(tokens)), int(self.limit[slot]))
        return max(target - int(self.owned[slot]), 0)

    def grow(self, slot: int, tokens: int) -> None:
        """``slot`` owns the pages of its first ``tokens`` tokens (within its limit)."""
        more, free = self.need(slot, tokens), self._free[self.shard(slot)]
        if more > len(free):
            raise ValueError(f"slot {slot} needs {more} pages, {len(free)} are free in its shard")
        for _ in range(more):
            self.table[slot, self.owned[slot]] = free.pop()
            self.owned[slot] += 1
        self.peak = max(self.peak, self.in_use)

    def release(self, slot: int) -> None:
        """Returns ``slot``'s pages to its shard's free list."""
        n = int(self.owned[slot])
        self._free[self.shard(slot)].extend(int(p) for p in self.table[slot, :n][::-1])
        self.table[slot] = self.local_pages
        self.owned[slot] = self.limit[slot] = 0

    def all_free(self) -> bool:
        """Every page is back on its free list and no slot owns any."""
        return (
            all(sorted(f) == list(range(self.local_pages)) for f in self._free)
            and not self.owned.any()
            and (self.table == self.local_pages).all()
        )


class PagedSlots:
    """The continuous sampler's use of a ``PagePool`` (module docstring).

    Args:
      pool: the ``PagePool``.
      budget: the most decode steps of one segment (the pages a slot gets ahead of its tokens).
      max_len: C, a slot's cache width (a row holds at most C tokens).
    """

    def __init__(self, pool: PagePool, budget: int, max_len: int):
        self.pool, self.budget, self.max_len = pool, int(budget), int(max_len)
        self.order = np.zeros(pool.table.shape[0], np.int64)  # when each slot's row was placed
        self._placed = 0
        self.preemptions = 0
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
        big = need > self.pool.local_pages
        if big.any():
            i = int(np.argmax(big))
            shards = self.pool.shards
            per = f" ({self.pool.local_pages} per shard of {shards})" if shards > 1 else ""
            raise ValueError(
                f"config.continuous.num_pages={self.pool.num_pages} pages{per} of "
                f"config.continuous.page_size={self.pool.page_size} tokens cannot hold row "
                f"{int(rows[i])} ({int(bound[i])} tokens: its context and max_new_tokens need "
                f"{int(need[i])} pages); raise config.continuous.num_pages"
            )

    def _growth(self, lengths: np.ndarray, slots) -> int:
        return sum(self.pool.need(int(x), int(lengths[x]) + self.budget) for x in slots)

    def admit(self, rows: np.ndarray, free: np.ndarray, state, work, s, held) -> int:
        """Opens free slots for the leading ``rows`` while the free pages, less the running slots'
        growth, hold each one's context plus one segment; returns how many. Each row takes the
        free slot whose shard has the most spare pages (the lowest such slot; with one shard the
        next free slot): the chosen slots are written, in order, to the front of ``free``."""
        if not rows.size:
            return 0
        lengths = np.asarray(s.cache.lengths)
        running = np.flatnonzero(held >= 0)
        pool = self.pool
        spare = [
            pool.free_in(k) - self._growth(lengths, [x for x in running if pool.shard(x) == k])
            for k in range(pool.shards)
        ]
        context, bound = self.bounds(state, work, rows)
        for i in range(min(len(rows), len(free))):
            j = i + max(range(len(free) - i), key=lambda m: (spare[pool.shard(free[i + m])], -m))
            slot = int(free[j])
            first = min(int(bound[i]), int(context[i]) + self.budget)
            if int(pool.bound_pages(first)) > spare[pool.shard(slot)]:
                return i
            free[i], free[j] = free[j], free[i]
            pool.open(slot, int(bound[i]))
            pool.grow(slot, first)
            spare[pool.shard(slot)] -= int(pool.owned[slot])
            self.order[slot], self._placed = self._placed, self._placed + 1
        return min(len(rows), len(free))

    def before_segment(self, s, held: np.ndarray) -> np.ndarray:
        """Grows every running slot by one segment, preempting, in each shard, its most recently
        placed rows while its free pages cannot cover its growth; logs the pages in use against
        the live tokens. Returns the preempted slots (their pages released; the caller requeues
        them)."""
        lengths = np.asarray(s.cache.lengths).astype(np.int64)
        pool, out, kept = self.pool, [], []
        for k in range(pool.shards):
            running = sorted(
                (x for x in np.flatnonzero(held >= 0) if pool.shard(x) == k),
                key=lambda x: self.order[x],
            )
            while len(running) > 1 and self._growth(lengths, running) > pool.free_in(k):
                slot = int(running.pop())
                pool.release(slot)
                out.append(slot)
            kept += running
        for slot in kept:
            pool.grow(int(slot), int(lengths[slot]) + self.budget)
        self.preemptions += len(out)
        self.log.append((pool.in_use, int(lengths[kept].sum()), len(kept)))
        return np.asarray(sorted(out), np.int64)

    def release(self, slots: np.ndarray) -> None:
        for slot in slots:
            self.pool.release(int(slot))

    def upload(self, s):
        """``s`` with the device cache's page table set to the pool's."""
        return s.replace(cache=s.cache.replace(page_table=jnp.asarray(self.pool.table)))
