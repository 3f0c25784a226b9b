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
generating wait in `frames_not_in_playout` and join when it becomes the head (if it ends
first, they play once the segment before it has). When a
session's buffer has run out (playout_end < now) new audio starts playing at `now` again,
so an idle gap in the conversation is not counted as lateness.

This is the only model of the listener's clock. The flusher, which decides chunk sizes and
decode order by how close a listener is to running dry, gets it as a `PlayoutSnapshot` per
generation (engine/loop.py hands them over with the frames) and keeps no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .generation import Generation
from .tokens import FRAME_SECONDS, SAMPLE_RATE


@dataclass(frozen=True)
class PlayoutSnapshot:
    """When the listener reaches one generation's audio, by the scheduler's clock.

    starts_at (the engine's clock, which is the flusher's: time.monotonic in the server):
    the listener hears sample s of this generation at starts_at + s / SAMPLE_RATE, provided
    it has been sent by then. For a session's head segment that is the moment its first
    frame was generated, moved later by every gap in which the listener ran dry; for a later
    segment, the estimate of when the audio before it will have played.

    The gap between the two sides: the scheduler counts a frame as playable the moment it is
    generated, but the listener gets it only when the flusher sends it (after chunking and
    decoding). So the snapshot says only *when* the listener gets to this generation, never
    how much audio it holds: the flusher counts that itself, from the samples it has sent
    (`buffered_samples`). It must not believe the listener has audio it has not been sent;
    what the scheduler's clock counts beyond that is exactly the audio still in the flusher
    (withheld for a chunk, or waiting for a decode). When the listener is past what was sent
    (negative buffer) it is dry now: whatever is ready should go at once.
    """

    starts_at: float

    def buffered_samples(self, sent_samples: int, now: float) -> float:
        """Samples of the `sent_samples` sent so far that the listener has yet to play at
        `now`: more than sent before playback reaches this generation, negative once the
        listener is past what it was sent."""
        return sent_samples - (now - self.starts_at) * SAMPLE_RATE

    def dry_at(self, sent_samples: int) -> float:
        """Wall time at which the listener will have played the `sent_samples` sent so far."""
        return self.starts_at + sent_samples / SAMPLE_RATE


@dataclass
class SessionPlayout:
    session_id: str
    playout_end: float | None = None  # wall time when the audio generated so far finishes playing
    gens: list[Generation] = field(default_factory=list)  # unfinished, in segment order
    # Bumped whenever a generation's playback start (`snapshot`) may have moved; playing on
    # without a gap moves none. `_handed`: gen_id -> version of the snapshot last handed out.
    version: int = 0
    _handed: dict[int, int] = field(default_factory=dict)
    # gen_id -> frames of later segments that ended before it: they play right after it
    # (a short segment can finish while the one before it still generates)
    _after: dict[int, int] = field(default_factory=dict)

    @property
    def head(self) -> Generation | None:
        return self.gens[0] if self.gens else None

    def add(self, gen: Generation) -> None:
        self.gens.append(gen)
        self.gens.sort(key=lambda g: g.request.segment_index)
        self.version += 1

    def remove(self, gen: Generation, now: float, heard: bool = True) -> None:
        """`gen` ended. Its frames not yet playable (`heard`: False for a cancelled one,
        whose audio is dropped) play once the segments before it have, in segment order,
        whichever of them ends first."""
        i = self.gens.index(gen)
        del self.gens[i]
        self._handed.pop(gen.gen_id, None)
        self.version += 1  # estimates made with it become actual times
        after = self._after.pop(gen.gen_id, 0)
        own = gen.frames_not_in_playout if heard else 0
        if i > 0:  # behind the head: its audio waits for the segment before it
            prev = self.gens[i - 1].gen_id
            if own + after:
                self._after[prev] = self._after.get(prev, 0) + own + after
            return
        new_head = self.head
        if new_head is not None:
            after += new_head.frames_not_in_playout
            new_head.frames_not_in_playout = 0
        if after:
            self._play(after, now)

    def on_frames(self, gen: Generation, n: int, now: float) -> None:
        """`gen` made `n` frames (its num_frames already counts them)."""
        if self.head is gen:
            self._play(n, now)
        else:
            gen.frames_not_in_playout += n
        if gen is not self.gens[-1]:
            # Later segments' starts count this one's remaining frames as at least one: they
            # move only when it runs past that estimate.
            left = gen.request.expected_frames - gen.num_frames
            if n != max(left + n, 1) - max(left, 1):
                self.version += 1

    def _play(self, n: int, now: float) -> None:
        if self.playout_end is None or self.playout_end < now:
            self.version += 1  # the listener ran dry (or starts): playback resumes at now
        start = now if self.playout_end is None else max(self.playout_end, now)
        self.playout_end = start + n * FRAME_SECONDS

    def snapshot(self, gen: Generation, now: float) -> PlayoutSnapshot:
        """When the listener reaches `gen`'s first frame (see PlayoutSnapshot): a session plays
        its segments in order, so a later segment starts when the audio before it has played."""
        self._handed[gen.gen_id] = self.version
        return PlayoutSnapshot(now + self.slack(gen, now) - gen.num_frames * FRAME_SECONDS)

    def moved(self, gen: Generation) -> bool:
        """Has `gen`'s snapshot possibly changed since it was last handed out (or never been)?"""
        return self._handed.get(gen.gen_id) != self.version

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
            ahead_frames += g.frames_not_in_playout + self._after.get(g.gen_id, 0)
            # an unfinished earlier segment has at least one more frame to play first
            ahead_frames += max(g.request.expected_frames - g.num_frames, 1)
        return base - now + ahead_frames * FRAME_SECONDS
