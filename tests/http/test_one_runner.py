"""Both edges run their calls through one runner (server/calls.py SessionCall) and one
validation (server/settings.py): a refusal has the same words on gRPC, HTTP and the
WebSocket, and the field it names, not its words, is the HTTP error's `param`."""

import json

import grpc
import httpx
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.sync.client import connect

from orpheus_svc.core.voices import VoiceRegistry
from orpheus_svc.server.calls import SessionCall

SPEECH = {"model": "tts-1", "input": "Hi.", "voice": "tara", "response_format": "pcm",
          "seed": 3}
WORDS = "no such speaker here"  # no "voice" in it: nothing to find by searching the text


def ws_url(server):
    return server.http.replace("http://", "ws://") + "/v1/audio/speech/stream"


def ws_refusal(server, config):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "config", **config}))
        return json.loads(ws.recv(timeout=30))


def test_the_json_errors_param_is_the_refusals_field_not_its_words(server, monkeypatch):
    monkeypatch.setattr(VoiceRegistry, "unknown_message", lambda self, name: WORDS)
    r = httpx.post(f"{server.http}/v1/audio/speech", json={**SPEECH, "voice": "alloy"},
                   timeout=60)
    assert r.status_code == 400
    assert r.json()["error"] == {"message": WORDS, "type": "invalid_request_error",
                                 "param": "voice", "code": "invalid_argument"}
    r = httpx.post(f"{server.http}/v1/audio/speech", json={**SPEECH, "seed": -1}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed"


def test_a_refusal_has_the_same_words_on_every_edge(server):
    stub = tts_pb2_grpc.TTSServiceStub(server.channel)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="alloy"), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    words = err.value.details()
    assert words.startswith("unknown voice 'alloy'")
    http = httpx.post(f"{server.http}/v1/audio/speech", json={**SPEECH, "voice": "alloy"},
                      timeout=60).json()["error"]
    assert (http["message"], http["param"]) == (words, "voice")
    assert ws_refusal(server, {"voice": "alloy"}) == {
        "type": "error", "code": "INVALID_ARGUMENT", "message": words}


def test_every_edge_runs_its_calls_through_the_one_runner(server, monkeypatch):
    rpcs = []
    build = SessionCall.__init__

    def spy(self, state, call, settings, *origin):
        rpcs.append(call.rpc)
        build(self, state, call, settings, *origin)

    monkeypatch.setattr(SessionCall, "__init__", spy)
    stub = tts_pb2_grpc.TTSServiceStub(server.channel)
    with pytest.raises(grpc.RpcError):  # refused inside the runner: it checks the settings
        list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="alloy"), timeout=30))
    config = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="alloy"))
    with pytest.raises(grpc.RpcError):
        list(stub.StreamingSynthesize(iter([config]), timeout=30))
    assert ws_refusal(server, {"voice": "alloy"})["code"] == "INVALID_ARGUMENT"
    # the speech route refuses bad settings before it opens a call: a good one runs
    r = httpx.post(f"{server.http}/v1/audio/speech", json={**SPEECH, "stream": False},
                   timeout=120)
    assert r.status_code == 200 and r.content
    assert rpcs == ["Synthesize", "StreamingSynthesize", "http.ws", "http.speech"]
