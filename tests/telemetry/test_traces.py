"""Traces from a real server, received by a real OTLP/gRPC endpoint (otlp.py): the caller's
trace continues, the spans nest, their times are the session's own, no text unless asked,
the HTTP edge too, and in the split topology the engine process's span joins the trace."""

from __future__ import annotations

import json
import secrets
import urllib.request

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from tests.e2e.server_proc import ServerProcess

from .conftest import OTEL_ENV, SIM

TEXTS = ["Tracing starts here. ", "The second sentence follows, ", "and then it ends."]
CALL = "orpheus.tts.v1.TTSService/StreamingSynthesize"
SLACK_NS = 2_000  # rounding of monotonic seconds to epoch nanoseconds (both sides)


def _caller():
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _stream(srv, traceparent, texts=TEXTS):
    def reqs():
        yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
        for t in texts:
            yield pb.StreamingSynthesizeRequest(text=t)
    stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
    out = list(stub.StreamingSynthesize(reqs(), metadata=[("traceparent", traceparent)],
                                        timeout=120))
    return out[-1].summary


def _spans(receiver, trace_id, names):
    """The trace's spans once every name in `names` arrived, by name."""
    def ready(spans):
        got = [s.name for s in spans if s.trace_id == trace_id]
        return all(got.count(n) >= k for n, k in names.items())
    receiver.wait_for(ready)
    by_name: dict = {}
    for s in receiver.trace(trace_id):
        by_name.setdefault(s.name, []).append(s)
    return by_name


@pytest.fixture(scope="module")
def streamed(observed, receiver):
    trace_id, span_id, traceparent = _caller()
    summary = _stream(observed, traceparent)
    spans = _spans(receiver, trace_id, {CALL: 1, "orpheus.segment": summary.num_segments})
    return trace_id, span_id, summary, spans


def test_the_call_span_continues_the_callers_trace(streamed):
    trace_id, caller_span, summary, spans = streamed
    (call,) = spans[CALL]
    assert call.parent_id == caller_span and call.trace_id == trace_id
    assert call.kind == 2  # SPAN_KIND_SERVER
    assert call.resource["service.name"] == "orpheus-svc-test"  # OTEL_SERVICE_NAME
    assert call.attributes["orpheus.session_id"] == summary.session_id
    assert call.attributes["orpheus.voice"] == "tara"
    assert call.attributes["orpheus.encoding"] == "pcm16"
    assert call.attributes["orpheus.finish_reason"] in ("stop", "length")
    assert call.attributes["orpheus.status"] == "OK"


def test_segment_spans_nest_in_the_call_and_the_engine_waits_in_them(streamed):
    _, _, summary, spans = streamed
    (call,) = spans[CALL]
    segments = sorted(spans["orpheus.segment"], key=lambda s: s.attributes["orpheus.segment.index"])
    assert [s.attributes["orpheus.segment.index"] for s in segments] == \
        list(range(summary.num_segments))
    by_id = {s.span_id: s for ss in spans.values() for s in ss}
    for seg in segments:
        assert seg.parent_id == call.span_id
        assert call.start_ns - SLACK_NS <= seg.start_ns <= seg.end_ns <= call.end_ns + SLACK_NS
        names = [n for n, _, _ in seg.events]
        assert names[:3] == ["submitted", "admitted", "first_token"], names
        assert {"first_audio", "end"} <= set(names)
        times = [t for _, t, _ in seg.events]
        assert times == sorted(times), seg.events  # submitted < admitted < first token ...
    children = spans["orpheus.admission_wait"] + spans["orpheus.prefill"]
    assert len(children) == 2 * len(segments)
    for child in children:
        parent = by_id[child.parent_id]
        assert parent.name == "orpheus.segment"
        assert parent.start_ns - SLACK_NS <= child.start_ns <= child.end_ns <= parent.end_ns + SLACK_NS
    # the prefill starts where the admission wait ends, at the segment's "admitted" event
    for seg in segments:
        wait = next(c for c in spans["orpheus.admission_wait"] if c.parent_id == seg.span_id)
        prefill = next(c for c in spans["orpheus.prefill"] if c.parent_id == seg.span_id)
        assert wait.end_ns == prefill.start_ns == seg.event("admitted")
        assert prefill.end_ns == seg.event("first_token")


def test_span_times_agree_with_the_session_summary(streamed):
    _, _, summary, spans = streamed
    (call,) = spans[CALL]
    a = call.attributes
    assert a["orpheus.ttfb_ms"] == pytest.approx(summary.time_to_first_audio_ms, abs=0.01)
    ttfb_ns = call.event("first_audio") - call.event("first_text")
    assert ttfb_ns / 1e6 == pytest.approx(summary.time_to_first_audio_ms, abs=0.01)
    assert a["orpheus.audio_ms"] == pytest.approx(summary.audio_ms, abs=0.1)
    assert a["orpheus.segments"] == summary.num_segments
    assert a["orpheus.tokens"] == summary.num_tokens
    segments = spans["orpheus.segment"]
    assert sum(s.attributes["orpheus.tokens"] for s in segments) == summary.num_tokens
    assert sum(s.attributes["orpheus.audio_ms"] for s in segments) == \
        pytest.approx(summary.audio_ms, abs=0.1 * len(segments))
    # the call's first audio is its first segment's, which the session sent after the
    # segment's first audio reached it
    first = min(segments, key=lambda s: s.attributes["orpheus.segment.index"])
    assert first.event("first_audio") <= call.event("first_audio") + SLACK_NS


def test_no_span_carries_the_text_by_default(streamed):
    trace_id, _, _, spans = streamed
    words = ["Tracing starts here", "second sentence", "then it ends"]
    for ss in spans.values():
        for s in ss:
            values = list(s.attributes.values()) + [v for _, _, ea in s.events for v in ea.values()]
            assert "orpheus.text" not in s.attributes
            for v in values:
                assert not any(w in str(v) for w in words), (s.name, v)


def test_an_http_call_continues_the_callers_trace(observed, receiver):
    trace_id, span_id, traceparent = _caller()
    body = json.dumps({"model": "tts-1", "input": "Hello over HTTP.", "voice": "tara",
                       "response_format": "pcm"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{observed.http_port}/v1/audio/speech",
                                 data=body, headers={"Content-Type": "application/json",
                                                     "traceparent": traceparent})
    audio = urllib.request.urlopen(req, timeout=60).read()
    assert audio
    spans = _spans(receiver, trace_id, {"POST /v1/audio/speech": 1, "orpheus.segment": 1})
    (call,) = spans["POST /v1/audio/speech"]
    assert call.parent_id == span_id
    assert call.attributes["http.route"] == "/v1/audio/speech"
    assert all(s.parent_id == call.span_id for s in spans["orpheus.segment"])


@pytest.fixture(scope="module")
def split(tmp_path_factory, receiver):
    srv = ServerProcess(tmp_path_factory.mktemp("split-traced"), *SIM, "server.topology=split",
                        "server.frontends=1", name="split-traced",
                        env={**OTEL_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def test_in_the_split_topology_the_engine_process_continues_the_trace(split, receiver):
    trace_id, span_id, traceparent = _caller()
    summary = _stream(split, traceparent, TEXTS[:2])
    n = summary.num_segments
    spans = _spans(receiver, trace_id, {CALL: 1, "orpheus.segment": n,
                                        "orpheus.engine.generation": n})
    (call,) = spans[CALL]
    assert call.parent_id == span_id
    segments = {s.span_id: s for s in spans["orpheus.segment"]}
    for gen in spans["orpheus.engine.generation"]:
        seg = segments[gen.parent_id]  # a child of the front-end's segment span
        assert gen.attributes["orpheus.segment.index"] == seg.attributes["orpheus.segment.index"]
        assert gen.attributes["orpheus.tokens"] == seg.attributes["orpheus.tokens"]
        assert gen.resource["orpheus.process"] == "engine"
        assert seg.resource["orpheus.process"] == "frontend-0"
        assert gen.resource["process.pid"] != seg.resource["process.pid"]
        assert [n for n, _, _ in gen.events] == ["admitted", "first_token"]
