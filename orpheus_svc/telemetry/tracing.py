"""Tracing set-up, configured as every OpenTelemetry SDK is: by its environment variables.

    OTEL_TRACES_EXPORTER         otlp | console | none (a comma list); unset: tracing OFF
    OTEL_EXPORTER_OTLP_PROTOCOL  grpc (default, as Python's SDK) | http/protobuf
                                 (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins when set)
    OTEL_EXPORTER_OTLP_ENDPOINT  (and _TRACES_ENDPOINT, _HEADERS, _TIMEOUT...): read by the
                                 exporter itself
    OTEL_SERVICE_NAME            default "orpheus-svc"; OTEL_RESOURCE_ATTRIBUTES as usual
    OTEL_TRACES_SAMPLER[_ARG]    read by the SDK (default parentbased_always_on), unless
                                 telemetry.trace_sample_ratio is set
    OTEL_SDK_DISABLED=true       off whatever else says
    OTEL_BSP_*                   the batch span processor's queue and delay

One deliberate difference from the SDK's defaults: with OTEL_TRACES_EXPORTER unset the SDK
would export OTLP to localhost; here tracing stays off, so a server that nobody configured
for tracing imports no OpenTelemetry module and pays nothing for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

SERVICE_NAME = "orpheus-svc"
EXPORTERS = ("otlp", "console")
PROTOCOLS = ("grpc", "http/protobuf")


class TracingError(ValueError):
    """An OTEL_* variable has a value this server cannot use; the message names it."""


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The span exporters the environment asks for ([] = tracing off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n and n != "none"]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise TracingError(f"OTEL_TRACES_EXPORTER: unknown exporter {unknown[0]!r} "
                           f"(this server has {', '.join(EXPORTERS)} and none)")
    return names


def check_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment turns tracing on; TracingError for an exporter or protocol
    this server cannot use (checked before any process starts: app/server.py)."""
    environ = os.environ if environ is None else environ
    names = exporter_names(environ)
    if "otlp" in names:
        _protocol(environ)
    return bool(names)


def _protocol(environ: Mapping[str, str]) -> str:
    proto = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
             or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip().lower()
    if proto not in PROTOCOLS:
        raise TracingError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {proto!r} is not one of "
                           f"{', '.join(PROTOCOLS)}")
    return proto


@dataclass
class Tracing:
    """A started tracer: `tracer` makes spans, `extract` reads a caller's W3C context
    (traceparent, tracestate) from headers or gRPC metadata, `traceparent` writes one for
    a span (what the split topology sends to its engine process), `trace_text` says whether
    spans may carry the text. `shutdown` exports what is queued (call it at exit)."""

    tracer: Any
    provider: Any
    trace_text: bool = False

    def extract(self, carrier: Mapping[str, str]) -> Any:
        """The OpenTelemetry Context of the caller's traceparent (empty: a new trace)."""
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        return TraceContextTextMapPropagator().extract(carrier)

    def traceparent(self, span: Any) -> str:
        """`span`'s W3C traceparent header value ("" for a span that is not recorded)."""
        ctx = span.get_span_context()
        if not ctx.is_valid:
            return ""
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    def parent_of(self, traceparent: str) -> Any:
        """The Context whose parent is the span a traceparent names (from another process)."""
        return self.extract({"traceparent": traceparent}) if traceparent else None

    def shutdown(self) -> None:
        try:
            self.provider.force_flush(5000)
        finally:
            self.provider.shutdown()


def start_tracing(*, trace_text: bool = False, sample_ratio: float | None = None,
                  role: str = "server", environ: Mapping[str, str] | None = None,
                  attributes: Mapping[str, Any] | None = None) -> Tracing | None:
    """The process's Tracing, or None when the environment leaves tracing off (nothing of
    OpenTelemetry is imported then). `sample_ratio`: sample this share of new traces and
    follow a caller's sampled flag (ParentBased(TraceIdRatioBased)); None: the
    OTEL_TRACES_SAMPLER variables decide. `role` ("server", "engine", "frontend-1"...) is
    the resource attribute orpheus.process, which tells a split topology's processes
    apart. TracingError for an exporter or protocol this server cannot use."""
    environ = os.environ if environ is None else environ
    names = exporter_names(environ)
    if not names:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:  # the server extra has them; a bare library install may not
        raise TracingError(f"OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not "
                           f"installed ({exc}); install orpheus-svc[server]") from exc
    from orpheus_svc import __version__

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    resource = resource.merge(Resource({"service.version": __version__, "orpheus.process": role,
                                        "process.pid": os.getpid(), **(attributes or {})}))
    sampler = None if sample_ratio is None else ParentBased(TraceIdRatioBased(sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    for exporter in _exporters(names, environ):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider.get_tracer("orpheus_svc"), provider, trace_text)


def _exporters(names: Iterable[str], environ: Mapping[str, str]) -> list:
    out = []
    for name in names:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter
            out.append(ConsoleSpanExporter())
        elif _protocol(environ) == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            out.append(OTLPSpanExporter())
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            out.append(OTLPSpanExporter())
    return out
