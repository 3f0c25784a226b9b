"""The official `openai` SDK, unmodified, against the HTTP edge of the demo server."""

import base64
import json

import httpx
import numpy as np
import openai
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .decode import aligned_snr_db, audible, ffmpeg_decode, snr_db

TEXT = "Hello there. How are you?"
SEED = 77
_reference = {}


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused", max_retries=0)


def reference_pcm(stub):
    """PCM16 of the same text and seed over gRPC: what every format must decode to."""
    if "pcm" not in _reference:
        responses = list(stub.Synthesize(pb.SynthesizeRequest(
            text=TEXT, voice="tara", sampling=pb.SamplingOptions(seed=SEED))))
        data = b"".join(r.audio.audio for r in responses if r.WhichOneof("response") == "audio")
        _reference["pcm"] = np.frombuffer(data, dtype="<i2").astype(np.float64) / 32768.0
    return _reference["pcm"]


# response_format -> (ffmpeg input name, leading delay a decoder may keep, lowest SNR dB)
FORMATS = {"pcm": ("pcm16", 0, 40.0), "wav": ("wav", 0, 40.0),
           "opus": ("ogg_opus", 0, 5.0), "mp3": ("mp3", 1728, 5.0)}


@pytest.mark.parametrize("response_format", list(FORMATS))
def test_openai_sdk_streams_speech_that_ffmpeg_decodes_to_the_expected_length(
        client, stub, response_format):
    want = reference_pcm(stub)
    chunks = []
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="tara", input=TEXT, response_format=response_format,
            extra_body={"seed": SEED}) as response:
        assert response.status_code == 200
        assert response.headers.get("transfer-encoding") == "chunked"  # streamed, no length
        chunks = list(response.iter_bytes())
    data = b"".join(chunks)
    if response_format == "wav":  # a stream's header is open-ended (test_whole_files.py)
        assert data[4:8] == data[40:44] == b"\xff\xff\xff\xff"
    name, max_delay, min_snr = FORMATS[response_format]
    got = ffmpeg_decode(data, name, 24000)
    if max_delay == 0:
        assert len(got) == len(want)
    else:  # a streamed MP3 keeps LAME's delay and pads its last frame
        assert len(want) <= len(got) <= len(want) + max_delay + 1152
    if min_snr >= 40:  # lossless: as close as two runs of one request (~50 dB)
        assert snr_db(got, want) >= min_snr
    else:
        assert aligned_snr_db(audible(got, 24000), audible(want, 24000), max_delay)[0] >= min_snr


def test_sse_stream_format_sends_openai_speech_events(server, stub):
    want = reference_pcm(stub)
    body = {"model": "tts-1", "input": TEXT, "voice": "tara", "response_format": "pcm",
            "stream_format": "sse", "seed": SEED}
    events = []
    with httpx.stream("POST", f"{server.http}/v1/audio/speech", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] > 0
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 2 * len(want)


def test_models_and_voices(client, server):
    assert "tts-1" in [m.id for m in client.models.list()]
    voices = httpx.get(f"{server.http}/v1/audio/voices").json()
    assert voices["voices"][:2] == ["tara", "leah"] and voices["default"] == "tara"


@pytest.mark.parametrize("kwargs,error,param", [
    (dict(voice="alloy"), openai.BadRequestError, "voice"),
    (dict(speed=1.5), openai.BadRequestError, "speed"),
    (dict(response_format="aac"), openai.BadRequestError, "response_format"),
    (dict(model="whisper-1"), openai.NotFoundError, "model"),
    (dict(input="   "), openai.BadRequestError, "input"),
])
def test_bad_requests_get_openai_errors_with_the_right_status(client, server, kwargs, error, param):
    args = {"model": "tts-1", "voice": "tara", "input": "Hi.", **kwargs}
    with pytest.raises(error) as info:
        client.audio.speech.create(**args)
    assert info.value.body["param"] == param and info.value.body["message"]
    assert info.value.body["type"] == "invalid_request_error"


def test_unknown_voice_message_lists_the_known_voices(client):
    with pytest.raises(openai.BadRequestError, match="known voices: tara, leah"):
        client.audio.speech.create(model="tts-1", voice="alloy", input="Hi.")


def test_malformed_json_is_a_400(server):
    r = httpx.post(f"{server.http}/v1/audio/speech", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
