"""The caller's trace context on every call, when OpenTelemetry's API is installed.

The client depends on grpcio and protobuf only. Where ``opentelemetry-api`` is importable
(Pipecat's and LiveKit's tracing install it; so does any OpenTelemetry set-up), each call
carries the current span's W3C context (``traceparent``, ``tracestate``, ``baggage``: the
globally configured propagators, OTEL_PROPAGATORS) as gRPC metadata, so the server's span
for the call is a child of the caller's (docs/observability.md). With no span active, or
without the package, nothing is added. Metadata the caller passes itself wins.
"""

from __future__ import annotations

from typing import Sequence

try:  # optional: never a dependency of this package
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - depends on the environment
    _propagate = None


def trace_metadata(metadata: Sequence[tuple[str, str]] = ()) -> tuple[tuple[str, str], ...]:
    """The current trace context as metadata pairs, less keys `metadata` already has."""
    if _propagate is None:
        return ()
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    if not carrier:
        return ()
    given = {k.lower() for k, _ in metadata}
    return tuple((k.lower(), v) for k, v in carrier.items() if k.lower() not in given)
