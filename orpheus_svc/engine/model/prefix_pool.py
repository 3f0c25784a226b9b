"""The prefix pool: the KV of registered prompt prefixes (reference voices), computed once
and copied into a slot when a generation that starts with one is prefilled.

Preallocated at start-up from engine.prefix_pool_mb: per layer K and V of shape
[kv_heads, tokens, head_dim] in the KV cache's dtype, each prefix a range of its tokens
(core/prefix_book.py says where). A prefix is computed by SlotLlama.prefix_kv, batch-
invariant and in a call of its own, exactly as a step computes it in a slot when the pool
does not hold it (engine/torch/backend.py), so a generation's bits are the same with the
pool, without it, and after it was unloaded. Owned by the engine thread (the backend's).
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from orpheus_svc.core.prefix_book import PrefixBook

log = logging.getLogger(__name__)

MB = 1 << 20


class PrefixPool:
    def __init__(self, model, budget_mb: int) -> None:
        spec = model.spec
        self.model = model
        per_token = model.kv_bytes_per_token
        tokens = budget_mb * MB // per_token if budget_mb > 0 else 0
        self.book = PrefixBook(tokens, f"engine.prefix_pool_mb {budget_mb}")
        shape = (spec.num_key_value_heads, tokens, spec.head_dim)
        # never read before a prefix is written into its range: empty, so a CPU pool's
        # pages are taken only as prefixes fill them
        self.k = [torch.empty(shape, device=model.device, dtype=model.dtype)
                  for _ in range(spec.num_hidden_layers)]
        self.v = [torch.empty(shape, device=model.device, dtype=model.dtype)
                  for _ in range(spec.num_hidden_layers)]
        log.info("prefix pool (reference voices): %d tokens x %d bytes per token = %d bytes "
                 "(engine.prefix_pool_mb %d)", tokens, per_token, tokens * per_token, budget_mb)

    @property
    def tokens(self) -> int:
        return self.book.capacity

    def add(self, ids: Sequence[int]) -> None:
        """Compute the prefix `ids` and keep its KV (a no-op but for its holder count when
        it is kept already). PrefixPoolFull, changing nothing, when it does not fit."""
        fresh = ids not in self.book
        offset, n = self.book.place(ids)
        if not fresh:
            return
        try:
            k, v = self.model.prefix_kv(ids)
            for li in range(len(self.k)):
                self.k[li][:, offset:offset + n].copy_(k[li])
                self.v[li][:, offset:offset + n].copy_(v[li])
        except BaseException:
            self.book.remove(ids)
            raise

    def drop(self, ids: Sequence[int]) -> None:
        """One holder of the prefix lets it go (its range is reused once none is left)."""
        self.book.remove(ids)

    def copy_into(self, ids: Sequence[int], slot: int) -> bool:
        """Write the prefix's KV into positions [0, len(ids)) of `slot`; False (nothing
        written) when the pool does not hold it."""
        at = self.book.find(ids)
        if at is None:
            return False
        offset, n = at
        self.model.write_prefix(slot, [k[:, offset:offset + n] for k in self.k],
                                [v[:, offset:offset + n] for v in self.v])
        return True
