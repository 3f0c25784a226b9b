"""Hostile bodies and frames end in the documented error shape, never a 5xx, a dropped
socket or an error-level traceback (issue 27: each case here failed before it)."""

import json
import time

import grpc
import httpx
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

SPEECH = {"model": "tts-1", "input": "Hi.", "voice": "tara", "response_format": "pcm"}
DEEP = "[" * 5000 + "]" * 5000  # RecursionError in json.loads, under the 64 KiB bound


def post(srv, content, content_type="application/json"):
    headers = {"content-type": content_type} if content_type else {}
    return httpx.post(f"{srv.http}/v1/audio/speech", content=content, headers=headers,
                      timeout=60)


def assert_error_shape(r, status, code):
    assert r.status_code == status, r.text[:200]
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    return error


def speech_with(**fields):
    """SPEECH as JSON text with `fields` spliced in verbatim (raw JSON)."""
    text = json.dumps(SPEECH)[:-1]
    return (text + "".join(f', "{k}": {v}' for k, v in fields.items()) + "}").encode()


@pytest.mark.parametrize("body", [
    DEEP.encode(),                                     # nested at the top level
    speech_with(voice=DEEP),                           # nested inside a field
    speech_with(seed="-1"),
    speech_with(seed=str(2 ** 64)),
    speech_with(seed="9" * 5000),                     # over Python's int-to-str limit
    speech_with(seed="1e400"), speech_with(seed="Infinity"), speech_with(speed="NaN"),
    speech_with(input='"\\ud800 Hi."'),              # a lone surrogate: no UTF-8 for it
], ids=["deep", "deep-field", "seed-negative", "seed-2^64", "seed-5000-digits",
        "seed-1e400", "seed-infinity", "speed-nan", "lone-surrogate"])
def test_hostile_post_bodies_are_400_in_openais_shape(bounded, error_logs, body):
    assert_error_shape(post(bounded, body), 400, "invalid_argument")
    assert error_logs == []


def test_the_largest_uint64_seed_is_accepted(bounded):
    """A known voice, so that nothing but the seed can refuse it (an unknown voice is
    refused before the seed is looked at). Caught planted bug: SEED_MAX lowered to 2^63-1
    in server/settings.py."""
    r = post(bounded, speech_with(seed=str(2 ** 64 - 1)))
    assert r.status_code == 200, r.text[:200]
    assert len(r.content) > 0 and len(r.content) % 2 == 0  # PCM16 audio


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_is_415(bounded, error_logs, content_type):
    error = assert_error_shape(post(bounded, json.dumps(SPEECH).encode(), content_type),
                               415, "invalid_argument")
    assert "application/json" in error["message"]
    assert error_logs == []


def test_json_with_a_charset_or_a_json_suffix_type_is_accepted(bounded):
    body = json.dumps({**SPEECH, "voice": "alloy"}).encode()  # read, then refused for its voice
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json"):
        assert assert_error_shape(post(bounded, body, content_type), 400,
                                  "invalid_argument")["param"] == "voice"


def ws_url(srv):
    return srv.http.replace("http://", "ws://") + "/v1/audio/speech/stream"


def ws_exchange(srv, *frames):
    """Send `frames` (str: text, bytes: binary), then read until the server closes:
    (JSON events, close code). A socket dropped without a close frame reads as 1006."""
    events = []
    with connect(ws_url(srv), open_timeout=30) as ws:
        for frame in frames:
            ws.send(frame)
        try:
            while True:
                message = ws.recv(timeout=30)
                if isinstance(message, str):
                    events.append(json.loads(message))
        except ConnectionClosed:
            pass
    return events, ws.close_code


@pytest.mark.parametrize("config", [
    '{"type": "config", "sample_rate": 1e400}',
    '{"type": "config", "sample_rate": Infinity}',
    '{"type": "config", "seed": 1e400}',
    '{"type": "config", "seed": -Infinity}',
    '{"type": "config", "seed": -1}',
    f'{{"type": "config", "seed": {2 ** 64}}}',
    f'{{"type": "config", "seed": {"7" * 5000}}}',
    '{"type": "config", "sample_rate": 24000.5}',
    '{"type": "config", "voice": ' + DEEP + '}',
    DEEP,
], ids=["rate-1e400", "rate-infinity", "seed-1e400", "seed-minus-infinity", "seed-negative",
        "seed-2^64", "seed-5000-digits", "rate-float", "deep-field", "deep"])
def test_hostile_websocket_configs_end_with_an_error_event_and_a_close_frame(
        bounded, error_logs, config):
    events, close_code = ws_exchange(bounded, config)
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["code"] == "INVALID_ARGUMENT"
    assert close_code == 1008
    assert error_logs == []


@pytest.mark.parametrize("frame,code", [
    ('{"type": "config"}', "FAILED_PRECONDITION"),     # docs/api.md: a second config
    (DEEP, "INVALID_ARGUMENT"),
    ('{"type": "text", "text": 1e400}', "INVALID_ARGUMENT"),
    (b"\x00\x01", "INVALID_ARGUMENT"),
    ('{"type": "text", "text": "\\ud800 Hi."}', "INVALID_ARGUMENT"),
], ids=["second-config", "deep", "text-1e400", "binary", "lone-surrogate"])
def test_hostile_frames_after_the_config_end_with_an_error_event_and_a_close_frame(
        bounded, error_logs, frame, code):
    events, close_code = ws_exchange(bounded, '{"type": "config"}', frame)
    assert events[-1]["type"] == "error" and events[-1]["code"] == code
    assert close_code == 1008
    assert error_logs == []


def test_a_refused_websocket_config_is_counted_once(bounded):
    errors = bounded.server.state.errors
    before = errors["INVALID_ARGUMENT"]
    ws_exchange(bounded, '{"type": "config", "voice": "alloy"}')
    assert wait_for_value(lambda: errors["INVALID_ARGUMENT"], before + 1)


def wait_for_value(read, expected, timeout=30):
    """read() once it equals `expected` (or after `timeout`), then a moment more: a
    second count would come right after the first."""
    deadline = time.monotonic() + timeout
    while read() != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    return read() == expected


def test_both_edges_refuse_a_bad_rate_with_the_same_message(bounded):
    with pytest.raises(grpc.RpcError) as err:
        list(tts_pb2_grpc.TTSServiceStub(bounded.channel).Synthesize(pb.SynthesizeRequest(
            text="Hi.", audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16,
                                                    sample_rate_hz=12345)), timeout=60))
    events, _ = ws_exchange(bounded, '{"type": "config", "sample_rate": 12345}')
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert events[0]["code"] == "INVALID_ARGUMENT" and events[0]["message"] == err.value.details()


def test_unknown_routes_and_methods_answer_in_the_same_json_shape(bounded):
    missing = httpx.get(f"{bounded.http}/v1/nothing", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = httpx.put(f"{bounded.http}/v1/audio/speech", timeout=30)
    assert_error_shape(wrong, 405, "invalid_argument")
    assert "POST" in wrong.headers["allow"]
