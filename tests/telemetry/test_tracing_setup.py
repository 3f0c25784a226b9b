"""Tracing's set-up and the call spans' rules, without a server: the OTEL_* environment
decides (off unless an exporter is named), text only with telemetry.trace_text, the
sampling ratio follows a caller's decision, and tracing off imports no OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from orpheus_svc.server.traces import CallOrigin, CallTrace
from orpheus_svc.telemetry.tracing import Tracing, TracingError, check_environment, start_tracing


@pytest.mark.parametrize("env", [{}, {"OTEL_TRACES_EXPORTER": "none"},
                                 {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}])
def test_tracing_is_off_unless_an_exporter_is_named(env):
    assert start_tracing(environ=env) is None
    assert check_environment(env) is False


def test_otlp_over_http_or_grpc_turns_it_on():
    for proto in ("grpc", "http/protobuf"):
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": proto}
        tracing = start_tracing(environ=env)
        assert tracing is not None
        tracing.provider.shutdown()


@pytest.mark.parametrize("env,named", [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"},
     "OTEL_EXPORTER_OTLP_PROTOCOL")])
def test_a_value_the_server_cannot_use_is_refused_by_name(env, named):
    with pytest.raises(TracingError, match=named):
        check_environment(env)


def test_serve_refuses_an_unusable_otel_setting_before_starting(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orpheus_svc.app.cli", "serve", "--port", "0"],
                          env={"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "jaeger"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "OTEL_TRACES_EXPORTER" in proc.stderr and "jaeger" in proc.stderr


def test_with_tracing_off_no_opentelemetry_module_is_imported():
    code = ("import sys, orpheus_svc.app.server, orpheus_svc.http.server, orpheus_svc.app.topology;"
            "from orpheus_svc.server.traces import start_call_tracing;"
            "from orpheus_svc.config import Config;"
            "assert start_call_tracing(Config()) is None;"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


# -- CallTrace against the SDK's in-memory exporter ---------------------------------------------

def _tracing(trace_text=False, sampler=None):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider.get_tracer("test"), provider, trace_text), exporter


def _segment(index=0, text="Say this."):
    now = time.monotonic()
    return SimpleNamespace(index=index, text=text, t_cut=now, t_open=now, t_first_audio=None,
                           t_final=None, finish=None, num_samples=0, span=None,
                           finish_reason="stop")


def _call(tracing, carrier=None):
    trace = CallTrace(tracing, CallOrigin(carrier or {}, "team-a"), "StreamingSynthesize",
                      "s1", time.monotonic())
    trace.settings(SimpleNamespace(voice="tara", encoding="pcm16", sample_rate=24000))
    return trace


def test_segment_text_only_with_trace_text():
    for on in (False, True):
        tracing, exporter = _tracing(trace_text=on)
        trace = _call(tracing)
        seg = _segment()
        trace.segment_opened(seg)
        trace.segment_ended(seg, time.monotonic(), 24000)
        trace.end("ok")
        spans = {s.name: s for s in exporter.get_finished_spans()}
        assert ("orpheus.text" in spans["orpheus.segment"].attributes) is on
        if on:
            assert spans["orpheus.segment"].attributes["orpheus.text"] == "Say this."
        assert spans["orpheus.tts.v1.TTSService/StreamingSynthesize"].attributes[
            "orpheus.api_key_id"] == "team-a"


def test_the_sampling_ratio_applies_to_new_traces_and_a_caller_decides_its_own():
    tracing, exporter = _tracing(sampler=ParentBased(TraceIdRatioBased(0.0)))
    trace = _call(tracing)  # a new trace at ratio 0: not recorded, nothing for the engine
    assert trace.segment_opened(_segment()) == ""
    trace.end("ok")
    assert exporter.get_finished_spans() == ()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # sampled by the caller
    trace = _call(tracing, {"traceparent": parent})
    sent = trace.segment_opened(_segment())
    assert sent.startswith("00-0af7651916cd43dd8448eb211c80319c-") and sent.endswith("-01")
    trace.end("CANCELLED")
    (call,) = [s for s in exporter.get_finished_spans() if s.name.endswith("StreamingSynthesize")]
    assert format(call.parent.span_id, "016x") == "b7ad6b7169203331"
    assert call.status.status_code.name == "ERROR"


def test_an_unsampled_caller_is_followed_at_any_ratio():
    tracing, exporter = _tracing(sampler=ParentBased(TraceIdRatioBased(1.0)))
    trace = _call(tracing, {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"})
    assert trace.segment_opened(_segment()) == ""
    trace.end("ok")
    assert exporter.get_finished_spans() == ()
