"""Every gRPC encoding decoded by ffmpeg, against the PCM16 of the same seeded request."""

import numpy as np
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .decode import ffmpeg_decode, snr_db

TEXT = "Hello there, how are you today?"


def synthesize(stub, encoding, rate, text=TEXT, seed=1234):
    """The audio bytes and the sample count of one Synthesize call."""
    responses = list(stub.Synthesize(pb.SynthesizeRequest(
        text=text, voice="tara", audio_format=pb.AudioFormat(encoding=encoding, sample_rate_hz=rate),
        sampling=pb.SamplingOptions(seed=seed))))
    chunks = [r.audio for r in responses if r.WhichOneof("response") == "audio"]
    assert responses[-1].WhichOneof("response") == "summary"
    return b"".join(c.audio for c in chunks), responses[-1].summary.num_samples


def reference(stub, rate):
    data, n = synthesize(stub, pb.AUDIO_ENCODING_PCM16, rate)
    assert len(data) == 2 * n
    return np.frombuffer(data, dtype="<i2").astype(np.float64) / 32768.0


@pytest.mark.parametrize("encoding,name", [(pb.AUDIO_ENCODING_MULAW, "mulaw")])
def test_g711_of_a_real_request_decodes_with_ffmpeg_at_g711_snr(stub, encoding, name):
    want = reference(stub, 8000)
    data, n = synthesize(stub, encoding, 8000)
    got = ffmpeg_decode(data, name, 8000)
    assert len(data) == n == len(want)  # one byte per sample, the same length as PCM16
    assert len(got) == len(want)
    # G.711 keeps about 38 dB on speech-level audio; the shipped encoder gave -6 dB here
    assert snr_db(got, want) > 30
