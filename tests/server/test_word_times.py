"""server/word_times.py: a segment's words placed in the session's text and audio."""

from orpheus_svc.core.prompt import expected_audio_seconds
from orpheus_svc.server.word_times import SegmentWords

RATE = 24_000


def _segment(session_text: str, text: str, spoken: str | None = None, language="en",
             rate=RATE) -> SegmentWords:
    return SegmentWords(text, session_text.index(text), spoken or text, language, rate)


def test_offsets_slice_the_session_text_back_into_its_words():
    session = "Hello there. I paid $3.50, <laugh> twice."
    seg = _segment(session, "I paid $3.50, <laugh> twice.", "I paid three dollars and fifty "
                   "cents, <laugh> twice.")
    words = seg.estimate(1000)
    assert [w.text for w in words] == ["I", "paid", "$3.50,", "twice."]  # the tag is no word
    assert [session[w.char_start:w.char_end] for w in words] == [w.text for w in words]


def test_the_estimate_spans_the_expected_length_from_the_segment_start():
    spoken = "I paid three dollars and fifty cents."
    seg = _segment("I paid $3.50.", "I paid $3.50.", spoken, rate=48_000)
    words = seg.estimate(5000)
    expected = round(expected_audio_seconds(spoken) * 48_000)
    assert words[0].start_sample > 5000  # after the leading silence
    assert words[-1].end_sample == 5000 + expected
    assert all(a.end_sample == b.start_sample for a, b in zip(words, words[1:]))
    assert all(w.start_sample <= w.end_sample and not w.final for w in words)


def test_final_times_end_with_the_segment_audio_and_stay_inside_it():
    seg = _segment("One two three four.", "One two three four.")
    seg.estimate(100)
    final = seg.final(30_000)
    assert final and all(w.final for w in final)
    assert all(100 <= w.start_sample <= w.end_sample <= 100 + 30_000 for w in final)
    assert final[-1].end_sample == 100 + 30_000
    starts = [w.start_sample for w in final]
    assert starts == sorted(starts)


def test_final_is_empty_when_no_time_moved():
    seg = _segment("One two.", "One two.")
    estimate = seg.estimate(0)
    assert seg.final(estimate[-1].end_sample) == []


def test_only_tags_or_no_words_give_no_timings():
    seg = _segment("<laugh> <sigh>", "<laugh> <sigh>")
    assert seg.estimate(0) == [] and seg.final(24_000) == []


def test_chinese_is_timed_per_character():
    session = "你好。世界"
    words = _segment(session, session, language="zh").estimate(0)
    assert [w.text for w in words] == ["你", "好。", "世", "界"]
    assert [session[w.char_start:w.char_end] for w in words] == [w.text for w in words]


def test_the_grpc_edge_sends_words_out_as_word_timings_in_both_responses():
    from orpheus_tts_client.proto.v1 import tts_pb2 as pb

    from orpheus_svc.server.servicer import _to_proto
    from orpheus_svc.server.session import WordsOut
    from orpheus_svc.server.word_times import WordTime

    out = WordsOut(3, (WordTime("Hi,", 4, 7, 100, 900, True),
                       WordTime("you.", 8, 12, 900, 2000, True)), final=True)
    for cls in (pb.StreamingSynthesizeResponse, pb.SynthesizeResponse):
        msg = _to_proto(out, cls)
        assert msg.WhichOneof("response") == "word_timings"
        t = msg.word_timings
        assert (t.segment_index, t.final) == (3, True)
        assert [(w.text, w.char_start, w.char_end, w.start_sample, w.end_sample, w.final)
                for w in t.words] == [("Hi,", 4, 7, 100, 900, True),
                                      ("you.", 8, 12, 900, 2000, True)]
