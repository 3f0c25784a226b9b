"""One sim-backend server with tracing and metrics on, shared by the trace and dashboard
tests: its spans go to an in-process OTLP/gRPC receiver (otlp.py), its metrics port is
scraped by a real Prometheus (test_dashboard.py)."""

from __future__ import annotations

import pytest

from tests.e2e.server_proc import ServerProcess, free_port

from .otlp import Receiver

# spans leave the batch processor within 0.1 s (the SDK's default waits 5 s)
OTEL_ENV = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "orpheus-svc-test"}
SIM = ("engine.backend=sim", "engine.sim_codec=true", "engine.max_sessions=16",
       "engine.max_batch_size=16", "server.drain_delay_seconds=0")


@pytest.fixture(scope="session")
def receiver():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def observed(tmp_path_factory, receiver):
    """The server: gRPC, HTTP (http_port) and metrics (metrics_port), tracing to `receiver`."""
    mport, hport = free_port(), free_port()
    srv = ServerProcess(tmp_path_factory.mktemp("observed"), *SIM,
                        f"server.metrics_port={mport}", "server.metrics_host=127.0.0.1",
                        f"server.http_port={hport}", name="observed",
                        env={**OTEL_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    srv.metrics_port, srv.http_port = mport, hport
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()
