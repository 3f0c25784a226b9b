"""Per-session playout clocks: how much audio each session has buffered ahead of real time.

The scheduler's deadline order needs, for every runnable generation, the time at which its
listener would run dry without it. A session plays its segments strictly in order, so:

    time ->            now
    session A  [==seg0 played==|==seg0 buffered==]                    <- playout_end
               seg0 (head): next frame is needed at playout_end        slack = playout_end - now
               seg1 (behind): needed once seg0's remaining audio and    slack = head slack
                              seg1's own buffered frames have played     + est. frames ahead * 85.3 ms

Audio only joins the clock when it is playable (its segment is the session's head, the
earliest unfinished one); frames that a later segment makes while an earlier one is still
generating wait in `frames_not_in_playout` and join when it becomes the head. When a
session's buffer has run out (playout_end < now) new audio starts playing at `now` again,
so an idle gap in the conversation is not counted as lateness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .generation import Generation
from .tokens import FRAME_SECONDS


@dataclass
class SessionPlayout:
    session_id: str
    playout_end: float | None = None  # wall time when the audio generated so far finishes playing
    gens: list[Generation] = field(default_factory=list)  # unfinished, in segment order

    @property
    def head(self) -> Generation | None:
        return self.gens[0] if self.gens else None

    def add(self, gen: Generation) -> None:
        self.gens.append(gen)
        self.gens.sort(key=lambda g: g.request.segment_index)

    def remove(self, gen: Generation, now: float) -> None:
        was_head = self.head is gen
        self.gens.remove(gen)
        new_head = self.head
        if was_head and new_head is not None and new_head.frames_not_in_playout:
            self._play(new_head.frames_not_in_playout, now)
            new_head.frames_not_in_playout = 0

    def on_frames(self, gen: Generation, n: int, now: float) -> None:
        if self.head is gen:
            self._play(n, now)
        else:
            gen.frames_not_in_playout += n

    def _play(self, n: int, now: float) -> None:
        start = now if self.playout_end is None else max(self.playout_end, now)
        self.playout_end = start + n * FRAME_SECONDS

    def buffered_seconds(self, now: float) -> float:
        """Playable audio ahead of real time (0 when dry or not started)."""
        return 0.0 if self.playout_end is None else max(self.playout_end - now, 0.0)

    def listener_waiting(self, gen: Generation, now: float) -> bool:
        """True when `gen` is the head, has no audio yet and nothing is left to play:
        its listener hears silence until its first frame (the TTFB case)."""
        return self.head is gen and gen.num_frames == 0 and self.buffered_seconds(now) == 0.0

    def slack(self, gen: Generation, now: float) -> float:
        """Seconds until the listener needs `gen`'s next frame (negative: already late)."""
        head = self.head
        if head is None:
            return 0.0
        if self.playout_end is None or self.playout_end < head.arrival:
            base = head.arrival  # nothing buffered since this head arrived: waiting since then
        else:
            base = self.playout_end
        ahead_frames = 0
        for g in self.gens:
            if g is gen:
                ahead_frames += g.frames_not_in_playout
                break
            ahead_frames += g.frames_not_in_playout
            # an unfinished earlier segment has at least one more frame to play first
            ahead_frames += max(g.request.expected_frames - g.num_frames, 1)
        return base - now + ahead_frames * FRAME_SECONDS
