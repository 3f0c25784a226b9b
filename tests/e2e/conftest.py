from pathlib import Path

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .server_proc import ServerProcess

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    """Every test under tests/e2e is marked `e2e` (`pytest -m e2e` runs this tier alone,
    `-m "not e2e"` the rest). The hook sees the whole session's items, hence the path test."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One demo-model server shared by the e2e tests that don't stop or fill it."""
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), "engine.max_sessions=32",
                        "engine.max_batch_size=32", "text.max_text_chars=2000", name="shared")
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def stub(server):
    return tts_pb2_grpc.TTSServiceStub(server.channel)
