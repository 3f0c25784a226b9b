"""Slow is not dead, and a restarted front-end is a new one: the engine side and the
front-end side of the split topology in one process, over real ZeroMQ ipc:// sockets, with
the fake engine of test_link.py (issue 36)."""

import threading

import numpy as np

from orpheus_svc.core.events import AudioEvent, Rejected
from orpheus_svc.core.status import Status
from orpheus_svc.engine.handle import GenerationHandle
from orpheus_svc.engine.watchdog import StallPolicy
from orpheus_svc.ipc import wire
from orpheus_svc.ipc.engine import EngineServer
from orpheus_svc.ipc.frontend import connect

from .test_link import REQ, FakeEngine, _snapshot, _wait, addrs  # noqa: F401 - a fixture


class Health:
    def __init__(self):
        self.seen = []

    def __call__(self, ok):
        self.seen.append(ok)


def _close(link, server):
    link.close()
    link.engine.close()
    server.close()


def test_a_silent_engine_is_stalled_not_dead_and_serves_again_when_it_speaks(addrs):
    """No heartbeat for the stall timeout (the engine process frozen): open generations end
    UNAVAILABLE and are cancelled on the engine, but the engine is not given up: when its
    heartbeats come back, health turns SERVING and a new generation runs."""
    fake = FakeEngine(hold=True)
    server = EngineServer(*addrs, 1)
    fake.router = server.router
    server.start()
    server.serve(fake, _snapshot)
    health = Health()
    link = connect(*addrs, 0, on_health=health, policy=StallPolicy(1.0))
    try:
        assert link.warm.wait(5)
        h = GenerationHandle(link.engine, link.router, REQ)
        events = h.events(5)
        assert isinstance(next(events), AudioEvent)
        server.publish_stats = lambda: None  # frozen: no heartbeat from now on
        end = next(events)
        assert isinstance(end, Rejected) and end.code == Status.UNAVAILABLE
        assert "no progress" in end.reason and "engine_stall_timeout_seconds" in end.reason
        assert health.seen == [False] and not link.engine.down
        assert _wait(lambda: fake.cancelled == [h.gen_id])  # its slot frees if it steps again
        del server.publish_stats  # it wakes up
        assert _wait(lambda: health.seen == [False, True])
        fake.hold = False
        with GenerationHandle(link.engine, link.router, REQ) as later:
            kinds = [type(e) for e in later.events(5)]
        assert kinds == [AudioEvent, AudioEvent]
    finally:
        _close(link, server)


def test_a_long_step_with_heartbeats_waits_until_the_stall_timeout(addrs):
    """The heartbeat says how long the current step has run: under the timeout the call
    waits (health NOT_SERVING past 2 s of it), past it the call ends."""
    fake = FakeEngine(hold=True)
    stalled = [0.0]
    server = EngineServer(*addrs, 1, stats_interval=0.05)
    fake.router = server.router
    server.start()
    server.serve(fake, lambda: wire.EngineSnapshot(**{**_snapshot().__dict__,
                                                      "stalled_s": stalled[0]}))
    health = Health()
    link = connect(*addrs, 0, on_health=health, policy=StallPolicy(4.0))
    try:
        assert link.warm.wait(5)
        h = GenerationHandle(link.engine, link.router, REQ)
        events = h.events(1)
        next(events)
        stalled[0] = 3.0  # a 3 s step so far: slow
        assert _wait(lambda: health.seen == [False])
        ended = []
        threading.Thread(target=lambda: ended.extend(h.events(10)), daemon=True).start()
        assert not _wait(lambda: ended, timeout=0.5)  # still waiting
        stalled[0] = 0.0  # the step ended
        assert _wait(lambda: health.seen == [False, True])
        stalled[0] = 4.5  # the next one runs past the timeout
        assert _wait(lambda: ended)
        assert ended[0].code == Status.UNAVAILABLE and "no progress" in ended[0].reason
    finally:
        _close(link, server)


def test_a_restarted_front_end_gets_a_clean_slate(addrs):
    """The parent raises a front-end's incarnation when it dies: the engine cancels what
    the dead process had open and ignores its late commands; the new process, under the
    same index and identity, opens ids of its own and is served."""
    fake = FakeEngine(hold=True)
    incarnations = [0]
    server = EngineServer(*addrs, 1, incarnation=incarnations.__getitem__)
    fake.router = server.router
    server.start()
    server.serve(fake, _snapshot)
    old = connect(*addrs, 0)
    new = None
    try:
        assert old.warm.wait(5)
        h = GenerationHandle(old.engine, old.router, REQ)
        events = h.events(5)
        next(events)
        assert server.live(0) == 1
        old.close()  # the process dies (SIGKILL: its sockets close, nothing is said)
        old.engine.close()
        incarnations[0] = 1  # the parent saw it die
        assert _wait(lambda: fake.cancelled == [h.gen_id]) and server.live(0) == 0
        server._command(wire.encode_submit(h.gen_id + 1, REQ))  # still in flight: ignored
        assert len(fake.submitted) == 1
        fake.hold = False
        new = connect(*addrs, 0, incarnation=1)
        assert new.warm.wait(5)  # the identity was handed over: heartbeats reach it
        with GenerationHandle(new.engine, new.router, REQ) as later:
            kinds = [type(e) for e in later.events(5)]
        assert kinds == [AudioEvent, AudioEvent]
        assert wire.incarnation_of(later.gen_id) == 1 and wire.frontend_of(later.gen_id) == 0
        assert later.gen_id != h.gen_id
    finally:
        if new is not None:
            new.close()
            new.engine.close()
        server.close()


def test_ids_carry_the_front_end_and_its_incarnation():
    assert wire.first_id(0) == wire.REMOTE_BASE
    for index, inc in ((0, 0), (1, 1), (63, 255), (2, 256)):
        gid = wire.first_id(index, inc) + 12345
        assert wire.frontend_of(gid) == index and wire.incarnation_of(gid) == inc % 256
    last = wire.first_id(3, 7) + wire.ID_SPAN - 1  # the counter never spills into the rest
    assert wire.frontend_of(last) == 3 and wire.incarnation_of(last) == 7
    assert np.int64(wire.first_id(63, 255) + wire.ID_SPAN - 1) > 0  # fits the engine's arrays
