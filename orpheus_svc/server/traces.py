"""A call's spans (OpenTelemetry), built from the timestamps the session keeps anyway.

    caller's span (traceparent in gRPC metadata or HTTP headers)
      orpheus.tts.v1.TTSService/StreamingSynthesize   (SERVER; one per call, both edges)
        events: first_text, first_audio
        orpheus.segment  (one per segment: text cut -> its last audio handed to the edge)
          events: submitted, admitted, first_token, first_audio, end
          orpheus.admission_wait   submitted -> a KV slot
          orpheus.prefill          admitted  -> first token
          orpheus.engine.generation   (split topology: the engine process's own span)

Nothing here runs per engine step or per audio chunk: a segment's span is opened when it is
submitted (its context goes with the generation, for the split topology's engine process)
and finished when its last audio has gone, from the session's timestamps and the engine's
waits that ride on the generation's Finish (core/events.py). The engine clock's waits are
placed from the moment the segment was submitted: in the split topology they are off by
the time a command takes to cross to the engine process (well under a millisecond).

Spans carry what an operator filters by (voice, encoding, rate, segments, tokens, time to
first audio, finish reason, API key name, session id) and never the text, unless
telemetry.trace_text is on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from orpheus_svc.config import Config
from orpheus_svc.telemetry.tracing import Tracing, start_tracing

from .settings import SessionSettings

# The caller's W3C trace context: the only headers or metadata keys read.
TRACE_KEYS = ("traceparent", "tracestate")

# OpenCall.rpc -> (span name, attributes): gRPC spans are named as OpenTelemetry's RPC
# conventions name them; the HTTP edge's by method and route.
_RPC = {
    "StreamingSynthesize": ("orpheus.tts.v1.TTSService/StreamingSynthesize",
                            {"rpc.system": "grpc", "rpc.service": "orpheus.tts.v1.TTSService",
                             "rpc.method": "StreamingSynthesize"}),
    "Synthesize": ("orpheus.tts.v1.TTSService/Synthesize",
                   {"rpc.system": "grpc", "rpc.service": "orpheus.tts.v1.TTSService",
                    "rpc.method": "Synthesize"}),
    "http.speech": ("POST /v1/audio/speech",
                    {"http.request.method": "POST", "http.route": "/v1/audio/speech"}),
    "http.ws": ("GET /v1/audio/speech/stream",
                {"http.request.method": "GET", "http.route": "/v1/audio/speech/stream"}),
}


def start_call_tracing(config: Config, role: str = "server") -> Tracing | None:
    """This serving process's Tracing from the OTEL_* environment and config.telemetry
    (None: tracing is off). TracingError for an unusable OTEL_* value."""
    t = config.telemetry
    return start_tracing(trace_text=t.trace_text, sample_ratio=t.trace_sample_ratio, role=role)


@dataclass(frozen=True)
class CallOrigin:
    """Where a call came from, as its edge read it: the caller's trace context (the
    traceparent / tracestate it sent) and the name of its API key (None: keys are off)."""

    carrier: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, Any]] | None, api_key: str | None = None) -> CallOrigin:
        """From header or metadata (name, value) pairs; only the trace keys are kept."""
        carrier = {}
        for name, value in pairs or ():
            name = name.lower()
            if name in TRACE_KEYS:
                carrier[name] = value.decode("latin-1") if isinstance(value, bytes) else value
        return cls(carrier, api_key)


class CallTrace:
    """The spans of one call (see the module docstring). The call's runner
    (server/calls.py SessionCall) opens it, hands `segment_opened` to the session, and
    calls `segment_ended` and `end`; every method is cheap when the call is not sampled."""

    def __init__(self, tracing: Tracing, origin: CallOrigin, rpc: str, session_id: str,
                 opened_at: float) -> None:
        from opentelemetry.trace import SpanKind

        self.tracing = tracing
        # one anchor per call: the session's time.monotonic stamps -> epoch nanoseconds
        self._wall0, self._mono0 = time.time_ns(), time.monotonic()
        name, attrs = _RPC.get(rpc, (rpc, {}))
        attrs = dict(attrs, **{"orpheus.session_id": session_id})
        if origin.api_key:
            attrs["orpheus.api_key_id"] = origin.api_key
        self.span = tracing.tracer.start_span(
            name, context=tracing.extract(origin.carrier), kind=SpanKind.SERVER,
            start_time=self.ns(opened_at), attributes=attrs)
        self._open: dict[int, Any] = {}  # segment index -> its span, until it ends

    def ns(self, t: float) -> int:
        """A time.monotonic reading as OpenTelemetry's epoch nanoseconds."""
        return self._wall0 + int((t - self._mono0) * 1e9)

    def settings(self, s: SessionSettings) -> None:
        self.span.set_attributes({"orpheus.voice": s.voice, "orpheus.encoding": s.encoding,
                                  "orpheus.sample_rate": s.sample_rate})

    # -- segments -----------------------------------------------------------------------------

    def segment_opened(self, seg: Any) -> str:
        """The session submits segment `seg` (server/session.py _Segment): its span opens
        (from when its text was cut); returns the traceparent its generation carries."""
        from opentelemetry import trace

        attrs = {"orpheus.segment.index": seg.index}
        if self.tracing.trace_text:
            attrs["orpheus.text"] = seg.text
        span = self.tracing.tracer.start_span(
            "orpheus.segment", context=trace.set_span_in_context(self.span),
            start_time=self.ns(seg.t_cut), attributes=attrs)
        span.add_event("submitted", timestamp=self.ns(seg.t_open))
        seg.span = span
        self._open[seg.index] = span
        return self.tracing.traceparent(span) if span.is_recording() else ""

    def segment_ended(self, seg: Any, delivered_at: float, sample_rate: int) -> None:
        """Segment `seg`'s last audio went to the edge at `delivered_at`: its span, with
        the engine's waits (its Finish) as child spans and events."""
        span = self._open.pop(seg.index, None)
        if span is None or not span.is_recording():
            return
        from opentelemetry import trace

        fin = seg.finish
        attrs: dict[str, Any] = {"orpheus.audio_ms": round(seg.num_samples / sample_rate * 1000, 1)}
        if fin is not None:
            attrs.update({"orpheus.finish_reason": fin.reason, "orpheus.tokens": fin.num_generated,
                          "orpheus.prompt_tokens": fin.num_prompt_tokens,
                          "orpheus.frames": fin.num_frames})
        t_open = seg.t_open
        if fin is not None and t_open is not None and fin.queued_s is not None:
            admitted = t_open + fin.queued_s
            attrs["orpheus.admission_wait_ms"] = round(fin.queued_s * 1000, 2)
            ctx = trace.set_span_in_context(span)
            self._interval("orpheus.admission_wait", ctx, t_open, admitted)
            span.add_event("admitted", timestamp=self.ns(admitted))
            if fin.first_token_s is not None:
                first = t_open + fin.first_token_s
                attrs["orpheus.first_token_ms"] = round((fin.first_token_s - fin.queued_s) * 1000, 2)
                self._interval("orpheus.prefill", ctx, admitted, first)
                span.add_event("first_token", timestamp=self.ns(first))
        if seg.t_first_audio is not None:
            span.add_event("first_audio", timestamp=self.ns(seg.t_first_audio))
        if seg.t_final is not None:
            span.add_event("end", timestamp=self.ns(seg.t_final))
        span.set_attributes(attrs)
        span.end(end_time=self.ns(max(delivered_at, seg.t_cut)))

    def _interval(self, name: str, ctx: Any, start: float, end: float) -> None:
        child = self.tracing.tracer.start_span(name, context=ctx, start_time=self.ns(start))
        child.end(end_time=self.ns(max(start, end)))

    # -- the end ------------------------------------------------------------------------------

    def end(self, outcome: str, session: Any = None, summary: Any = None,
            late_s: float = 0.0, message: str | None = None) -> None:
        """The call ended: `outcome` "ok" or the status it ended with (a Status name, or
        "cancelled"); `summary` the Summary the client got (None if it got none)."""
        from opentelemetry.trace import Status, StatusCode

        now = time.monotonic()
        span = self.span
        for seg_span in self._open.values():  # segments the call ended under
            seg_span.set_attribute("orpheus.finish_reason", "cancelled")
            seg_span.end(end_time=self.ns(now))
        self._open.clear()
        if not span.is_recording():
            span.end()
            return
        attrs: dict[str, Any] = {"orpheus.status": str(outcome).upper() if outcome != "ok" else "OK"}
        if session is not None:
            segs = session.segments()
            attrs["orpheus.segments"] = len(segs)
            attrs["orpheus.tokens"] = session.num_tokens
            attrs["orpheus.finish_reason"] = _finish_reason(outcome, segs)
            if session.t_first_text is not None:
                span.add_event("first_text", timestamp=self.ns(session.t_first_text))
            if session.t_first_audio is not None:
                span.add_event("first_audio", timestamp=self.ns(session.t_first_audio))
        if summary is not None:
            attrs.update({"orpheus.ttfb_ms": round(summary.time_to_first_audio_ms, 2),
                          "orpheus.audio_ms": round(summary.audio_ms, 1),
                          "orpheus.late_audio_ms": round(late_s * 1000, 1)})
        span.set_attributes(attrs)
        if outcome != "ok":
            span.set_status(Status(StatusCode.ERROR, message or str(outcome)))
        span.end(end_time=self.ns(now))


def _finish_reason(outcome: str, segments: list) -> str:
    """One word for the call: "stop" (every segment ended at the model's stop), "length"
    (one ran out of tokens), else how the call ended ("cancelled", "resource_exhausted"...)."""
    if outcome != "ok":
        return str(outcome).lower()
    return "length" if any(s.finish_reason == "length" for s in segments) else "stop"
