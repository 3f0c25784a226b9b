"""A voice spoken by a LoRA adapter (docs/lora.md) is listed with its adapter and reached
by name on every edge: gRPC Synthesize and StreamingSynthesize, the HTTP speech route and
the WebSocket. The server is the real one (demo model) with an adapter made by peft."""

import json

import httpx
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.sync.client import connect

from orpheus_svc.runtime import FrontRuntime

from ..engine.lora_fixtures import make_demo_adapter
from .inproc import InProcessServer


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    path = make_demo_adapter(tmp_path_factory.mktemp("adapters") / "nova", voice="nova")
    srv = InProcessServer(**{"engine.max_sessions": 4, "engine.max_batch_size": 4,
                             "engine.max_seq_len": 160,
                             "model.adapters": {"nova-lora": str(path)}}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_list_voices_names_the_adapter(lora_server):
    stub = tts_pb2_grpc.TTSServiceStub(lora_server.channel)
    voices = {v.name: v.adapter for v in stub.ListVoices(pb.ListVoicesRequest(), timeout=30).voices}
    assert voices["nova"] == "nova-lora" and voices["tara"] == ""
    http = httpx.get(f"{lora_server.http}/v1/audio/voices", timeout=30).json()
    assert {v["name"]: v["adapter"] for v in http["data"]}["nova"] == "nova-lora"


def test_every_edge_reaches_an_adapter_voice_by_name(lora_server, monkeypatch):
    opened = []
    real_open = FrontRuntime.open

    def spy(self, request, *args, **kwargs):
        opened.append((request.session_id.split(":")[0], request.adapter))
        return real_open(self, request, *args, **kwargs)

    monkeypatch.setattr(FrontRuntime, "open", spy)
    stub = tts_pb2_grpc.TTSServiceStub(lora_server.channel)
    replies = list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="nova"), timeout=120))
    assert replies[-1].HasField("summary") and replies[-1].summary.audio_ms > 0
    config = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="Nova"))
    text = pb.StreamingSynthesizeRequest(text="Hello.")
    assert list(stub.StreamingSynthesize(iter([config, text]), timeout=120))[-1].summary.audio_ms
    r = httpx.post(f"{lora_server.http}/v1/audio/speech", timeout=120,
                   json={"model": "tts-1", "input": "Hi.", "voice": "nova",
                         "response_format": "pcm"})
    assert r.status_code == 200 and r.content
    ws_url = lora_server.http.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url) as ws:
        ws.send(json.dumps({"type": "config", "voice": "nova", "encoding": "pcm16"}))
        ws.send(json.dumps({"type": "text", "text": "Hi."}))
        ws.send(json.dumps({"type": "end"}))
        audio = sum(len(m) for m in ws if isinstance(m, bytes))
    assert audio > 0
    assert len(opened) >= 4 and {a for _, a in opened} == {0}
    # the base model's voices stay on the base model
    list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="tara"), timeout=120))
    assert opened[-1][1] == -1
