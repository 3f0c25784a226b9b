import logging

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .inproc import InProcessServer


@pytest.fixture(scope="session")
def server():
    """One demo-model server (gRPC and HTTP on one Runtime) for the HTTP-edge tests."""
    srv = InProcessServer(**{"engine.max_sessions": 8, "engine.max_batch_size": 8}).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def stub(server):
    return tts_pb2_grpc.TTSServiceStub(server.channel)


# Small http.* bounds, so that the tests of slow and silent clients see each one end
# within seconds (tests/http/test_slow_clients.py, test_hostile_inputs.py, test_fuzz.py).
BOUNDS = {"http.head_timeout_seconds": 2, "http.body_timeout_seconds": 2,
          "http.ws_config_timeout_seconds": 2, "http.max_pending_connections": 40,
          "http.max_body_bytes": 64 * 1024, "session.idle_timeout_seconds": 2,
          "session.stalled_consumer_timeout_seconds": 3}


@pytest.fixture(scope="session")
def bounded():
    """A demo-model server with small http.* bounds (BOUNDS). Its short KV slots cut every
    segment at about 1 s of audio: the fuzz speaks many requests, each of which would
    otherwise cost seconds of CPU."""
    srv = InProcessServer(**{"engine.max_sessions": 8, "engine.max_batch_size": 8,
                             "engine.max_seq_len": 160, **BOUNDS}).start()
    try:
        yield srv
    finally:
        srv.stop()


class ErrorRecords(logging.Handler):
    """Every log record at error level or above, from any logger (uvicorn's "Exception in
    ASGI application" included)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def error_logs(bounded):
    handler = ErrorRecords()
    logging.getLogger().addHandler(handler)
    try:
        yield handler.records
    finally:
        logging.getLogger().removeHandler(handler)
