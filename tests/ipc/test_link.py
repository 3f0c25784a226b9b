"""The engine side and the front-end side of the split topology, in one process, over real
ZeroMQ ipc:// sockets; the engine is a fake that answers each submit at once."""

import threading
import time

import numpy as np
import pytest
import zmq

from orpheus_svc.core.events import AudioEvent, Finish, Rejected
from orpheus_svc.core.output import SchedulerStats
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import english_registry
from orpheus_svc.engine.handle import GenerationHandle
from orpheus_svc.ipc import wire
from orpheus_svc.ipc.engine import EngineServer, identity
from orpheus_svc.ipc.frontend import ENGINE_GONE, connect

REQ = GenerationRequest("s", 0, (1, 2, 3), 70)
INFO = wire.EngineInfo("fake", False, "cpu", "sim", "sim", english_registry(), 8)


class FakeEngine:
    """Admits, sends one audio chunk and (unless hold) the final event, from the caller's thread."""

    def __init__(self, hold=False):
        self.router = None
        self.hold = hold
        self.submitted, self.cancelled = [], []

    def new_id(self):
        raise AssertionError("front-ends make the ids")

    def submit(self, request, gen_id=None):
        self.submitted.append((gen_id, request))
        events = [AudioEvent(gen_id, np.full(2048, 0.5, np.float32), 0)]
        if not self.hold:
            events.append(AudioEvent(gen_id, np.zeros(0, np.float32), 2048, True,
                                     Finish("stop", 3, 8, 1)))
        self.router(events)
        return gen_id

    def cancel(self, gen_id):
        self.cancelled.append(gen_id)
        self.router([AudioEvent(gen_id, np.zeros(0, np.float32), 2048, True,
                                Finish("cancelled", 3, 8, 1))])


def _snapshot():
    return wire.EngineSnapshot(True, SchedulerStats(1, 0, 7, 1, 8, 5, 4, 0, 0, 10, 70, 0), 0, 0,
                               INFO, 123)


@pytest.fixture
def addrs(tmp_path):
    return f"ipc://{tmp_path}/commands", f"ipc://{tmp_path}/events"


def _serve(addrs, fake, frontends=2, **kw):
    server = EngineServer(*addrs, frontends, **kw)
    fake.router = server.router
    server.start()
    server.serve(fake, _snapshot)
    return server


def _wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_events_reach_the_front_end_that_opened_the_generation(addrs):
    fake = FakeEngine()
    server = _serve(addrs, fake)
    links = [connect(*addrs, i) for i in range(2)]
    try:
        assert all(link.warm.wait(5) for link in links)
        got = {}
        for i, link in enumerate(links):
            with GenerationHandle(link.engine, link.router, REQ) as h:
                got[i] = (h.gen_id, list(h.events(5)))
        for i, (gen_id, events) in got.items():
            assert wire.frontend_of(gen_id) == i
            assert [type(e) for e in events] == [AudioEvent, AudioEvent]
            assert all(e.gen_id == gen_id for e in events)
            assert events[0].pcm.tolist() == [0.5] * 2048 and events[1].finish.reason == "stop"
        assert [g for g, _ in fake.submitted] == [got[0][0], got[1][0]]
        assert fake.submitted[0][1] == REQ and not fake.cancelled
        # GetStatus's view of the engine: the published snapshot
        eng = links[0].engine
        assert eng.stats().free_slots == 7 and eng.settings.max_batch_size == 8
        assert server.live(0) == 0 and server.live(1) == 0  # ended: no longer tracked
    finally:
        for link in links:
            link.close()
            link.engine.close()
        server.close()


def test_close_before_the_end_cancels_on_the_engine(addrs):
    fake = FakeEngine(hold=True)
    server = _serve(addrs, fake, frontends=1)
    link = connect(*addrs, 0)
    try:
        assert link.warm.wait(5)
        h = GenerationHandle(link.engine, link.router, REQ)
        events = h.events(5)
        assert isinstance(next(events), AudioEvent)
        assert server.live(0) == 1
        h.close()
        assert _wait(lambda: fake.cancelled == [h.gen_id])
        assert _wait(lambda: server.live(0) == 0)  # its (cancelled) end went out
    finally:
        link.close()
        link.engine.close()
        server.close()


def test_a_front_end_that_stops_reading_loses_its_generations_not_the_engine(addrs):
    fake = FakeEngine(hold=True)
    server = _serve(addrs, fake, frontends=1, send_hwm=4)
    ctx = zmq.Context.instance()
    dealer = ctx.socket(zmq.DEALER)  # a front-end that reads nothing for now
    dealer.setsockopt(zmq.IDENTITY, identity(0))
    dealer.setsockopt(zmq.RCVHWM, 4)
    dealer.connect(addrs[1])
    try:
        gen_id = wire.first_id(0)
        server._command(wire.encode_submit(gen_id, REQ))  # as if it came over the socket
        big = AudioEvent(gen_id, np.zeros(1 << 16, np.float32), 0)
        t0 = time.monotonic()
        for _ in range(20000):  # sends must never block: they fail once the queue is full
            server.send_events(0, [big])
            if server.dropped_batches[0]:
                break
        assert server.dropped_batches[0] and time.monotonic() - t0 < 30
        assert gen_id in fake.cancelled and server.live(0) == 0
        server.send_events(0, [big])  # later events of a lost generation are dropped
        lost = None
        deadline = time.monotonic() + 10
        while lost is None and time.monotonic() < deadline:  # drain; the notice comes after
            if dealer.poll(100):
                kind, body = wire.decode_message(dealer.recv())
                if kind == wire.LOST:
                    lost = body
        assert lost is not None and lost[0] == [gen_id] and "fell behind" in lost[1]
    finally:
        dealer.close(0)
        server.close()


def test_engine_gone_ends_open_generations_unavailable(addrs):
    fake = FakeEngine(hold=True)
    server = _serve(addrs, fake, frontends=1)
    down, gone = threading.Event(), threading.Event()
    link = connect(*addrs, 0, on_down=down.set, engine_gone=gone.is_set)
    try:
        assert link.warm.wait(5)
        h = GenerationHandle(link.engine, link.router, REQ)
        events = h.events(5)
        next(events)
        server.close()  # the engine process is gone: no more heartbeats
        gone.set()      # and the parent says so (app/topology.py)
        end = next(events)
        assert isinstance(end, Rejected) and end.code == Status.UNAVAILABLE
        assert end.reason == ENGINE_GONE and down.wait(2)
        # a generation opened now ends at once, UNAVAILABLE
        later = GenerationHandle(link.engine, link.router, REQ)
        assert [type(e) for e in later.events(2)] == [Rejected]
    finally:
        link.close()
        link.engine.close()
