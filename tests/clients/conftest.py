import pytest

from .fake_server import FakeServer
from .replicas import Replica


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


@pytest.fixture
def replicas():
    """make(name, serving=True, servicer_cls=FakeTTSServicer, **servicer_kwargs) -> Replica;
    all stopped at the end."""
    made: list[Replica] = []

    def make(*args, **kwargs) -> Replica:
        made.append(Replica(*args, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.stop()
