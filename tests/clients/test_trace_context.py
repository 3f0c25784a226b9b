"""The client passes the caller's trace context on (W3C traceparent in gRPC metadata)
where opentelemetry-api is installed, and works the same without it (the package depends
on grpcio and protobuf only: this file runs in the compat venvs too)."""

import asyncio

import pytest

from orpheus_tts_client import _trace
from orpheus_tts_client.aio import AsyncClient
from orpheus_tts_client.client import Client


def test_without_opentelemetry_nothing_is_added(fake, monkeypatch):
    monkeypatch.setattr(_trace, "_propagate", None)
    with Client(fake.target) as tts:
        tts.synthesize("Hello.")
    assert "traceparent" not in fake.servicer.calls[-1].metadata


@pytest.fixture
def tracer():
    trace = pytest.importorskip("opentelemetry.trace")
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    return trace, sdk.TracerProvider().get_tracer("test")


def _ids(span):
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _continues(traceparent: str, trace_id: str, span_id: str) -> bool:
    """`traceparent` names this span, sampled (flags may carry more bits: W3C level 2)."""
    version, tid, sid, flags = traceparent.split("-")
    return (version, tid, sid) == ("00", trace_id, span_id) and int(flags, 16) & 1 == 1


def test_no_active_span_no_traceparent(fake, tracer):
    with Client(fake.target) as tts:
        tts.synthesize("Hello.")
    assert "traceparent" not in fake.servicer.calls[-1].metadata


def test_sync_calls_carry_the_current_span(fake, tracer):
    trace, t = tracer
    with Client(fake.target) as tts, t.start_as_current_span("agent turn") as span:
        tts.synthesize("Hello.")
        list(tts.stream(["Hi ", "there."]))
    trace_id, span_id = _ids(span)
    for call in fake.servicer.calls[-2:]:
        assert _continues(call.metadata["traceparent"], trace_id, span_id), call.method


def test_async_sessions_carry_the_span_they_were_opened_in(fake, tracer):
    trace, t = tracer

    async def main():
        async with AsyncClient(fake.target) as tts:
            with t.start_as_current_span("tts") as span:
                session = tts.session("tara")
            await session.send("Hello there.")
            await session.end()
            async for _ in session:
                pass
            return span

    trace_id, span_id = _ids(asyncio.run(main()))
    assert _continues(fake.servicer.calls[-1].metadata["traceparent"], trace_id, span_id)


def test_metadata_the_caller_sets_wins(fake, tracer):
    trace, t = tracer
    mine = "00-11111111111111111111111111111111-2222222222222222-01"
    with Client(fake.target, metadata=[("traceparent", mine)]) as tts, \
            t.start_as_current_span("agent turn"):
        tts.synthesize("Hello.")
    assert fake.servicer.calls[-1].metadata["traceparent"] == mine
