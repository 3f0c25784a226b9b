"""StreamSession with word_timestamps: where the WordsOut go and what they hold (fake engine
that answers at once: 4096 samples a segment, far from the expected length, so the final
times always move)."""

import asyncio
import dataclasses

import pytest

from orpheus_svc.config import TextConfig
from orpheus_svc.core.errors import SessionError
from orpheus_svc.core.word_timing import split_words
from orpheus_svc.server.session import (
    AudioOut, FlushIn, SegmentEnded, SegmentStarted, StreamSession, TextIn, WordsOut,
)

from .test_session import OPTS, FakeRuntime

ON = dataclasses.replace(OPTS, word_timestamps=True)


def _run(pieces, settings=ON, runtime=None):
    async def source():
        for p in pieces:
            yield p

    async def go():
        session = StreamSession(runtime or FakeRuntime(), settings, TextConfig())
        return [out async for out in session.run(source())]

    return asyncio.run(asyncio.wait_for(go(), 30))


def _client_text(pieces):
    return "".join(p.text for p in pieces if isinstance(p, TextIn))


PIECES = [TextIn("  Hello the"), TextIn("re, friend. <laugh> "), FlushIn("x"),
          TextIn("How are you"), TextIn(" today?\nFine.")]


def test_estimates_precede_each_segments_audio_and_finals_precede_its_end():
    outs = _run(PIECES)
    kinds = [type(o).__name__ for o in outs if not isinstance(o, AudioOut)]
    # the tag-only segment "<laugh>" gets no WordsOut at all
    assert kinds == ["SegmentStarted", "WordsOut", "WordsOut", "SegmentEnded",
                     "SegmentStarted", "SegmentEnded",
                     "SegmentStarted", "WordsOut", "WordsOut", "SegmentEnded",
                     "SegmentStarted", "WordsOut", "WordsOut", "SegmentEnded", "Summary"]
    for i, o in enumerate(outs):
        if isinstance(o, WordsOut) and not o.final:
            assert isinstance(outs[i - 1], SegmentStarted)
            assert isinstance(outs[i + 1], AudioOut)
        if isinstance(o, WordsOut) and o.final:
            assert isinstance(outs[i + 1], SegmentEnded)


def test_every_word_appears_once_in_order_and_within_its_segments_audio():
    outs = _run(PIECES)
    text = _client_text(PIECES)
    finals = [w for o in outs if isinstance(o, WordsOut) and o.final for w in o.words]
    expected = [w.text for w in split_words(text) if not w.is_tag]
    assert [w.text for w in finals] == expected
    assert [text[w.char_start:w.char_end] for w in finals] == expected
    starts = [w.start_sample for w in finals]
    assert starts == sorted(starts)
    ends = {o.segment_index: o for o in outs if isinstance(o, SegmentEnded)}
    begins = {o.segment_index: o for o in outs if isinstance(o, SegmentStarted)}
    for o in outs:
        if isinstance(o, WordsOut) and o.final:
            lo = begins[o.segment_index].sample_offset
            hi = lo + ends[o.segment_index].num_samples
            assert all(lo <= w.start_sample <= w.end_sample <= hi for w in o.words)
            assert o.words[-1].end_sample == hi


def test_with_the_option_off_the_outputs_are_the_same_less_the_words():
    on, off = _run(PIECES), _run(PIECES, settings=OPTS)
    assert not any(isinstance(o, WordsOut) for o in off)
    strip = [o for o in on if not isinstance(o, WordsOut)]
    # the summary holds wall-clock times
    assert strip[:-1] == off[:-1]
    assert dataclasses.replace(strip[-1], session_id="", time_to_first_audio_ms=0,
                               wall_ms=0) == dataclasses.replace(
        off[-1], session_id="", time_to_first_audio_ms=0, wall_ms=0)


def test_normalised_text_keeps_offsets_in_the_clients_text():
    pieces = [TextIn("It costs $3.50 on 5/6.")]
    outs = _run(pieces, settings=dataclasses.replace(ON, normalize_text=True))
    words = [w for o in outs if isinstance(o, WordsOut) and not o.final for w in o.words]
    assert [(w.text, w.char_start, w.char_end) for w in words] == [
        ("It", 0, 2), ("costs", 3, 8), ("$3.50", 9, 14), ("on", 15, 17), ("5/6.", 18, 22)]


def test_a_failed_segment_gets_no_final_times_past_the_audio_sent():
    pieces = [TextIn("One two. Three four. Five six.")]
    runtime = FakeRuntime(ends={1: "error"})
    got = []

    async def source():
        for p in pieces:
            yield p

    async def go():
        # one segment in flight: "One two." is delivered before segment 1 fails
        session = StreamSession(runtime, ON, TextConfig(max_segments_in_flight=1))
        async for out in session.run(source()):
            got.append(out)

    with pytest.raises(SessionError):
        asyncio.run(asyncio.wait_for(go(), 30))
    sent = sum(o.num_samples for o in got if isinstance(o, AudioOut))
    finals = [w for o in got if isinstance(o, WordsOut) and o.final for w in o.words]
    assert [w.text for w in finals] == ["One", "two."]
    assert all(w.end_sample <= sent for w in finals)
    assert not any(isinstance(o, WordsOut) and o.segment_index == 1 for o in got)
