"""Every gRPC encoding decoded by ffmpeg, against the PCM16 of the same seeded request."""

import numpy as np
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .decode import aligned_snr_db, audible, ffmpeg_decode, snr_db

TEXT = "Hello there, how are you today?"


def synthesize(stub, encoding, rate, text=TEXT, seed=1234):
    """The audio bytes and the sample count of one Synthesize call."""
    responses = list(stub.Synthesize(pb.SynthesizeRequest(
        text=text, voice="tara", audio_format=pb.AudioFormat(encoding=encoding, sample_rate_hz=rate),
        sampling=pb.SamplingOptions(seed=seed))))
    chunks = [r.audio for r in responses if r.WhichOneof("response") == "audio"]
    assert responses[-1].WhichOneof("response") == "summary"
    return b"".join(c.audio for c in chunks), responses[-1].summary.num_samples


_g711_references = {}


def reference(stub, rate):
    """PCM16 of TEXT with the test seed (one request per rate, shared by the tests)."""
    if rate not in _g711_references:
        data, n = synthesize(stub, pb.AUDIO_ENCODING_PCM16, rate)
        assert len(data) == 2 * n
        _g711_references[rate] = np.frombuffer(data, dtype="<i2").astype(np.float64) / 32768.0
    return _g711_references[rate]


@pytest.mark.parametrize("encoding,name", [(pb.AUDIO_ENCODING_MULAW, "mulaw"),
                                           (pb.AUDIO_ENCODING_ALAW, "alaw")])
def test_g711_of_a_real_request_decodes_with_ffmpeg_at_g711_snr(stub, encoding, name):
    want = reference(stub, 8000)
    data, n = synthesize(stub, encoding, 8000)
    got = ffmpeg_decode(data, name, 8000)
    assert len(data) == n == len(want)  # one byte per sample, the same length as PCM16
    assert len(got) == len(want)
    # G.711 keeps about 38 dB on speech-level audio; the shipped encoder gave -6 dB here
    assert snr_db(got, want) > 30


# (encoding, lowest SNR, leading delay a decoder may keep): Opus in Ogg carries its pre-skip
# and end trim, FLAC is lossless, a streamed MP3 has no LAME header to trim LAME's delay.
# Lossy SNR is waveform SNR over the audible band on the demo's noise-like audio (measured:
# Opus 64k about 7.5 dB, MP3 64k about 8 dB; a sign flip or a misalignment gives <= 0 dB).
COMPRESSED = {
    "ogg_opus": (pb.AUDIO_ENCODING_OGG_OPUS, 5.0, 0),
    "mp3": (pb.AUDIO_ENCODING_MP3, 5.0, 1728),
    "flac": (pb.AUDIO_ENCODING_FLAC, 40.0, 0),
}


TWO_SEGMENTS = "One here. And two."  # one compressed stream across both segments
_references = {}


@pytest.mark.parametrize("name,rate", [("ogg_opus", 24000), ("mp3", 24000), ("flac", 24000),
                                       ("mp3", 16000)])
def test_compressed_stream_of_a_real_request_decodes_with_ffmpeg(stub, name, rate):
    encoding, min_snr, max_delay = COMPRESSED[name]
    text = TWO_SEGMENTS
    if rate not in _references:
        _references[rate] = reference_text(stub, rate, text)
    want = _references[rate]
    responses = list(stub.Synthesize(pb.SynthesizeRequest(
        text=text, voice="tara", audio_format=pb.AudioFormat(encoding=encoding, sample_rate_hz=rate),
        sampling=pb.SamplingOptions(seed=1234))))
    kinds = [r.WhichOneof("response") for r in responses]
    assert kinds.count("segment_end") == 2 and kinds[-1] == "summary"
    chunks = [r.audio for r in responses if r.WhichOneof("response") == "audio"]
    assert sum(c.num_samples for c in chunks) == len(want) == responses[-1].summary.num_samples
    got = ffmpeg_decode(b"".join(c.audio for c in chunks), name, rate)
    assert len(want) <= len(got) <= len(want) + max_delay + 1152  # MP3 pads its last frame
    if max_delay == 0:
        assert len(got) == len(want)
    if name == "flac":  # lossless: as close as two runs of the same request (~50 dB)
        assert snr_db(got, want) >= min_snr
        return
    snr, lag = aligned_snr_db(audible(got, rate), audible(want, rate), max_delay)
    assert snr >= min_snr, (snr, lag)


def reference_text(stub, rate, text):
    data, n = synthesize(stub, pb.AUDIO_ENCODING_PCM16, rate, text=text)
    assert len(data) == 2 * n
    return np.frombuffer(data, dtype="<i2").astype(np.float64) / 32768.0


@pytest.mark.parametrize("encoding", ["alaw", "ogg_opus", "flac"])
def test_python_client_requests_the_new_encodings_by_name(server, encoding):
    from orpheus_tts_client import Client, Sampling

    with Client(server.addr) as client:
        result = client.synthesize("Hi there.", encoding=encoding, sampling=Sampling(seed=5))
    rate = 8000 if encoding == "alaw" else 24000
    assert result.sample_rate == rate
    got = ffmpeg_decode(result.audio, encoding, rate)
    assert len(got) == result.summary.num_samples > 0
    if encoding == "alaw":  # the client's own G.711 expansion agrees with ffmpeg's
        pcm = np.frombuffer(result.pcm, dtype="<i2").astype(np.float64) / 32768.0
        assert np.allclose(pcm, got, atol=1 / 32768)
