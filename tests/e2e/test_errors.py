"""Every bad input gets its status code and an actionable message; the server stays up."""

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .rpc import requests


def _code(call):
    with pytest.raises(grpc.RpcError) as err:
        for _ in call:
            pass
    return err.value.code(), err.value.details()


def test_empty_and_whitespace_text(stub):
    for text in ("", "   \n\t "):
        code, msg = _code(stub.Synthesize(pb.SynthesizeRequest(text=text)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "empty" in msg
    code, msg = _code(stub.StreamingSynthesize(requests(["  ", " "])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no text" in msg


def test_unknown_voice_lists_the_known_ones(stub):
    code, msg = _code(stub.StreamingSynthesize(requests(["Hi."], voice="bob")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "tara" in msg and "zoe" in msg


@pytest.mark.parametrize("fmt,needle", [
    (pb.AudioFormat(sample_rate_hz=44100), "44100"),
    (pb.AudioFormat(encoding=pb.AUDIO_ENCODING_MULAW, sample_rate_hz=16000), "MULAW"),
    (pb.AudioFormat(encoding=pb.AUDIO_ENCODING_WAV), "Synthesize"),
    (pb.AudioFormat(encoding=17), "encoding"),
])
def test_unsupported_rate_or_encoding(stub, fmt, needle):
    code, msg = _code(stub.StreamingSynthesize(requests(["Hi."], audio_format=fmt)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and needle in msg


def test_bad_sampling(stub):
    code, msg = _code(stub.StreamingSynthesize(requests(["Hi."], sampling=pb.SamplingOptions(top_p=0))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "top_p" in msg


def test_text_over_the_limit(stub):
    code, msg = _code(stub.StreamingSynthesize(requests(["word " * 300, "word " * 200])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "2000" in msg
    code, msg = _code(stub.Synthesize(pb.SynthesizeRequest(text="x " * 1500)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_text_chars" in msg


def test_text_before_config_and_second_config(stub):
    code, msg = _code(stub.StreamingSynthesize(requests(["Hi."], config=False)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "first message" in msg
    again = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
    code, msg = _code(stub.StreamingSynthesize(requests(["Hi.", again])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "only be sent once" in msg


def test_control_tokens_in_text_are_spoken_as_text_not_obeyed(stub):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(text="Say <|eot_id|> please.")))
    assert responses[-1].WhichOneof("response") == "summary"


def test_server_still_serves_after_errors(stub):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(text="Still here.")))
    assert responses[-1].WhichOneof("response") == "summary"
