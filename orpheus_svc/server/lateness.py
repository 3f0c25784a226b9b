"""Late audio: the server's view of an underrun, one call at a time.

The listener is modelled as the benchmarks model it (bench/orpheus_bench/metrics.py): its
player starts JITTER_S after the first audio is sent and then plays in real time; audio sent
after the moment the player wanted it is late, by that much:

    sent       c0            c1                  c2
    time  -----|-------------|-------------------|----------------->
    player     |<-jitter->[ c0 ][ c1 ]           [ c2 ]
                                      ^ wanted c2 ^ c2 sent: late by min(c2's length, gap)
    drained_at = when the player will have played everything sent so far

Two differences from the client's view, both so that the counter blames only the server:
the send time is when the edge takes the chunk (the network is not ours to count), and
a segment whose text arrived after the player ran dry starts the clock again (the listener
was waiting for the client's text, not for us). After a late chunk the player plays on
from when it came, so one stall is counted once, not again for every chunk behind it.
"""

from __future__ import annotations

JITTER_S = 0.1  # the player's start-up buffer; the benchmarks' playout allowance


class ListenerClock:
    """One call's listener. `sent` for every audio chunk, in order; returns the seconds of
    it that came late (0.0 when on time)."""

    __slots__ = ("drained_at", "late_s")

    def __init__(self) -> None:
        self.drained_at: float | None = None
        self.late_s = 0.0

    def sent(self, now: float, seconds: float, text_ready_at: float) -> float:
        """A chunk of `seconds` of audio sent at `now` (time.monotonic), of a segment whose
        text was ready at `text_ready_at`."""
        if seconds <= 0:
            return 0.0
        late = 0.0
        drained = self.drained_at
        if drained is None or (now > drained and text_ready_at >= drained):
            self.drained_at = now + JITTER_S  # the first audio, or a new start after a pause
        elif now > drained:
            late = min(seconds, now - drained)
            self.late_s += late
            self.drained_at = now
        self.drained_at += seconds
        return late
