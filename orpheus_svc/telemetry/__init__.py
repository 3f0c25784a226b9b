"""Tracing (OpenTelemetry): set-up from the standard OTEL_* variables, and the spans the
split topology's engine process adds. Off by default; docs/observability.md.

A leaf layer: it imports OpenTelemetry (only when tracing is on) and nothing of the server,
so the edges (server/, http/), the engine process (ipc/) and the app can all use it.
"""
