"""The parking lot: running generations beyond the playout horizon, each until a wake time.
Pure Python.

With engine.max_ahead_seconds on, a generation whose listener has more audio buffered than
the horizon sits the step out. Judging every running generation at every step to find that
out would make a step's work O(running); instead the scheduler parks one found beyond the
horizon until its slack can first fall back under it, and judges only the others:

    slack s > horizon h at `now`  ->  parked until now + (s - h)

Playback lowers a slack by at most one second per second, so none comes back sooner on its
own; an earlier segment of its session ending can lower it at once, and then the scheduler
takes it out (release) to be judged at the next step.

    park(gen_id, wake)   wake()/wake_all()   release(gen_id)   next_wakeup()

The lot holds ids and times only; the scheduler (core/scheduler.py) keeps the generations
and the candidates (the running ones not parked).
"""

from __future__ import annotations

import heapq
import math


class ParkingLot:
    def __init__(self) -> None:
        self._parked: dict[int, float] = {}  # gen_id -> wake time
        # (wake, gen_id), a heap; an entry is stale unless _parked holds the same time
        # (unparked or ended since: lazy deletion)
        self._wakeups: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._parked)

    def __contains__(self, gen_id: int) -> bool:
        return gen_id in self._parked

    def park(self, gen_id: int, wake: float) -> None:
        """Leave `gen_id` unjudged until `wake`."""
        self._parked[gen_id] = wake
        heapq.heappush(self._wakeups, (wake, gen_id))

    def release(self, gen_id: int) -> bool:
        """Take `gen_id` out now (it ended, or must be judged afresh); whether it was here."""
        if self._parked.pop(gen_id, None) is None:
            return False
        if not self._parked:  # every heap entry is stale now: drop them at once
            self._wakeups.clear()
        return True

    def wake(self, now: float) -> list[int]:
        """Take out and return those whose wake time has come (earliest first)."""
        woken = []
        parked, heap = self._parked, self._wakeups
        while heap and heap[0][0] <= now:
            wake, gen_id = heapq.heappop(heap)
            if parked.get(gen_id) == wake:
                del parked[gen_id]
                woken.append(gen_id)
        return woken

    def wake_all(self) -> list[int]:
        """Empty the lot (the settings changed, or the horizon is off); returns what it held."""
        woken = list(self._parked)
        self._parked.clear()
        self._wakeups.clear()
        return woken

    def next_wakeup(self) -> float:
        """The earliest wake time (inf: the lot is empty)."""
        heap, parked = self._wakeups, self._parked
        while heap and parked.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # stale: released or woken since
        return heap[0][0] if heap else math.inf
