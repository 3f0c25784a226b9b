"""The admission queue: generations that hold no KV slot yet. Pure Python.

    add(gen, free, max_waiting)     queue one; AdmissionError past the cap on new sessions
    admit(now, free, room, key, ..) who takes the free slots now, in batch order
    remove(gen_id)                  a cancelled one leaves the queue
    judge_again(gen)                a deferred one is judged afresh at the next admission

A queued generation is in one of two places:

    waiting   judged at the next admission (new arrivals, and those a full pool left over)
    deferred  a later segment whose listener has more than MIN_SLACK_S of audio before it:
              a heap by the time its slack falls to MIN_SLACK_S, which is also its slack
              order; it goes earlier only while the row budget (core/budget.py) has room

so an admission's work is O(new arrivals + generations coming due), not O(everything
queued). The queue also counts the new sessions (first segments) it holds: what
engine.max_waiting caps. The scheduler (core/scheduler.py) owns the queue, the slots and the
batch order; it hands the queue the free slots, the budget's room and the order's key.
"""

from __future__ import annotations

import heapq
import math
from typing import Callable

from .budget import MIN_SLACK_S
from .generation import Generation


class AdmissionError(RuntimeError):
    """The admission queue is full; the caller should answer RESOURCE_EXHAUSTED."""


# The batch order's key for a generation at `now` (core/scheduler.py deadline_priority):
# (2, slack) says its listener has `slack` seconds of audio before it.
KeyFn = Callable[[Generation, float], tuple]


class AdmissionQueue:
    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots  # for the refusal's message
        self._waiting: list[Generation] = []
        # Entries are stale unless _deferred_ids holds the same time (lazy deletion).
        self._deferred: list[tuple[float, int, Generation]] = []
        self._deferred_ids: dict[int, float] = {}
        # First segments (new sessions) queued here, waiting or deferred: what the cap counts.
        self._new_waiting = 0

    def __len__(self) -> int:
        """Generations queued, waiting or deferred."""
        return len(self._waiting) + len(self._deferred_ids)

    @property
    def has_waiting(self) -> bool:
        """Whether a generation waits to be judged at the next admission."""
        return bool(self._waiting)

    @property
    def num_deferred(self) -> int:
        return len(self._deferred_ids)

    def add(self, gen: Generation, free: int, max_waiting: int) -> None:
        """Queue `gen`; AdmissionError when `max_waiting` new sessions wait already.

        The cap counts the new sessions (first segments) that wait for a KV slot beyond the
        `free` slots now: one queued since the last step takes a free slot at the next, so
        it does not wait. Only a first segment can be refused: a later segment belongs to a
        session the server already accepted (callers bound how many of those are in
        flight), and refusing it would break a conversation midway; so later segments wait
        outside the cap. Should one of them take a free slot a new session was counted
        against, admit() turns the newest session away: the cap holds exactly
        (tests/core/test_admission_cap.py)."""
        if gen.request.segment_index == 0:
            queued = self._new_waiting - free
            if queued >= max_waiting:
                raise AdmissionError(self.full_message(queued, max_waiting))
            self._new_waiting += 1
        self._waiting.append(gen)

    def full_message(self, queued: int, max_waiting: int) -> str:
        return (f"server is at capacity: all {self.num_slots} KV slots are taken and "
                f"{queued} new sessions wait for one (engine.max_waiting={max_waiting}); "
                f"retry later or on another replica")

    def remove(self, gen_id: int) -> Generation | None:
        """Take `gen_id` out of the queue (it was cancelled); None if it is not queued."""
        gen = next((g for g in self._waiting if g.gen_id == gen_id), None)
        if gen is not None:
            self._waiting.remove(gen)
        elif self._deferred_ids.pop(gen_id, None) is not None:
            gen = next(g for _, _, g in self._deferred if g.gen_id == gen_id)
        else:
            return None
        if gen.request.segment_index == 0:
            self._new_waiting -= 1
        return gen

    def get(self, gen_id: int) -> Generation | None:
        return next((g for g in self._waiting if g.gen_id == gen_id), None) or next(
            (g for _, _, g in self._deferred if self._deferred_ids.get(g.gen_id) is not None
             and g.gen_id == gen_id), None)

    def judge_again(self, gen: Generation) -> None:
        """Its slack may have dropped (an earlier segment of its session ended): a deferred
        `gen` is judged afresh at the next admission."""
        if self._deferred_ids.pop(gen.gen_id, None) is not None:
            self._waiting.append(gen)

    def next_due(self) -> float:
        """When the first deferred generation falls due (inf: none)."""
        heap = self._deferred
        while heap and self._deferred_ids.get(heap[0][2].gen_id) != heap[0][0]:
            heapq.heappop(heap)  # stale
        return heap[0][0] if heap else math.inf

    def admit(self, now: float, free: int, room: float, key: KeyFn,
              max_waiting: int) -> tuple[list[Generation], list[Generation]]:
        """Who takes the `free` slots now, and who is turned away; nothing when none is free.

        Waiting and newly due generations go in batch order (`key`): a later segment not due
        within MIN_SLACK_S is deferred; the others take the free slots (the row budget does
        not hold them), and those left over wait. Then deferred ones take what is left of
        the free slots while the budget has `room`, least slack first. Returns the admitted,
        in that order (the caller gives each a slot), and the first segments refused because
        later segments took slots they were counted against (the newest ones)."""
        admitted: list[Generation] = []
        if not free:
            return admitted, []
        heap, ids = self._deferred, self._deferred_ids
        due: list[Generation] = []
        while heap and heap[0][0] <= now:  # their slack reached MIN_SLACK_S: judge afresh
            t, _, gen = heapq.heappop(heap)
            if ids.get(gen.gen_id) == t:
                del ids[gen.gen_id]
                due.append(gen)
        if self._waiting or due:
            keyed = sorted([(key(g, now), g.gen_id, g) for g in (*self._waiting, *due)])
            self._waiting = []
            for k, _, gen in keyed:
                if k[0] == 2 and k[1] > MIN_SLACK_S:  # the listener has audio ahead
                    t = now + k[1] - MIN_SLACK_S
                    ids[gen.gen_id] = t
                    heapq.heappush(heap, (t, gen.gen_id, gen))
                elif free:
                    admitted.append(gen)
                    free -= 1
                    room -= 1
                else:
                    self._waiting.append(gen)
        while room > 0 and heap and free:  # room left: least slack first
            t, _, gen = heapq.heappop(heap)
            if ids.get(gen.gen_id) == t:
                del ids[gen.gen_id]
                admitted.append(gen)
                free -= 1
                room -= 1
        self._new_waiting -= sum(1 for g in admitted if g.request.segment_index == 0)
        excess = self._new_waiting - free - max_waiting
        refused = self._refuse_newest(excess) if excess > 0 else []
        return admitted, refused

    def _refuse_newest(self, n: int) -> list[Generation]:
        """Take out the `n` newest first segments (as add() would have refused them, had it
        known)."""
        ids = self._deferred_ids
        firsts = [g for g in self._waiting if g.request.segment_index == 0]
        firsts += [g for _, _, g in self._deferred
                   if g.request.segment_index == 0 and ids.get(g.gen_id) is not None]
        refused = sorted(firsts, key=lambda g: (g.arrival, g.gen_id))[-n:]
        for gen in refused:
            if ids.pop(gen.gen_id, None) is None:
                self._waiting.remove(gen)
            self._new_waiting -= 1
        return refused
