"""StreamingSynthesize and Synthesize over a real port with the demo model."""

import threading

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import FLUSH, check_stream_invariants, requests, wait_status
from .server_proc import ServerProcess

TEXT = "Hello there. How are you today? Fine"


def test_single_character_fragments_flush_and_half_close(stub):
    frags = list(TEXT[:20]) + [FLUSH] + list(TEXT[20:])
    responses = list(stub.StreamingSynthesize(requests(frags)))
    segments = check_stream_invariants(responses)
    # the flush cut "Hello there. How are" after the sentence end; half-close took the rest
    assert [s["text"] for s in segments] == ["Hello there.", "How are", "you today?", "Fine"]
    for seg in segments:  # 24 kHz PCM16: whole frames of 2048 samples
        assert seg["samples"] > 0 and seg["samples"] % 2048 == 0
        assert seg["reason"] in ("stop", "length") and seg["tokens"] % 7 in (0, 1)
    assert responses[-1].summary.time_to_first_audio_ms > 0


def test_mid_word_fragments_give_the_same_segments_as_whole_text(stub):
    a = check_stream_invariants(list(stub.StreamingSynthesize(requests(["Hel", "lo the", "re. Ho", "w are you?"]))))
    b = check_stream_invariants(list(stub.StreamingSynthesize(requests(["Hello there. How are you?"]))))
    assert [s["text"] for s in a] == [s["text"] for s in b] == ["Hello there.", "How are you?"]


def test_synthesize_streams_segments_and_summary(stub):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(text="One. Two.", voice="leo")))
    segments = check_stream_invariants(responses)
    assert [s["text"] for s in segments] == ["One.", "Two."]


def test_synthesize_wav_header_first(stub):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(
        text="Hi.", audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_WAV, sample_rate_hz=16000))))
    audio = [r.audio for r in responses if r.WhichOneof("response") == "audio"]
    first = audio[0].audio
    assert first[:4] == b"RIFF" and first[8:12] == b"WAVE"
    assert int.from_bytes(first[24:28], "little") == 16000
    total = sum(a.num_samples for a in audio)
    assert sum(len(a.audio) for a in audio) == 44 + 2 * total
    assert responses[-1].summary.num_samples == total


@pytest.mark.parametrize("encoding,rate,bytes_per_sample", [
    (pb.AUDIO_ENCODING_PCM16, 8000, 2), (pb.AUDIO_ENCODING_PCM16, 16000, 2),
    (pb.AUDIO_ENCODING_PCM16, 48000, 2), (pb.AUDIO_ENCODING_MULAW, 8000, 1),
    (pb.AUDIO_ENCODING_MULAW, 0, 1)])
def test_resampled_and_mulaw_output_lengths(stub, encoding, rate, bytes_per_sample):
    fmt = pb.AudioFormat(encoding=encoding, sample_rate_hz=rate)
    responses = list(stub.StreamingSynthesize(requests(["Hi there."], audio_format=fmt)))
    audio = [r.audio for r in responses if r.WhichOneof("response") == "audio"]
    total = sum(a.num_samples for a in audio)
    assert sum(len(a.audio) for a in audio) == bytes_per_sample * total
    native = sum(r.segment_end.num_samples for r in responses if r.WhichOneof("response") == "segment_end")
    out_rate = rate or 8000
    frames24k = round(total * 24000 / out_rate)
    assert frames24k % 2048 in (0, 1, 2047)  # resampling keeps the length, to the sample
    assert native == total


def test_list_voices(stub):
    resp = stub.ListVoices(pb.ListVoicesRequest())
    names = [v.name for v in resp.voices]
    assert names == ["tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"]
    assert [v.name for v in resp.voices if v.is_default] == ["tara"]
    assert "<laugh>" in resp.emotion_tags


@pytest.fixture(scope="module")
def short_stub(tmp_path_factory):
    """A server of its own whose slots of 128 tokens cut each segment to about a second of
    audio: 32 sessions at once cost the codec a quarter of what the shared server's do."""
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), "engine.max_sessions=32",
                        "engine.max_batch_size=32", "engine.max_seq_len=128", name="short")
    try:
        srv.wait_serving()
        yield tts_pb2_grpc.TTSServiceStub(srv.channel)
    finally:
        srv.stop()


def test_32_concurrent_streams_finish(short_stub):
    stub = short_stub
    results, errors = [], []

    def one(i):
        try:
            responses = list(stub.StreamingSynthesize(requests([f"Stream {i}.", " Bye."])))
            results.append(check_stream_invariants(responses))
        except Exception as exc:  # collected: asserted below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and len(results) == 32
    assert all(len(r) == 2 for r in results)


def test_cancel_mid_stream_frees_the_slot(stub):
    total = stub.GetStatus(pb.GetStatusRequest()).total_slots
    wait_status(stub, lambda s: s.free_slots == total)
    call = stub.StreamingSynthesize(requests(["A rather long sentence that keeps the model busy. " * 8]))
    for r in call:
        if r.WhichOneof("response") == "audio":
            break
    st = stub.GetStatus(pb.GetStatusRequest())
    assert st.free_slots < total and st.active_sessions >= 1
    call.cancel()
    st = wait_status(stub, lambda s: s.free_slots == total and s.active_generations == 0)
    assert st.active_sessions == 0


def test_deadline_frees_the_slot(stub):
    total = stub.GetStatus(pb.GetStatusRequest()).total_slots
    with pytest.raises(grpc.RpcError) as err:
        for _ in stub.StreamingSynthesize(requests(["Long text that will not finish in time. " * 10]),
                                          timeout=0.5):
            pass
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_status(stub, lambda s: s.free_slots == total and s.active_sessions == 0)


def test_status_reports_slots_and_totals(stub):
    st = stub.GetStatus(pb.GetStatusRequest())
    assert st.serving and st.backend == "torch" and st.model == "demo"
    assert st.total_slots == 32 and st.max_batch_size == 32
    assert st.tokens_total > 0 and st.steps_total > 0 and st.sessions_total >= 0
