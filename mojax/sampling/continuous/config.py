"""``ContinuousConfig``: the continuous engine's own config section, ``config.continuous``.

The engine declares it (``CONFIG`` of ``mojax.sampling.continuous.engine``;
``protocol.engine_sections``), so the run spec reads it as ``spec.engines["continuous"]`` and the
engine is built from it (``engine.build``). Its keys were ``rollout.<key>`` before
(``mojax.infra.config_renames``). The section applies to the continuous engine only: a value set
while ``sampler.engine`` names another engine is refused (``mojax.spec.rules``), not ignored.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from mojax.config import option, spec_checker

#: ``continuous.kv_cache`` values: N x C dense slots, or a page pool (``mojax.models.paged_cache``).
KV_CACHES = ("dense", "paged")


@dataclasses.dataclass(frozen=True)
class ContinuousConfig:
    """``config.continuous``: the decode slots and KV cache of the continuous engine."""

    SECTION: ClassVar[str] = "continuous"
    slots: int = option(16, help="decode slots of the continuous engine (its KV cache rows)")
    kv_cache: str = option(
        "dense",
        help='the KV cache: "dense" (slots x max length) | "paged" (a pool of continuous.num_pages '
        "pages that rows take as they grow; mojax.models.paged_cache)",
    )
    page_size: int = option(16, help="tokens per page of the paged KV cache")
    num_pages: int = option(
        0, help="pages in the paged KV cache's pool (0 = as many as the dense cache holds)"
    )
    prefill_prompts: int = option(
        0,
        help="prompts per prompt prefill (0 = enough to fill the slots, "
        "ceil(continuous.slots / rollout.num_samples))",
    )
    refill_slots: int = option(
        1,
        help="while rows wait, a segment ends once this many slots have freed "
        "(more: fewer segment boundaries, slots idle until one; the tokens do not change)",
    )

    def __post_init__(self):
        c = spec_checker("continuous", self)
        c.in_range("continuous.slots", 1)
        c.choice("continuous.kv_cache", KV_CACHES)
        c.in_range("continuous.page_size", 1)
        c.in_range("continuous.num_pages", 0)
        c.in_range("continuous.prefill_prompts", 0)
        c.in_range("continuous.refill_slots", 1)
        if isinstance(self.refill_slots, int) and isinstance(self.slots, int):
            c.require(
                self.refill_slots <= self.slots,
                "continuous.refill_slots",
                f"{self.refill_slots} must be <= continuous.slots={self.slots}",
            )
        c.raise_if_any()

    def row_errors(self, max_prompt_len: int, max_response_len: int) -> list[tuple[str, str]]:
        """``[(key, message)]`` when a fixed-size page pool cannot hold one row of the rollout's
        ``max_prompt_len + max_response_len`` tokens (0 prompt length: measured, not checked)."""
        row = max_prompt_len + max_response_len
        if self.kv_cache != "paged" or not self.num_pages or not max_prompt_len:
            return []
        if self.num_pages * self.page_size >= row:
            return []
        return [(
            "continuous.num_pages",
            f"{self.num_pages} pages of continuous.page_size={self.page_size} tokens cannot hold "
            f"one row of rollout.max_prompt_len + rollout.max_response_len = {row} tokens",
        )]  # fmt: skip
