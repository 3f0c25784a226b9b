"""Voices come from the model: a demo checkpoint that ships a French voices.json serves its
voices and refuses the English ones; names match in any case (real server on a port)."""

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_svc.core.voices import registry_from_dict
from orpheus_svc.models.demo import write_demo_model

from .rpc import check_stream_invariants, requests
from .server_proc import ServerProcess

FRENCH = registry_from_dict({"language": "fr", "default": "pierre",
                             "voices": ["pierre", "amelie", "marie"]}, "test")


@pytest.fixture(scope="module")
def french(tmp_path_factory):
    model = write_demo_model(tmp_path_factory.mktemp("fr") / "model", voices=FRENCH)
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), f"model.path={model}",
                        "engine.max_sessions=4", "engine.max_batch_size=4", name="french")
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def _synthesize(stub, voice, text="Bonjour."):
    return list(stub.Synthesize(pb.SynthesizeRequest(
        text=text, voice=voice, sampling=pb.SamplingOptions(seed=7))))


def test_french_checkpoint_lists_its_own_voices(french):
    resp = tts_pb2_grpc.TTSServiceStub(french.channel).ListVoices(pb.ListVoicesRequest())
    assert [(v.name, v.language) for v in resp.voices] == [
        ("pierre", "fr"), ("amelie", "fr"), ("marie", "fr")]
    assert [v.name for v in resp.voices if v.is_default] == ["pierre"]


@pytest.mark.parametrize("voice", ["pierre", "PIERRE", ""])
def test_french_checkpoint_serves_pierre_in_any_case_and_by_default(french, voice):
    resolved = '"voice": "pierre"'  # the session log names the voice the prompt got
    before = french.logs().count(resolved)
    responses = _synthesize(tts_pb2_grpc.TTSServiceStub(french.channel), voice)
    segments = check_stream_invariants(responses)
    assert len(segments) == 1 and segments[0]["samples"] > 0
    assert french.logs().count(resolved) == before + 1  # the model's own spelling


def test_french_checkpoint_refuses_tara_and_lists_its_voices(french):
    stub = tts_pb2_grpc.TTSServiceStub(french.channel)
    for call in (lambda: stub.Synthesize(pb.SynthesizeRequest(text="Hello.", voice="tara")),
                 lambda: stub.StreamingSynthesize(requests(["Hello."], voice="tara"))):
        with pytest.raises(grpc.RpcError) as err:
            list(call())
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "unknown voice 'tara'; known voices: pierre, amelie, marie"
    # the refusal failed only itself: the server still speaks
    assert check_stream_invariants(_synthesize(stub, "marie"))


def test_english_demo_accepts_capitalised_tara(stub):
    segments = check_stream_invariants(list(stub.StreamingSynthesize(
        requests(["Hello there."], voice="Tara", sampling=pb.SamplingOptions(seed=3)))))
    assert segments and all(s["samples"] > 0 for s in segments)
