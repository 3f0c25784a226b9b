"""The caller's trace context on every call, when OpenTelemetry's API is installed.

The client depends on grpcio and protobuf only. Where ``opentelemetry-api`` is importable
(Pipecat's and LiveKit's tracing install it; so does any OpenTelemetry set-up), each call
carries the current span's W3C context (``traceparent``, ``tracestate``, ``baggage``: the
globally configured propagators, OTEL_PROPAGATORS) as gRPC metadata, so the server's span
for the call is a child of the caller's (docs/observability.md). With no span active, or
without the package, nothing is added. Metadata the caller passes itself wins.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

# opentelemetry.propagate once it was found (None: not installed); imported only when the
# application has loaded OpenTelemetry itself (there can be no current span otherwise), so
# importing the client never imports it.
_propagate: Any = False


def _propagator() -> Any:
    global _propagate
    if _propagate is False:
        if "opentelemetry.context" not in sys.modules:
            return None
        try:  # optional: never a dependency of this package
            from opentelemetry import propagate
        except ImportError:  # pragma: no cover - depends on the environment
            propagate = None
        _propagate = propagate
    return _propagate


def trace_metadata(metadata: Sequence[tuple[str, str]] = ()) -> tuple[tuple[str, str], ...]:
    """The current trace context as metadata pairs, less keys `metadata` already has."""
    propagate = _propagator()
    if propagate is None:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return ()
    given = {k.lower() for k, _ in metadata}
    return tuple((k.lower(), v) for k, v in carrier.items() if k.lower() not in given)
