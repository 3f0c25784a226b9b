"""A reference voice (model.reference_voices: a clip and its transcript, docs/voices.md) is
listed as one and spoken by name on every edge: gRPC Synthesize and StreamingSynthesize, the
HTTP speech route and the WebSocket. The engine receives build_reference_prompt's ids, and a seed gives
byte-identical PCM twice, with the prefix pool and without it. The real server on the demo
model, with a tiny random SNAC and a clip of real speech (espeak-ng's, shipped)."""

import json
from pathlib import Path

import httpx
import pytest
from orpheus_tts_client import Client
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.sync.client import connect

from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, write_random_snac
from orpheus_svc.core.reference import build_reference_prompt, reference_prefix
from orpheus_svc.runtime import FrontRuntime

from .inproc import InProcessServer

TINY = {**SNAC_24KHZ_CONFIG, "encoder_dim": 4, "decoder_dim": 64}


# real speech: espeak-ng (Debian's 1.51, en-us, 165 words a minute) saying its transcript,
# 3.1 s, as 16 kHz FLAC (resampled to 24 kHz like any clip)
SPEECH = Path(__file__).parents[1] / "audio" / "espeak-reference.flac"
SPEECH_TRANSCRIPT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    snac = write_random_snac(root / "snac", seed=3, config=TINY)
    return str(snac), str(SPEECH)


def _ref_server(files, **overrides) -> InProcessServer:
    snac, clip = files
    return InProcessServer(**{
        "engine.max_sessions": 4, "engine.max_batch_size": 4, "engine.max_seq_len": 768,
        "model.snac": snac, **overrides,
        "model.reference_voices": [{"name": "clone", "clip": clip,
                                    "transcript": SPEECH_TRANSCRIPT}]}).start()


@pytest.fixture(scope="module")
def ref_server(ref_files):
    srv = _ref_server(ref_files)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def opened(monkeypatch):
    seen = []
    real_open = FrontRuntime.open

    def spy(self, request, *args, **kwargs):
        seen.append(request)
        return real_open(self, request, *args, **kwargs)

    monkeypatch.setattr(FrontRuntime, "open", spy)
    return seen


def test_list_voices_says_which_voices_are_reference_voices(ref_server):
    stub = tts_pb2_grpc.TTSServiceStub(ref_server.channel)
    voices = {v.name: v.reference for v in stub.ListVoices(pb.ListVoicesRequest(), timeout=30).voices}
    assert voices["clone"] is True and voices["tara"] is False
    http = httpx.get(f"{ref_server.http}/v1/audio/voices", timeout=30).json()
    assert {v["name"]: v["reference"] for v in http["data"]} == voices
    with Client(ref_server.addr) as tts:  # the Python client's Voice says it too
        assert {v.name: v.reference for v in tts.list_voices().voices} == voices


def _pcm(replies) -> bytes:
    return b"".join(r.audio.audio for r in replies if r.HasField("audio"))


def test_every_edge_speaks_a_reference_voice_by_name(ref_server, opened):
    runtime = ref_server.server.state.runtime
    ref = runtime.references["clone"]
    stub = tts_pb2_grpc.TTSServiceStub(ref_server.channel)
    replies = list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="clone"), timeout=120))
    assert replies[-1].summary.audio_ms > 0 and _pcm(replies)
    config = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="Clone"))
    text = pb.StreamingSynthesizeRequest(text="Hello.")
    assert list(stub.StreamingSynthesize(iter([config, text]), timeout=120))[-1].summary.audio_ms
    r = httpx.post(f"{ref_server.http}/v1/audio/speech", timeout=120,
                   json={"model": "tts-1", "input": "Hi.", "voice": "clone",
                         "response_format": "pcm"})
    assert r.status_code == 200 and r.content
    ws_url = ref_server.http.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url) as ws:
        ws.send(json.dumps({"type": "config", "voice": "clone", "encoding": "pcm16"}))
        ws.send(json.dumps({"type": "text", "text": "Yes."}))
        ws.send(json.dumps({"type": "end"}))
        assert sum(len(m) for m in ws if isinstance(m, bytes)) > 0
    # the engine got the reference layout, token for token, for each edge's text
    assert [req.prompt_ids for req in opened] == [
        tuple(build_reference_prompt(runtime.encode, ref, t))
        for t in ("Hi.", "Hello.", "Hi.", "Yes.")]
    assert {req.adapter for req in opened} == {-1}  # the base model speaks it
    # each names its prefix, which the engine's pool holds from start-up
    prefix = reference_prefix(runtime.encode, ref)
    assert {req.prefix_len for req in opened} == {len(prefix)}
    assert runtime.engine.backend.holds_prefix(tuple(prefix))
    # a base voice keeps its own prompt
    list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="tara"), timeout=120))
    assert opened[-1].prompt_ids[:len(ref.audio_token_ids)] != opened[0].prompt_ids[:len(ref.audio_token_ids)]
    assert len(opened[-1].prompt_ids) < 20


def test_the_same_seed_gives_byte_identical_pcm(ref_server):
    stub = tts_pb2_grpc.TTSServiceStub(ref_server.channel)
    request = pb.SynthesizeRequest(text="Hi.", voice="clone",
                                   sampling=pb.SamplingOptions(seed=11))
    first = _pcm(stub.Synthesize(request, timeout=120))
    second = _pcm(stub.Synthesize(request, timeout=120))
    assert first and first == second
    other = _pcm(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="clone",
                                                      sampling=pb.SamplingOptions(seed=12)),
                                 timeout=120))
    assert other != first  # the seed, not a constant output, makes them equal


def test_a_seed_gives_the_same_pcm_with_the_prefix_pool_and_without(ref_server, ref_files):
    # the pool's prefix is computed exactly as a seeded step computes it in its slot
    # (engine/model/prefix_pool.py): the first session, a later one and a server with the
    # pool off (engine.prefix_pool_mb 0) give the same bytes
    request = pb.SynthesizeRequest(text="Hi there.", voice="clone",
                                   sampling=pb.SamplingOptions(seed=21))
    stub = tts_pb2_grpc.TTSServiceStub(ref_server.channel)
    pooled = _pcm(stub.Synthesize(request, timeout=120))
    off = _ref_server(ref_files, **{"engine.prefix_pool_mb": 0})
    try:
        assert not off.server.state.runtime.engine.capabilities.prefix_pool_tokens
        unpooled = _pcm(tts_pb2_grpc.TTSServiceStub(off.channel).Synthesize(request,
                                                                            timeout=120))
    finally:
        off.stop()
    assert pooled and unpooled == pooled
