"""Property-based fuzz of the HTTP edge against a live server (Hypothesis): whatever the
POST body or the WebSocket frames, the answer is audio or a documented refusal, every
WebSocket ends with a close frame, no error is logged, and GetStatus returns to idle."""

import json

import httpx
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from .test_slow_clients import wait_for

SETTINGS = settings(deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

# Raw JSON number and constant spellings json.dumps would never write.
RAW_NUMBERS = ["1e400", "-1e400", "Infinity", "-Infinity", "NaN", "-1", str(2 ** 64),
               str(2 ** 64 - 1), "9" * 5000, "0.5", "1e3", "-0", "24000", "8000"]
DEEP = ["[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000]
RAW_STRINGS = ['"\\ud800"', '"Hi. \\udfff"', '"\\ud83d\\ude00 Hi."', '"\\u0000"']


def raw(value: str):
    """A JSON fragment spliced in as it is (see render)."""
    return ("raw", value)


def render(value) -> str:
    if isinstance(value, tuple) and value and value[0] == "raw":
        return value[1]
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(render(v) for v in value) + "]"
    return json.dumps(value)


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False,
                    allow_infinity=False), st.text(max_size=12),
                    st.sampled_from(RAW_NUMBERS + RAW_STRINGS + DEEP).map(raw))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
short_text = st.sampled_from(["Hi.", "Ok.", "", "   ", "<laugh>", "Hi"]) | st.text(max_size=4)


def field(valid, *hostile):
    """Mostly a valid value (so that a good share of the requests is spoken), sometimes
    anything."""
    return weighted(st.sampled_from(valid), st.one_of(values, *hostile))


def weighted(usual, rare, one_in=8):
    """`rare` about one time in `one_in`, else `usual` (one_of would pick each branch
    alike). Not n == 1: Hypothesis draws an integer's bounds more often than the rest."""
    return st.integers(1, one_in).flatmap(lambda n: rare if n == 2 else usual)


speech_bodies = st.fixed_dictionaries({
    "model": field(["tts-1", "orpheus", "gpt-4o-mini-tts"]),
    # a valid input about one time in five: each spoken request costs CPU time on
    # the demo model (an empty or odd one is refused before any is spent)
    "input": weighted(st.sampled_from(["", " ", "\u0000"]) | values,
                      st.sampled_from(["Hi.", "Ok."]), 5),
}, optional={
    "voice": field(["tara", "leo", "", "TARA", "alloy"]),
    "response_format": field(["pcm", "wav", "mp3", "flac", "opus", "aac"]),
    "speed": field([1.0, 1, 2.0]),
    "stream_format": field(["audio", "sse"]),
    "stream": field([True, False]),
    "seed": weighted(st.sampled_from([0, 1, 2 ** 64 - 1]), st.sampled_from(RAW_NUMBERS).map(raw), 3),
    "instructions": values,
})
post_bodies = weighted(speech_bodies.map(render), st.one_of(
    values.map(render),                                  # any JSON, not an object
    st.sampled_from(DEEP),
    st.text(max_size=40),                                # not JSON at all
    speech_bodies.map(render).flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n])),
), 4)
content_types = weighted(st.sampled_from(["application/json", "application/json; charset=utf-8"]),
                         st.sampled_from(["text/plain", None, "application/problem+json"]))


def status_of(server):
    return tts_pb2_grpc.TTSServiceStub(server.channel).GetStatus(pb.GetStatusRequest())


def idle(server) -> bool:
    s = status_of(server)
    return (s.active_sessions == 0 and s.active_generations == 0
            and s.waiting_generations == 0 and s.free_slots == s.total_slots)


AUDIO_TYPES = ("audio/", "text/event-stream")


@settings(SETTINGS, max_examples=45)
@given(body=post_bodies, content_type=content_types)
def test_every_post_is_audio_or_a_documented_refusal(bounded, error_logs, body, content_type):
    headers = {"content-type": content_type} if content_type else {}
    r = httpx.post(f"{bounded.http}/v1/audio/speech", content=body.encode("utf-8", "replace"),
                   headers=headers, timeout=120)
    event(f"HTTP {r.status_code}")
    if 200 <= r.status_code < 300:
        assert r.headers["content-type"].startswith(AUDIO_TYPES) and len(r.content) > 0
    else:
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error_logs == []
    assert wait_for(lambda: idle(bounded))


config_frames = weighted(
    st.fixed_dictionaries({"type": st.just("config")}, optional={
        "voice": field(["tara", "leo", ""]),
        "encoding": field(["pcm16", "mulaw", "wav", "ogg_opus", "aac"]),
        "sample_rate": field([0, 24000, 8000, 16000, 12345],
                             st.sampled_from(RAW_NUMBERS).map(raw)),
        "seed": field([1, 2 ** 64 - 1], st.sampled_from(RAW_NUMBERS).map(raw)),
    }).map(render),
    values.map(render),
)
later_frames = weighted(
    st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": short_text}).map(render),
              st.just('{"type": "flush"}')),
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": values}).map(render),
        st.sampled_from(['{"type": "end"}', '{"type": "cancel"}', '{"type": "config"}',
                         "not json", *DEEP]),
        values.map(render),
        st.binary(max_size=16)), 4)
frame_sequences = st.tuples(config_frames, st.lists(later_frames, max_size=4))


@settings(SETTINGS, max_examples=20)
@given(frames=frame_sequences)
def test_every_websocket_ends_with_a_close_frame(bounded, error_logs, frames):
    first, later = frames
    url = bounded.http.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url, open_timeout=30) as ws:
        try:
            for frame in [first, *later, '{"type": "end"}']:
                ws.send(frame)
        except ConnectionClosed:
            pass  # the server ended it early (an error): the close is checked below
        try:
            while True:
                message = ws.recv(timeout=120)
                if isinstance(message, str):
                    got = json.loads(message)
                    if got["type"] == "error":
                        assert set(got) == {"type", "code", "message"}
        except ConnectionClosed:
            pass
    event(f"close {ws.close_code}")
    assert ws.close_code in (1000, 1008, 1013), ws.close_code  # 1006: dropped, no close frame
    assert error_logs == []
    assert wait_for(lambda: idle(bounded))
