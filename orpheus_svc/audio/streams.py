"""The flusher's streams: each generation's frames and what of its audio went out, and which
streams are due to be planned, and when.

A stream's windows (audio/windows.py) depend on its frames, final flag and playout snapshot
(changed only by a push: `open` marks it), on the audio it was sent (a stream whose windows
were all decoded has nothing ready left; one cut short is marked) and on the time only
through `hungry`, which turns true once, at a time `Streams` computes after each plan and
keeps on a heap. So only marked streams and those whose heap time came are planned: any
other stream would plan nothing, and planning these gives the events of planning every
stream every iteration, at a cost that follows the activity rather than the number of
streams.

    heap      (t0, s3) (t1, s7) (t2, s3)     t0 < t1 <= now < t2
    wake_at   s3: t2   s7: t1                an entry counts while it equals its stream's
                                             wake_at (s3 was planned again after t0 was set)
    due(now)  pops t0 (stale: dropped) and t1 (marks s7); t2 waits on the heap

Flusher thread only; no lock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.audio.windows import Window, chunk_target, ready_end
from orpheus_svc.core.events import Finish
from orpheus_svc.core.playout import PlayoutSnapshot
from orpheus_svc.core.tokens import FRAME_TOKENS, SAMPLE_RATE, SAMPLES_PER_FRAME

CLOSED_MEMORY = 65536  # ids of ended generations remembered, to ignore stray late pushes
# A withheld chunk's stream is planned again this long before its computed hungry time, so
# float rounding in that time can never make it late (planning early only finds nothing).
WAKE_SLACK_S = 1e-6


@dataclass
class Stream:
    """One generation's codes and how much of its audio went out.

    The listener's clock is the scheduler's (core/playout.py), given as `playout` with the
    frames; the flusher adds only what it knows itself: the samples it has sent (`emitted`).
    By that rule the listener holds sent audio not yet played: never audio the scheduler
    counts as generated but the flusher still holds. Without a snapshot (a caller with no
    scheduler) the flusher knows no listener: chunk targets only, ranked after the others.
    """

    frames: list[np.ndarray] = field(default_factory=list)
    num_frames: int = 0
    final: bool = False
    finish: Finish | None = None  # how it ended, pushed with the last frames
    emitted: int = 0
    playout: PlayoutSnapshot | None = None  # the latest the engine gave
    seq: int = 0  # arrival order among the flusher's streams (the order they are planned in)
    seed: int | None = None  # a seeded session's: reproducible audio (audio/flusher.py)
    wake_at: float | None = None  # when its withheld audio becomes due (its valid heap entry)

    def add(self, frames: np.ndarray, final: bool, playout: PlayoutSnapshot | None,
            finish: Finish | None, seed: int | None) -> None:
        """One push: its frames, whether more come, and the latest snapshot and seed."""
        if len(frames):
            self.frames.append(frames)
            self.num_frames += len(frames)
        self.final = final
        self.finish = finish
        if playout is not None:
            self.playout = playout
        if seed is not None:
            self.seed = seed

    def buffered(self, now: float) -> float:
        """Samples the listener has yet to play of what was sent (negative: it is past the
        sent audio, so dry now; +inf when no playout clock is known)."""
        if self.playout is None:
            return float("inf")
        return self.playout.buffered_samples(self.emitted, now)

    def listener(self, now: float, low_water_samples: int) -> tuple[bool, int]:
        """(hungry, ahead) from one reading of the buffer. hungry: the listener is about to
        run dry (only once its first audio went out: the first chunk goes as soon as it
        exists anyway). ahead: samples it has to play before it runs out of what was sent
        (0 when no playout clock is known, or dry)."""
        b = self.buffered(now)
        return (self.emitted > 0 and b < low_water_samples,
                int(b) if 0 < b < float("inf") else 0)

    def urgency(self, now: float) -> tuple[int, float]:
        """Sort key, most urgent first: a listener waiting for its first audio now (time to
        first audio), then the least audio buffered (closest to running dry); a segment
        whose playback starts later ranks by how soon it does."""
        if self.awaited_first(now):
            return (0, 0.0)
        return (1, self.buffered(now))

    def awaited_first(self, now: float) -> bool:
        """Is a listener waiting for this stream's first audio now?"""
        return self.emitted == 0 and (self.playout is None or self.playout.starts_at <= now)

    def ends_with(self, w: Window) -> bool:
        """Is `w` this stream's last window (it is final and `w` reaches its last sample)?"""
        return self.final and w.end == self.num_frames * SAMPLES_PER_FRAME

    def codes(self) -> np.ndarray:
        if len(self.frames) > 1:
            self.frames = [np.concatenate(self.frames)]
        return self.frames[0] if self.frames else np.zeros((0, FRAME_TOKENS), np.int64)


class Streams:
    """The live streams by generation id, the ids of ended ones, and what to plan next."""

    def __init__(self, settings: FlusherSettings):
        self.settings = settings
        self._live: dict[int, Stream] = {}
        self._closed: OrderedDict[int, None] = OrderedDict()
        # Planned next: streams touched since their last plan (pushes, windows left
        # undecoded) and those whose withheld audio became due (the heap).
        self._dirty: set[int] = set()
        self._wakes: list[tuple[float, int, int, Stream]] = []  # (time, tie, gid, stream)
        self._tie = itertools.count()
        self._seq = itertools.count()

    def __contains__(self, gid: int) -> bool:
        return gid in self._live

    def get(self, gid: int) -> Stream | None:
        return self._live.get(gid)

    def open(self, gid: int) -> Stream | None:
        """The stream a push for `gid` goes to, new if need be, marked to be planned; None
        when the generation ended or was dropped already."""
        self._dirty.add(gid)
        st = self._live.get(gid)
        if st is None:
            if gid in self._closed:
                return None
            st = self._live[gid] = Stream(seq=next(self._seq))
        return st

    def is_closed(self, gid: int) -> bool:
        """Has `gid` ended or been dropped (as far as the memory of ended ids reaches)?"""
        return gid in self._closed

    def close(self, gid: int) -> Stream | None:
        """Forget `gid`'s stream (returned, if it had one) and remember that it ended."""
        st = self._live.pop(gid, None)
        self._closed[gid] = None
        if len(self._closed) > CLOSED_MEMORY:
            self._closed.popitem(last=False)
        return st

    def forget_closed(self, gid: int) -> None:
        """`gid`'s final event was not sent after all: its drop sends one."""
        self._closed.pop(gid, None)

    def due(self, now: float) -> list[tuple[int, Stream]]:
        """The streams whose plan can differ from their last one, in arrival order."""
        heap = self._wakes
        while heap and heap[0][0] - WAKE_SLACK_S <= now:
            t, _, gid, st = heapq.heappop(heap)
            if st.wake_at == t and self._live.get(gid) is st:
                st.wake_at = None
                self._dirty.add(gid)
        found = [(st.seq, gid, st) for gid in self._dirty
                 if (st := self._live.get(gid)) is not None]
        self._dirty.clear()
        found.sort()
        return [(gid, st) for _, gid, st in found]

    def planned(self, planned: Iterable[tuple[int, Stream]], cut: set[int]) -> float | None:
        """After an iteration: the streams in `cut` (a window left undecoded) are planned
        again next time, the other `planned` ones that live on at their wake time. Returns
        when the first listener with withheld audio runs low, if any."""
        self._dirty.update(cut)
        for gid, st in planned:
            if gid not in cut and self._live.get(gid) is st:
                self._schedule_wake(gid, st)
        return self._next_wake()

    def _schedule_wake(self, gid: int, st: Stream) -> None:
        """After planning `st`: when its ready-but-withheld audio becomes due because the
        listener runs low (no wake without a playout clock or before the first audio).

        Frames arriving wake the flusher anyway; this covers a generation that stalls
        (a busy engine) while audio it already produced waits for the chunk target.
        """
        t = None
        s = self.settings
        if st.seed is not None:
            pass  # its windows follow its frames alone: only a push changes them
        elif st.playout is not None and st.emitted:
            ready = ready_end(st.num_frames, st.final, s) - st.emitted
            if ready > 0:
                dry = st.playout.dry_at(st.emitted)
                t = dry - s.low_water_samples / SAMPLE_RATE
                if s.chunk_growth > 0 and ready >= chunk_target(st.emitted, s):
                    # withheld only because the listener has much ahead (the target grows
                    # with it): due once it has ready / growth left, if not hungry before
                    t = min(t, dry - ready / s.chunk_growth / SAMPLE_RATE)
        elif st.playout is not None and ready_end(st.num_frames, st.final, s) > 0:
            # nothing sent, something ready: a first chunk withheld while the listener has
            # plenty ahead. Due once it has less than a full chunk left (early_first), or
            # once the chunk target (which follows what it has ahead) falls to what is ready.
            dry = st.playout.dry_at(0)
            t = dry - s.max_chunk_samples / SAMPLE_RATE
            ready = ready_end(st.num_frames, st.final, s, early_first=False)
            if s.chunk_growth > 0 and ready >= s.min_chunk_samples:
                t = min(t, dry - ready / s.chunk_growth / SAMPLE_RATE)
        if t != st.wake_at:  # unchanged (frames came, nothing went): its entry stands
            st.wake_at = t
            if t is not None:
                heapq.heappush(self._wakes, (t, next(self._tie), gid, st))

    def _next_wake(self) -> float | None:
        """When the first listener with withheld audio runs low, if any (stale entries of
        streams planned again or ended since are dropped from the heap's top)."""
        heap = self._wakes
        while heap and (heap[0][3].wake_at != heap[0][0]
                        or self._live.get(heap[0][2]) is not heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
