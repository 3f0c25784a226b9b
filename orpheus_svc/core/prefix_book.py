"""Where each prompt prefix lives in a backend's prefix pool (pure): a book of token ranges.

A prefix pool (engine/model/prefix_pool.py) is one preallocated run of KV token positions;
each registered prefix (a reference voice's: core/reference.py reference_prefix) takes a
range of it, keyed by its token ids, so that a request names its prefix by nothing but its
own prompt (GenerationRequest.prefix_len) and a prefix the pool does not hold is simply
computed (core/request.py). Ranges are placed first fit; removing one frees its range at
once. A pool that cannot place one refuses it (PrefixPoolFull, naming the budget) and
changes nothing: the pool never evicts, because a voice that was registered must keep its
first-audio time.
"""

from __future__ import annotations

from typing import Sequence


class PrefixPoolFull(RuntimeError):
    """The pool has no free range long enough for a prefix: the registration is refused
    (RESOURCE_EXHAUSTED at the edge) and nothing changes."""


class PrefixBook:
    """Token ranges of a pool of `capacity` tokens, by prefix (a tuple of token ids).
    `budget` names the setting and its value for the refusal's message."""

    def __init__(self, capacity: int, budget: str = "") -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.budget = budget
        self._ranges: dict[tuple[int, ...], tuple[int, int]] = {}  # ids -> (offset, length)
        # how many registrations share a range (two voices made from one clip and transcript)
        self._holders: dict[tuple[int, ...], int] = {}

    def __len__(self) -> int:
        return len(self._ranges)

    def __contains__(self, ids: Sequence[int]) -> bool:
        return tuple(ids) in self._ranges

    def find(self, ids: Sequence[int]) -> tuple[int, int] | None:
        """(offset, length) of the prefix `ids`, or None when the pool does not hold it."""
        return self._ranges.get(tuple(ids))

    @property
    def used(self) -> int:
        return sum(n for _, n in self._ranges.values())

    def place(self, ids: Sequence[int]) -> tuple[int, int]:
        """A range for `ids`: the one it has if already placed (one more holder), else the
        first free gap long enough. PrefixPoolFull when there is none; ValueError for an
        empty prefix."""
        key = tuple(ids)
        if not key:
            raise ValueError("an empty prefix takes no range")
        if key not in self._ranges:
            self._ranges[key] = (self._first_gap(len(key)), len(key))
        self._holders[key] = self._holders.get(key, 0) + 1
        return self._ranges[key]

    def _first_gap(self, n: int) -> int:
        """The offset of the first free gap of at least n tokens, else PrefixPoolFull."""
        at = 0
        for offset, length in sorted(self._ranges.values()):
            if offset - at >= n:
                return at
            at = offset + length
        if self.capacity - at >= n:
            return at
        raise PrefixPoolFull(
            f"the prefix pool has no room for {n} more tokens: {self.used} of its "
            f"{self.capacity} are taken by {len(self)} prefixes ({self.budget}); unload a "
            f"reference voice or raise the budget")

    def remove(self, ids: Sequence[int]) -> bool:
        """One holder of `ids` lets go; its range is free once none is left. True when the
        range was freed."""
        key = tuple(ids)
        if key not in self._holders:
            return False
        self._holders[key] -= 1
        if self._holders[key]:
            return False
        del self._holders[key], self._ranges[key]
        return True
