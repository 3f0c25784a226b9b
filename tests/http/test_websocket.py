"""WebSocket text streaming against the demo server: order, interruption, slot release."""

import json
import time

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

WORDS = "Hello there. This is pushed word by word, like an LLM writes it. Done".split()


def ws_url(server):
    return server.http.replace("http://", "ws://") + "/v1/audio/speech/stream"


def receive_all(ws):
    """(events, audio frames) in arrival order, until the server closes."""
    events, order = [], []
    try:
        for message in ws:
            if isinstance(message, bytes):
                order.append(("audio", len(message)))  # (kind, size) for audio frames
            else:
                event = json.loads(message)
                events.append(event)
                order.append((event["type"], event.get("segment_index")))
    except ConnectionClosed:  # closed with an error code (after the error event)
        pass
    return events, order


def test_words_pushed_one_by_one_give_segment_events_and_audio_in_order(server):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "config", "voice": "leo", "encoding": "pcm16"}))
        for word in WORDS:
            ws.send(json.dumps({"type": "text", "text": word + " "}))
        ws.send(json.dumps({"type": "end"}))
        events, order = receive_all(ws)
    summary = events[-1]
    assert summary["type"] == "summary" and summary["num_segments"] == 3
    # every segment: start, its audio, end; segments in index order; summary last
    segment, inside, audio_bytes = 0, False, 0
    for kind, index in order[:-1]:
        if kind == "segment_start":
            assert not inside and index == segment
            inside = True
        elif kind == "audio":
            assert inside
            audio_bytes += index
        else:
            assert kind == "segment_end" and inside and index == segment
            inside, segment = False, segment + 1
    assert segment == 3
    assert audio_bytes == 2 * summary["num_samples"]  # PCM16
    ends = [e for e in events if e["type"] == "segment_end"]
    assert [e["text"] for e in ends] == ["Hello there.",
                                         "This is pushed word by word, like an LLM writes it.",
                                         "Done"]
    assert sum(e["num_samples"] for e in ends) == summary["num_samples"]


def status(stub):
    return stub.GetStatus(pb.GetStatusRequest())


def wait_for(predicate, timeout=60):
    """Poll GetStatus until predicate holds (an event, not a time bound on the server)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("how", ["close", "cancel"])
def test_closing_mid_stream_frees_the_slots(server, stub, how):
    long_text = " ".join(["This sentence goes on for quite a while, so it cannot end soon."] * 6)
    before = status(stub)
    cancelled = server.server.state.outcomes["cancelled"]
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "config", "voice": "tara"}))
        ws.send(json.dumps({"type": "text", "text": long_text}))
        while not isinstance(ws.recv(), bytes):  # wait for the first audio
            pass
        busy = status(stub)
        assert busy.active_generations >= 1 and busy.free_slots < busy.total_slots
        if how == "cancel":
            ws.send(json.dumps({"type": "cancel"}))
            tail = [m for m in ws]  # the server answers, then closes
            assert {"type": "cancelled"} in [json.loads(m) for m in tail if isinstance(m, str)]
    assert wait_for(lambda: (lambda s: s.active_generations == 0 and s.waiting_generations == 0
                             and s.free_slots == s.total_slots and s.active_sessions == 0)(status(stub)))
    # ended by the client, not by running out of text: 6 sentences, at most 2 ever submitted
    assert server.server.state.outcomes["cancelled"] == cancelled + 1
    assert status(stub).generations_total - before.generations_total <= 2


def test_text_before_config_is_refused(server):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "text", "text": "Hi."}))
        events, _ = receive_all(ws)
    assert events == [{"type": "error", "code": "FAILED_PRECONDITION", "message": events[0]["message"]}]
    assert ws.close_code == 1008


def test_unknown_voice_is_refused_with_the_known_list(server):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "config", "voice": "alloy"}))
        events, _ = receive_all(ws)
    assert events[0]["code"] == "INVALID_ARGUMENT" and "tara" in events[0]["message"]
