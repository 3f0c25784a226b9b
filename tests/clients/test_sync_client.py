"""orpheus_tts_client.Client against the fake server."""

import grpc
import pytest

from orpheus_tts_client import (
    FLUSH, AudioChunk, Client, Encoding, SegmentEnd, SegmentStart, Summary, TTSError,
)

from .fake_server import CHUNKS_PER_SEGMENT, VOICES, chunk_pcm, chunk_samples


def check_order(events):
    """Summary last; every chunk inside its segment; sequence/offsets contiguous."""
    assert isinstance(events[-1], Summary)
    assert sum(isinstance(e, Summary) for e in events) == 1
    seq = offset = 0
    current = None
    for ev in events[:-1]:
        if isinstance(ev, SegmentStart):
            assert current is None and ev.sample_offset == offset
            current = ev.segment_index
        elif isinstance(ev, AudioChunk):
            assert ev.segment_index == current
            assert (ev.sequence_number, ev.sample_offset) == (seq, offset)
            assert len(ev.audio) == 2 * ev.num_samples
            seq, offset = seq + 1, offset + ev.num_samples
        elif isinstance(ev, SegmentEnd):
            assert ev.segment_index == current
            current = None
    assert events[-1].num_samples == offset


def test_stream_sends_fragments_and_flush_in_order_and_yields_typed_events(fake):
    with Client(fake.target) as tts:
        events = list(tts.stream(["Hel", "lo the", "re. How", " are", FLUSH, "Bye", ""],
                                 voice="leo"))
    check_order(events)
    rec = fake.servicer.calls[-1]
    # config first, fragments as sent (the empty one skipped), flush where it was put
    assert rec.kinds == ["config", "text", "text", "text", "text", "flush", "text"]
    assert rec.texts == ["Hel", "lo the", "re. How", " are", "Bye"]
    starts = [e.text for e in events if isinstance(e, SegmentStart)]
    assert starts == ["Hello there.", "How are", "Bye"]  # sentence end, flush, half-close
    chunks = [e for e in events if isinstance(e, AudioChunk)]
    assert len(chunks) == 3 * CHUNKS_PER_SEGMENT
    assert chunks[1].audio == chunk_pcm(1, chunk_samples(24000))
    assert events[-1].num_segments == 3


def test_stream_accepts_a_generator_and_a_plain_string(fake):
    def gen():
        yield "One. "
        yield "Two."

    with Client(fake.target) as tts:
        a = list(tts.stream(gen()))
        b = list(tts.stream("Just this."))
    assert [e.text for e in a if isinstance(e, SegmentEnd)] == ["One.", "Two."]
    assert [e.text for e in b if isinstance(e, SegmentEnd)] == ["Just this."]


def test_synthesize_collects_pcm_segments_and_summary(fake):
    with Client(fake.target) as tts:
        res = tts.synthesize("Hello there. General Kenobi!", sample_rate=16000)
    n = chunk_samples(16000)
    assert res.sample_rate == 16000 and res.encoding == Encoding.PCM16
    assert res.pcm == b"".join(chunk_pcm(i, n) for i in range(2 * CHUNKS_PER_SEGMENT))
    assert [s.text for s in res.segments] == ["Hello there.", "General Kenobi!"]
    assert res.summary.num_samples == res.num_samples == 2 * CHUNKS_PER_SEGMENT * n
    assert res.client_ttfb_s is not None and res.num_chunks == 2 * CHUNKS_PER_SEGMENT
    assert fake.servicer.calls[-1].method == "Synthesize"


def test_synthesize_stream_collects_a_streaming_session(fake):
    with Client(fake.target) as tts:
        res = tts.synthesize_stream(["A b", "c.", FLUSH], voice="mia")
    assert [s.text for s in res.segments] == ["A bc."]
    assert res.summary.num_segments == 1


def test_unknown_voice_is_invalid_argument_with_the_servers_message(fake):
    with Client(fake.target) as tts:
        with pytest.raises(TTSError) as exc:
            list(tts.stream(["Hi."], voice="nobody"))
        assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "nobody" in exc.value.details and "tara" in exc.value.details
        assert str(exc.value).startswith("INVALID_ARGUMENT: unknown voice")
        with pytest.raises(TTSError) as exc2:
            tts.synthesize("Hi.", voice="nobody")
        assert exc2.value.code_name == "INVALID_ARGUMENT"
        with pytest.raises(TTSError) as exc3:
            tts.synthesize("   ")
        assert exc3.value.details == "text is empty"


def test_an_exception_in_the_text_iterable_reaches_the_caller_and_cancels(fake):
    def broken():
        yield "Hello there. "
        raise RuntimeError("llm died")

    with Client(fake.target) as tts:
        with pytest.raises(RuntimeError, match="llm died"):
            list(tts.stream(broken()))


def test_non_str_items_are_rejected(fake):
    with Client(fake.target) as tts:
        with pytest.raises(TypeError, match="FLUSH"):
            list(tts.stream([b"bytes"]))


def test_unreachable_server_is_unavailable():
    with Client("127.0.0.1:1", timeout=5) as tts:
        with pytest.raises(TTSError) as exc:
            tts.status()
    assert exc.value.code == grpc.StatusCode.UNAVAILABLE


def test_list_voices_status_and_health(fake):
    with Client(fake.target) as tts:
        voices = tts.list_voices()
        status = tts.status()
        health = tts.health()
    assert voices.names == list(VOICES) and voices.default == "tara"
    assert "<laugh>" in voices.emotion_tags
    assert [v.adapter for v in voices.voices][-2:] == ["", "zoe-lora"]  # a LoRA voice's
    assert status.serving and status.backend == "fake" and status.total_slots == 4
    assert health == "SERVING"


def test_breaking_out_of_a_stream_cancels_the_call(fake):
    with Client(fake.target) as tts:
        for ev in tts.stream(iter(["One. Two. Three. "] + ["x"] * 3)):
            if isinstance(ev, AudioChunk):
                break
        # the channel is still usable afterwards
        assert tts.health() == "SERVING"
