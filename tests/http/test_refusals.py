"""Refusals over HTTP: 503 while the model is not serving, 429 when every slot is taken,
and a client that hangs up mid-response frees its slots."""

import json
import time

import httpx
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from starlette.testclient import TestClient
from websockets.sync.client import connect

from orpheus_svc.config import load_config
from orpheus_svc.http.server import build_app
from orpheus_svc.server.state import ServerState

from .inproc import InProcessServer

SPEECH = {"model": "tts-1", "input": "Hello there.", "voice": "tara", "response_format": "pcm"}
# The demo model samples its stop id like any other token, so an unseeded segment can end
# early and free the slot it was meant to hold (measured: of seeds 0-39 on the 36-word
# segment below, seed 27 stopped after 64 tokens and seed 12 after 190; CI once saw the
# POST admitted that way). Seed 3 runs that segment to its length budget (2,408 tokens).
HOLD_SEED = 3


def test_not_serving_yet_is_503_with_retry_after():
    state = ServerState(load_config(overrides={}))  # no runtime: loading, or draining
    with TestClient(build_app(state)) as client:
        for response in (client.post("/v1/audio/speech", json=SPEECH),
                         client.get("/v1/audio/voices")):
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            assert response.json()["error"]["type"] == "server_error"
        with client.websocket_connect("/v1/audio/speech/stream") as ws:
            ws.send_json({"type": "config"})
            assert ws.receive_json()["code"] == "UNAVAILABLE"


def long_text(n=6):
    return " ".join(["This sentence goes on for quite a while, so it cannot end soon."] * n)


def status(server):
    return tts_pb2_grpc.TTSServiceStub(server.channel).GetStatus(pb.GetStatusRequest())


def wait_for(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture(scope="module")
def one_slot():
    """A server with one KV slot and no admission queue: a second session is refused."""
    srv = InProcessServer(**{"engine.max_sessions": 1, "engine.max_batch_size": 1,
                             "engine.max_waiting": 0, "text.max_segments_in_flight": 1}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_full_server_is_429_in_openai_shape(one_slot):
    url = one_slot.http.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:  # holds the only slot
        ws.send(json.dumps({"type": "config", "seed": HOLD_SEED}))
        # one long segment (no sentence end, then a flush): the slot stays taken for its
        # whole generation, with no gap between segments for the POST to slip into
        ws.send(json.dumps({"type": "text", "text": "This goes on for quite a while, " * 6}))
        ws.send(json.dumps({"type": "flush"}))
        while not isinstance(ws.recv(), bytes):
            pass
        r = httpx.post(f"{one_slot.http}/v1/audio/speech", json=SPEECH, timeout=60)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert r.json()["error"]["code"] == "resource_exhausted"


def test_http_client_hanging_up_mid_response_frees_the_slot(one_slot):
    assert wait_for(lambda: status(one_slot).free_slots == 1)
    before = status(one_slot)
    cancelled = one_slot.server.state.outcomes["cancelled"]
    with httpx.stream("POST", f"{one_slot.http}/v1/audio/speech", timeout=60,
                      json={**SPEECH, "input": long_text()}) as r:
        assert r.status_code == 200
        body = r.iter_raw()  # kept: dropping the iterator would close the response
        next(body)  # the first audio arrived
        assert status(one_slot).active_sessions == 1
    # closed mid-stream: cancelled, not finished (six sentences, one in flight at a time)
    assert wait_for(lambda: (lambda s: s.free_slots == 1 and s.active_sessions == 0)(status(one_slot)))
    assert one_slot.server.state.outcomes["cancelled"] == cancelled + 1
    assert status(one_slot).generations_total - before.generations_total < 6
