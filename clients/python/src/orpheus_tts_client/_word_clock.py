"""When a voice agent may take each word of a turn as heard: the shared logic of the Pipecat
and LiveKit plugins (no framework, no asyncio, no I/O).

A turn is one StreamingSynthesize call. Its events go in (``sent``, ``segment_start``,
``word_timings``, ``audio``, ``segment_end``); out come *units*, each a piece of the text sent
with the time its audio starts, in seconds from the turn's first audio (the call's sample
offsets over the output rate), in order, each once:

- a segment with word timings (``word_timestamps=True`` on a server that sends them) gives
  one unit per word, the word's text as sent (punctuation included, emotion tags left out);
- a segment whose first audio comes without them (a server without the option, the option
  off, a segment of only tags) gives one unit: the segment's text, at the segment's first
  sample, which is exact.

A word's time is the best the turn knows when it is asked: the server's final times once
they came (or the segment ended: its estimate stood); before that the server's estimate,
stretched by this voice's measured ratio of real to expected segment length
(``LengthCalibration``) and at least to the audio the segment has sent so far (its real
length is no shorter). A framework that takes no later correction (Pipecat) asks ``due``
as playback nears each word, so a word is handed over as late as is safe, with the best
time known then; a segment whose times are final is handed over at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .types import AudioChunk, SegmentEnd, SegmentStart, WordTimings


@dataclass(frozen=True)
class Unit:
    """One piece of the turn's text and when its audio starts: ``start_s`` and ``end_s`` in
    seconds from the turn's first audio (``end_s`` is the segment's end for a whole
    segment, and None while that is unknown); ``word``: a word rather than a segment."""

    text: str
    start_s: float
    end_s: float | None
    word: bool


class LengthCalibration:
    """How much longer this voice's segments are than the server's expected length: the
    ratio of real to expected samples over the last ``window`` segments that had word
    timings (1.0 before any). One per service, shared by its turns."""

    def __init__(self, window: int = 16, low: float = 0.25, high: float = 8.0) -> None:
        self._seen: deque[tuple[int, int]] = deque(maxlen=window)
        self._low, self._high = low, high

    def observe(self, expected: int, real: int) -> None:
        if expected > 0 and real > 0:
            self._seen.append((expected, real))

    @property
    def ratio(self) -> float:
        expected = sum(e for e, _ in self._seen)
        if not expected:
            return 1.0
        return min(self._high, max(self._low, sum(r for _, r in self._seen) / expected))


@dataclass
class _Segment:
    index: int
    start: int  # its first sample in the call
    text: str
    estimate: tuple = ()  # WordTiming, the server's first times
    final: tuple = ()  # WordTiming, its final times (only if they moved)
    received: int = 0  # samples of its audio so far
    length: int | None = None  # samples, once it ended
    whole: bool = False  # no word timings: one unit for the segment
    decided: bool = False  # words or whole
    next_unit: int = 0  # units of it already handed out


class TurnWords:
    """The units of one turn, in order (see the module docstring). ``sample_rate`` is the
    call's output rate; ``calibration`` the service's ``LengthCalibration``."""

    def __init__(self, sample_rate: int, calibration: LengthCalibration | None = None) -> None:
        self._rate = float(sample_rate)
        self._calibration = calibration if calibration is not None else LengthCalibration()
        self._text = ""  # everything sent, concatenated (the offsets' frame)
        self._segments: list[_Segment] = []
        self._by_index: dict[int, _Segment] = {}
        self._next = 0  # index into _segments of the first segment with units left
        self._last_s = 0.0  # the last start handed out: starts never go back

    # -- events --------------------------------------------------------------------------

    def sent(self, text: str) -> None:
        self._text += text

    def segment_start(self, ev: SegmentStart) -> None:
        own = self._text[ev.text_start:ev.text_end] if ev.text_end > ev.text_start else ""
        seg = _Segment(ev.segment_index, ev.sample_offset, (own or ev.text).strip())
        self._segments.append(seg)
        self._by_index[ev.segment_index] = seg

    def word_timings(self, ev: WordTimings) -> None:
        seg = self._by_index.get(ev.segment_index)
        if seg is None or seg.whole or not ev.words:
            return
        if ev.final:
            seg.final = ev.words
        elif not seg.estimate:
            seg.estimate = ev.words
            seg.decided = True

    def audio(self, ev: AudioChunk) -> None:
        seg = self._by_index.get(ev.segment_index)
        if seg is None:
            return
        self._decide(seg)
        seg.received += ev.num_samples

    def segment_end(self, ev: SegmentEnd) -> None:
        seg = self._by_index.get(ev.segment_index)
        if seg is None:
            return
        self._decide(seg)
        seg.length = ev.num_samples
        if seg.estimate:
            self._calibration.observe(self._expected(seg), ev.num_samples)

    # -- units -----------------------------------------------------------------------------

    def due(self, position_s: float, lead_s: float) -> list[Unit]:
        """The units to hand over now, with playback at ``position_s`` (seconds from the
        turn's first audio): every unit whose time is final, and every estimated one whose
        start is within ``lead_s`` of it. Each unit comes out once, in order."""
        return self._take(lambda seg, start: self._settled(seg)
                          or start - lead_s <= position_s)

    def rest(self) -> list[Unit]:
        """Every unit not handed over yet, at its best time (the call has ended)."""
        for seg in self._segments:
            self._decide(seg)
        return self._take(lambda seg, start: True)

    def next_due_s(self, lead_s: float) -> float | None:
        """The playback position at which ``due`` has the next unit, if it can tell (None:
        nothing is pending, or the next segment's unit kind is not known yet)."""
        seg = self._pending()
        if seg is None:
            return None
        start, _ = self._times(seg, seg.next_unit)
        return 0.0 if self._settled(seg) else max(start, self._last_s) - lead_s

    # -- internals -------------------------------------------------------------------------

    def _decide(self, seg: _Segment) -> None:
        if not seg.decided:
            seg.whole = True
            seg.decided = True

    def _count(self, seg: _Segment) -> int:
        if seg.whole:
            return 1 if seg.text else 0
        return len(seg.estimate)

    def _settled(self, seg: _Segment) -> bool:
        """The segment's times will not move again."""
        return seg.whole or bool(seg.final) or seg.length is not None

    def _pending(self) -> _Segment | None:
        while self._next < len(self._segments):
            seg = self._segments[self._next]
            if not seg.decided:
                return None
            if seg.next_unit < self._count(seg):
                return seg
            self._next += 1
        return None

    def _expected(self, seg: _Segment) -> int:
        """The segment's expected length: its estimate's last word ends at its end."""
        return seg.estimate[-1].end_sample - seg.start if seg.estimate else 0

    def _times(self, seg: _Segment, i: int) -> tuple[float, float | None]:
        """Unit i of the segment: (start, end) in seconds, at the best times known."""
        if seg.whole:
            end = None if seg.length is None else (seg.start + seg.length) / self._rate
            return seg.start / self._rate, end
        if seg.final:
            w = seg.final[i]
            return w.start_sample / self._rate, w.end_sample / self._rate
        w = seg.estimate[i]
        if seg.length is not None:  # ended with no final message: the estimate stood
            return w.start_sample / self._rate, w.end_sample / self._rate
        expected = self._expected(seg)
        if expected <= 0:
            return w.start_sample / self._rate, w.end_sample / self._rate
        length = max(self._calibration.ratio * expected, seg.received)
        scale = length / expected
        return ((seg.start + (w.start_sample - seg.start) * scale) / self._rate,
                (seg.start + (w.end_sample - seg.start) * scale) / self._rate)

    def _take(self, ready) -> list[Unit]:
        out: list[Unit] = []
        while (seg := self._pending()) is not None:
            i = seg.next_unit
            start, end = self._times(seg, i)
            if not ready(seg, start):
                break
            start = max(start, self._last_s)
            self._last_s = start
            text = seg.text if seg.whole else (seg.final or seg.estimate)[i].text
            out.append(Unit(text, start, end, not seg.whole))
            seg.next_unit += 1
        return out


class Playout:
    """Where a listener's playback of the turn is, from when its audio arrived: playback
    starts with the first audio and runs in real time while there is audio to play, and
    stalls while there is none (audio that arrives slower than real time). All times in
    seconds on one clock; ``lag`` is how far playback is behind that clock's count since
    the first audio (what a framework that times words on its clock must add)."""

    def __init__(self) -> None:
        self._first: float | None = None
        self._clock = 0.0  # the clock at the last update
        self._played = 0.0  # seconds of audio played by then
        self._arrived = 0.0  # seconds of audio arrived

    def arrive(self, now: float, seconds: float) -> None:
        self._advance(now)
        if self._first is None:
            self._first = self._clock = now
        self._arrived += seconds

    def played(self, now: float) -> float:
        self._advance(now)
        return self._played

    def lag(self, now: float) -> float:
        if self._first is None:
            return 0.0
        return max(0.0, (now - self._first) - self.played(now))

    def _advance(self, now: float) -> None:
        if self._first is None or now <= self._clock:
            return
        self._played = min(self._arrived, self._played + (now - self._clock))
        self._clock = now
