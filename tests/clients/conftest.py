import pytest

from .fake_server import FakeServer


@pytest.fixture
def fake():
    server = FakeServer("fake-a").start()
    yield server
    server.stop()


@pytest.fixture
def fake_pair():
    servers = [FakeServer("fake-a").start(), FakeServer("fake-b").start()]
    yield servers
    for s in servers:
        s.stop()
