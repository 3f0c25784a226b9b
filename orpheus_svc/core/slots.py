"""KV slot pool accounting (pure Python).

The pool owns `num_slots` slots of `max_seq_len` tokens each, sized once at start-up; the
backend preallocates its KV tensors to match. A generation holds one slot from admission to
finish or cancel. Freed slots are reused lowest-index first, which keeps the live KV rows
packed at the front on backends that can exploit it.
"""

from __future__ import annotations

import heapq


class SlotPoolError(RuntimeError):
    """A slot was freed twice or freed by a generation that does not hold it."""


class SlotPool:
    def __init__(self, num_slots: int, max_seq_len: int) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        self._free: list[int] = list(range(num_slots))  # a heap
        self._owner: dict[int, int] = {}  # slot -> gen_id

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._owner)

    def owner(self, slot: int) -> int | None:
        return self._owner.get(slot)

    def allocate(self, gen_id: int) -> int | None:
        """A free slot for `gen_id`, or None when the pool is exhausted."""
        if not self._free:
            return None
        slot = heapq.heappop(self._free)
        self._owner[slot] = gen_id
        return slot

    def free(self, slot: int, gen_id: int) -> None:
        if self._owner.get(slot) != gen_id:
            raise SlotPoolError(f"slot {slot} is not held by generation {gen_id} "
                                f"(held by {self._owner.get(slot)})")
        del self._owner[slot]
        heapq.heappush(self._free, slot)
