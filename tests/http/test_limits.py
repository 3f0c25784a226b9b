"""The HTTP edge obeys the gRPC edge's caps and timeouts: server.max_sessions counts calls
on both edges, and session.idle_timeout_seconds ends a WebSocket that sends nothing."""

import contextlib
import json
import time

import grpc
import httpx
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from .inproc import InProcessServer

SPEECH = {"model": "tts-1", "input": "Hello there.", "voice": "tara", "response_format": "pcm"}


@pytest.fixture(scope="module")
def capped():
    """One open call at most; a WebSocket idle for 1 s is ended."""
    srv = InProcessServer(**{"server.max_sessions": 1, "session.idle_timeout_seconds": 1}).start()
    try:
        yield srv
    finally:
        srv.stop()


def ws_url(srv):
    return srv.http.replace("http://", "ws://") + "/v1/audio/speech/stream"


def test_max_sessions_counts_http_calls_and_refuses_both_edges(capped):
    with connect(ws_url(capped)) as ws:  # the one open call
        ws.send(json.dumps({"type": "config"}))
        ws.send(json.dumps({"type": "text", "text": "Hello"}))  # no sentence end: stays open
        status = tts_pb2_grpc.TTSServiceStub(capped.channel).GetStatus(pb.GetStatusRequest())
        assert status.active_sessions == 1  # open calls, idle ones included
        r = httpx.post(f"{capped.http}/v1/audio/speech", json=SPEECH, timeout=60)
        assert r.status_code == 429
        assert "server.max_sessions" in r.json()["error"]["message"]
        with pytest.raises(grpc.RpcError) as err:
            list(tts_pb2_grpc.TTSServiceStub(capped.channel).Synthesize(
                pb.SynthesizeRequest(text="Hi.", voice="tara"), timeout=60))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with connect(ws_url(capped)) as second:
            # refused as soon as it is accepted, as a gRPC call is when it opens (the
            # socket is an open call before its config): the config may find it closed
            with contextlib.suppress(ConnectionClosed):
                second.send(json.dumps({"type": "config"}))
            refusal = json.loads(second.recv(timeout=60))
            assert refusal["type"] == "error" and refusal["code"] == "RESOURCE_EXHAUSTED"


def calls_closed(srv, timeout=30):
    """The calls of the test before have ended (a WebSocket is an open call from its
    accept until its handler has finished, a moment after the client closed it)."""
    deadline = time.monotonic() + timeout
    while srv.server.state.active_sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    return srv.server.state.active_sessions == 0


def test_a_websocket_that_sends_nothing_is_ended_by_the_idle_timeout(capped):
    assert calls_closed(capped)  # server.max_sessions is 1 here
    before = capped.server.state.timeouts["idle"]
    with connect(ws_url(capped)) as ws:
        ws.send(json.dumps({"type": "config"}))
        event = json.loads(ws.recv(timeout=60))  # nothing sent: the watchdog ends the call
        assert event["type"] == "error" and event["code"] == "DEADLINE_EXCEEDED"
        assert "session.idle_timeout_seconds" in event["message"]
    assert capped.server.state.timeouts["idle"] == before + 1
    assert capped.server.state.active_sessions == 0
