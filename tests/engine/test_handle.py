"""GenerationHandle and EventRouter: one routine to open a generation, one wake-up per batch,
exactly one end per stream, close() idempotent and cancelling only what has not ended."""

import threading

import numpy as np
import pytest

from orpheus_svc.core.events import AudioEvent, Finish, Rejected
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.engine.handle import EventRouter, GenerationHandle, is_end

REQ = GenerationRequest("s", 0, (1, 2, 3), 70)
DONE = Finish("stop", 3, 15, 2)


class FakeEngine:
    def __init__(self):
        self.next, self.submitted, self.cancelled = 0, [], []

    def new_id(self):
        self.next += 1
        return self.next

    def submit(self, request, gen_id=None):
        self.submitted.append((gen_id, request))
        return gen_id

    def cancel(self, gen_id):
        self.cancelled.append(gen_id)


class FakeLoop:
    """Counts call_soon_threadsafe; runs the callbacks when told."""

    def __init__(self):
        self.calls = []

    def is_closed(self):
        return False

    def call_soon_threadsafe(self, fn, *args):
        self.calls.append((fn, args))

    def run(self):
        calls, self.calls = self.calls, []
        for fn, args in calls:
            fn(*args)
        return len(calls)


def audio(gid, offset, n, finish=None):
    return AudioEvent(gid, np.zeros(n, np.float32), offset, final=finish is not None,
                      finish=finish)


def test_open_routes_before_it_submits_and_a_batch_wakes_the_loop_once():
    engine, router, loop = FakeEngine(), EventRouter(), FakeLoop()
    got = []
    a = GenerationHandle(engine, router, REQ, got.append, loop)
    b = GenerationHandle(engine, router, REQ, got.append, loop)
    assert [g for g, _ in engine.submitted] == [a.gen_id, b.gen_id]
    router([audio(a.gen_id, 0, 4), audio(b.gen_id, 0, 4),
            audio(a.gen_id, 4, 0, DONE), audio(99, 0, 4)])  # 99: nobody's
    assert loop.run() == 1  # one wake-up for the whole batch
    assert [(e.gen_id, type(e).__name__) for e in got] == [
        (a.gen_id, "AudioEvent"), (b.gen_id, "AudioEvent"), (a.gen_id, "AudioEvent")]
    assert a.ended and not b.ended


def test_nothing_follows_the_end_and_close_cancels_only_what_has_not_ended():
    engine, router, loop = FakeEngine(), EventRouter(), FakeLoop()
    got = []
    a = GenerationHandle(engine, router, REQ, got.append, loop)
    b = GenerationHandle(engine, router, REQ, got.append, loop)
    router([audio(a.gen_id, 0, 0, DONE), audio(a.gen_id, 0, 4)])
    loop.run()
    assert len(got) == 1 and is_end(got[0])
    a.close()
    b.close()
    b.close()  # idempotent
    assert engine.cancelled == [b.gen_id]
    router([audio(b.gen_id, 0, 4)])  # after close: not routed
    assert loop.run() == 0 and len(got) == 1


def test_a_rejected_generation_ends_with_its_rejection():
    engine, router = FakeEngine(), EventRouter()
    with GenerationHandle(engine, router, REQ) as gen:
        router([Rejected(gen.gen_id, "full")])
        assert [type(e) for e in gen.events(timeout=1)] == [Rejected]
    assert gen.ended and engine.cancelled == []


def test_a_thread_reads_the_events_of_a_handle_without_on_event():
    engine, router = FakeEngine(), EventRouter()
    with GenerationHandle(engine, router, REQ) as gen:
        def produce():
            for k in range(3):
                router([audio(gen.gen_id, 4 * k, 4)])
            router([audio(gen.gen_id, 12, 0, DONE)])

        threading.Thread(target=produce).start()
        events = list(gen.events(timeout=10))
    assert [e.sample_offset for e in events] == [0, 4, 8, 12] and events[-1].finish == DONE
    with GenerationHandle(engine, router, REQ) as idle:
        with pytest.raises(TimeoutError):
            next(idle.events(timeout=0.01))
    assert engine.cancelled == [idle.gen_id]
