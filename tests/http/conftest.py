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
