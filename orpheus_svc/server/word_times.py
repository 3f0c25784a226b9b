"""A session's word timings, segment by segment: the estimator (core/word_timing.py) placed
in the call's text and audio. Pure (no torch, no grpc).

For each segment the session knows where its text lies in the client's input (the
segmenter's Cut: raw client text, never the normalised form) and the sample at which its
audio starts; the estimator shares the segment's audio out among its words:

    session text:  "Hi there. <laugh> I paid $3.50."
                              ^cut.start                 segment 1: "<laugh> I paid $3.50."
    segment words:    <laugh>(tag)  I  paid  $3.50.      offsets + cut.start = session offsets
    segment audio:  |s0 ............................ s0+n|  n expected first, real at its end

`estimate` gives the times before the segment's audio (its expected length: core/prompt.py
expected_audio_seconds of the text the model speaks), `final` once its audio has ended (its
real length, which only ever covers audio that was sent). Tags take audio time but get no
timing; a segment of only tags or whitespace has no words and gets no timings.
"""

from __future__ import annotations

from dataclasses import dataclass

from orpheus_svc.core.prompt import expected_audio_seconds
from orpheus_svc.core.word_timing import Word, place_words, split_words, word_weights


@dataclass(frozen=True, slots=True)
class WordTime:
    """One word of the call: session_text[char_start:char_end] == text; its audio is
    [start_sample, end_sample) at the output rate; `final`: scaled to the segment's real
    length (its audio ended) rather than its expected one."""

    text: str
    char_start: int
    char_end: int
    start_sample: int
    end_sample: int
    final: bool


class SegmentWords:
    """The words of one segment, split and weighed once (`estimate`, then `final`).

    `text` is the segment as the client sent it (Cut.text) and `text_start` its offset in
    the session's text; `spoken` the text the model gets (normalised or not), which only
    sets the expected length; `sample_rate` the output rate."""

    __slots__ = ("_words", "_weights", "_text_start", "_spoken", "_rate", "_start_sample",
                 "_estimate")

    def __init__(self, text: str, text_start: int, spoken: str, language: str,
                 sample_rate: int) -> None:
        self._words: list[Word] = split_words(text)
        self._weights = word_weights(self._words, language) if self._words else []
        self._text_start = text_start
        self._spoken = spoken
        self._rate = sample_rate
        self._start_sample = 0
        self._estimate: list[WordTime] = []

    def estimate(self, start_sample: int) -> list[WordTime]:
        """The first times, for a segment whose audio starts at `start_sample`: scaled to its
        expected length; [] when it has no words."""
        self._start_sample = start_sample
        expected = round(expected_audio_seconds(self._spoken) * self._rate)
        self._estimate = self._place(expected, final=False)
        return self._estimate

    def final(self, num_samples: int) -> list[WordTime]:
        """The times scaled to the segment's real length `num_samples` (after estimate), or []
        when none moved (or it has no words): the estimate stands."""
        placed = self._place(num_samples, final=True)
        moved = any((a.start_sample, a.end_sample) != (b.start_sample, b.end_sample)
                    for a, b in zip(placed, self._estimate))
        return placed if moved else []

    def _place(self, samples: int, final: bool) -> list[WordTime]:
        base = self._text_start
        return [WordTime(t.word.text, base + t.word.start, base + t.word.end,
                         t.start_sample, t.end_sample, final)
                for t in place_words(self._words, self._weights, self._start_sample, samples,
                                     final, sample_rate=self._rate)]
