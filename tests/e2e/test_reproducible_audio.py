"""A seed reproduces the audio (issue 29 item 2): two Synthesize calls with one seed return
byte-identical PCM, on the demo model with its codec as served (SNAC's noise on), through
the public API (tests/audio/test_codec.py shows another seed draws other noise)."""

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

TEXT = "Hi there. Bye now."  # two segments: seeds 9 and 10


def _pcm(stub, seed):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(
        text=TEXT, voice="tara", sampling=pb.SamplingOptions(seed=seed)), timeout=120))
    assert responses[-1].WhichOneof("response") == "summary"
    return b"".join(r.audio.audio for r in responses if r.WhichOneof("response") == "audio")


def test_one_seed_gives_byte_identical_pcm(stub):
    first = _pcm(stub, 9)
    assert len(first) > 0 and first == _pcm(stub, 9)
