"""KV slot pool accounting (pure Python).

The pool owns `num_slots` slots of `max_seq_len` tokens each, sized once at start-up from
the backend's capabilities; the backend preallocates its KV tensors to match. A generation
holds one slot from admission to finish or cancel. Freed slots are reused lowest-index
first, which keeps the live KV rows packed at the front on backends that can exploit it.

With `confirm_frees` (a backend whose requests outlive our finish: TensorRT-LLM aborts
asynchronously, BackendCapabilities.confirms_release) a freed slot first drains: it stays
taken until the backend confirms that its request has really ended (confirm()). So this
pool is the only admission gate; in-flight requests never exceed the slots.
"""

from __future__ import annotations

import heapq


class SlotPoolError(RuntimeError):
    """A slot was freed twice or freed by a generation that does not hold it."""


class SlotPool:
    def __init__(self, num_slots: int, max_seq_len: int, *, confirm_frees: bool = False) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        self.confirm_frees = confirm_frees
        self._free: list[int] = list(range(num_slots))  # a heap
        self._owner: dict[int, int] = {}  # slot -> gen_id (draining slots included)
        self._draining: dict[int, int] = {}  # gen_id -> slot, freed but not yet confirmed
        self._confirmed_early: set[int] = set()  # confirmed before they were freed

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._owner)

    @property
    def num_draining(self) -> int:
        return len(self._draining)

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
        if self._owner.get(slot) != gen_id or gen_id in self._draining:
            raise SlotPoolError(f"slot {slot} is not held by generation {gen_id} "
                                f"(held by {self._owner.get(slot)})")
        if self.confirm_frees and gen_id not in self._confirmed_early:
            self._draining[gen_id] = slot
            return
        self._confirmed_early.discard(gen_id)
        del self._owner[slot]
        heapq.heappush(self._free, slot)

    def confirm(self, gen_id: int) -> None:
        """The backend no longer holds anything for `gen_id`: its slot is free now (or as
        soon as the generation frees it, when the backend is first)."""
        if not self.confirm_frees:
            return
        slot = self._draining.pop(gen_id, None)
        if slot is None:
            self._confirmed_early.add(gen_id)
            return
        del self._owner[slot]
        heapq.heappush(self._free, slot)
