"""Word timings through the public API on the demo model: opt-in, every word once and in order,
offsets into the client's own text, times inside each segment's audio; off, the responses
are byte for byte the ones without the option."""

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb, tts_pb2_grpc

from .rpc import check_stream_invariants

SEED = pb.SamplingOptions(seed=7)
FRAGMENTS = ["  Hi, I paid $3", ".50. <laugh> ", "<sigh>\n", "Bye"]
TEXT = "".join(FRAGMENTS)
WORDS = ["Hi,", "I", "paid", "$3.50.", "Bye"]


def _stream(stub, word_timestamps):
    def reqs():
        yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(
            voice="tara", sampling=SEED, normalize_text=True, word_timestamps=word_timestamps))
        for f in FRAGMENTS:
            yield pb.StreamingSynthesizeRequest(text=f)
    return list(stub.StreamingSynthesize(reqs(), timeout=120))


@pytest.fixture(scope="module")
def timed(server):
    """One streamed call with word_timestamps on, shared by the tests below."""
    return _stream(tts_pb2_grpc.TTSServiceStub(server.channel), True)


def _without_words(responses):
    return [r for r in responses if r.WhichOneof("response") != "word_timings"]


def _wire(responses):
    """The call's audio bytes joined, and every other message but the summary as bytes (how
    the audio is cut into chunks and the summary's wall-clock figures vary run to run)."""
    audio = b"".join(r.audio.audio for r in responses if r.WhichOneof("response") == "audio")
    return audio, [r.SerializeToString() for r in responses
                   if r.WhichOneof("response") not in ("audio", "summary")]


def test_streamed_words_slice_the_client_text_and_stay_in_their_segments(timed):
    on = timed
    segments = check_stream_invariants(_without_words(on))
    finals: dict[int, list] = {}
    estimates: dict[int, list] = {}
    audio_seen = False
    for r in on:
        kind = r.WhichOneof("response")
        if kind == "segment_start":
            audio_seen = False
        elif kind == "audio":
            audio_seen = True
        elif kind == "word_timings":
            wt = r.word_timings
            assert all(w.final == wt.final for w in wt.words)
            if wt.final:
                finals[wt.segment_index] = list(wt.words)
            else:
                assert not audio_seen  # estimates come before the segment's first audio
                estimates[wt.segment_index] = list(wt.words)
    # the final times where they moved, the estimates where they did not
    words = [w for i in sorted(estimates) for w in finals.get(i, estimates[i])]
    assert [w.text for w in words] == WORDS
    assert [TEXT[w.char_start:w.char_end] for w in words] == WORDS
    starts = [w.start_sample for w in words]
    assert starts == sorted(starts)
    for i, seg in enumerate(segments):
        times = finals.get(i, estimates.get(i))
        if times is None:  # the "<laugh> <sigh>" segment has no words
            continue
        lo, hi = seg["start"], seg["start"] + seg["samples"]
        assert all(lo <= w.start_sample <= w.end_sample <= hi for w in times)
        assert times[-1].end_sample == hi


def test_with_the_option_off_the_responses_are_the_same_bytes(stub, timed):
    off = _stream(stub, False)
    assert "word_timings" not in [r.WhichOneof("response") for r in off]
    assert _wire(off) == _wire(_without_words(timed))


def test_synthesize_carries_them_too_and_a_text_of_tags_has_none(stub):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(
        text="One two. <laugh>", voice="tara", word_timestamps=True), timeout=120))
    timed = [r.word_timings for r in responses if r.WhichOneof("response") == "word_timings"]
    assert {t.segment_index for t in timed} == {0}
    assert [w.text for w in timed[-1].words] == ["One", "two."]
