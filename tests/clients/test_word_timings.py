"""The Python client's word timings: the option on the wire, the events, what collect keeps,
and how a resumed session moves them (orpheus_tts_client._convert, _resume)."""

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from orpheus_tts_client import AudioChunk, SegmentEnd, SegmentStart, WordTiming, WordTimings
from orpheus_tts_client._convert import (
    ResultBuilder, config_request, event, synthesize_request,
)
from orpheus_tts_client._resume import Continuity


def _timings(index, final, *words):
    return pb.SynthesizeResponse(word_timings=pb.WordTimings(
        segment_index=index, final=final,
        words=[pb.WordTiming(text=t, char_start=a, char_end=b, start_sample=s, end_sample=e,
                             final=final) for t, a, b, s, e in words]))


def test_the_option_is_sent_only_when_asked():
    off = config_request("tara", "pcm16", None, None)
    assert not off.config.word_timestamps
    assert off.SerializeToString() == pb.StreamingSynthesizeRequest(
        config=pb.SynthesisConfig(voice="tara", audio_format=pb.AudioFormat(
            encoding=pb.AUDIO_ENCODING_PCM16))).SerializeToString()
    assert config_request("tara", "pcm16", None, None, True).config.word_timestamps
    assert synthesize_request("Hi.", "tara", "pcm16", None, None, True).word_timestamps
    assert not synthesize_request("Hi.", "tara", "pcm16", None, None).word_timestamps


def test_a_word_timings_message_becomes_a_word_timings_event():
    ev = event(_timings(2, True, ("Hi,", 4, 7, 100, 900), ("you.", 8, 12, 900, 2000)))
    assert ev == WordTimings(2, (WordTiming("Hi,", 4, 7, 100, 900, True),
                                 WordTiming("you.", 8, 12, 900, 2000, True)), True)


def test_collect_keeps_each_segments_latest_times_in_order():
    b = ResultBuilder("pcm16", None)
    for msg in (_timings(0, False, ("One", 0, 3, 10, 50)), _timings(0, True, ("One", 0, 3, 10, 40)),
                _timings(1, False, ("Two", 4, 7, 60, 90))):
        b.add(event(msg))
    assert [(w.text, w.end_sample, w.final) for w in b.result().words] == [
        ("One", 40, True), ("Two", 90, False)]


def test_a_resumed_session_moves_its_words_like_its_segments():
    view = Continuity(sample_rate=24000)
    for ev in (SegmentStart(0, "One.", 0, "sentence", 0, 4), AudioChunk(b"", 0, 0, 0, 100),
               SegmentEnd(0, "One.", 100, 7, "stop", "sentence", 0, 4)):
        view.event(ev)
    view.resumed()  # the new call's text starts at the caller's code point 4
    moved = view.event(event(_timings(0, False, ("Two.", 1, 5, 10, 80))))
    assert moved == WordTimings(1, (WordTiming("Two.", 5, 9, 110, 180, False),), False)
