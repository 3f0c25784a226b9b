"""engine/collector.py: the cyclic collector runs at the engine's pace (between steps, full
passes when idle or rarely), and automatic collection is off exactly while engines run."""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orpheus_svc.engine.collector import CollectorPacer, CollectorSettings

ROOT = Path(__file__).resolve().parents[2]


class FakeGC:
    def __init__(self) -> None:
        self.enabled = True
        self.calls: list[int] = []
        self.count = 0

    def isenabled(self) -> bool:
        return self.enabled

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def collect(self, generation: int = 2) -> int:
        self.calls.append(generation)
        self.count = 0
        return 0

    def get_count(self):
        return (self.count, 0, 0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _pacer(**kw):
    fake, clock = FakeGC(), Clock()
    return CollectorPacer(CollectorSettings(**kw), clock=clock, collector=fake), fake, clock


def test_young_and_middle_passes_follow_the_steps():
    pacer, fake, clock = _pacer(young_every=2, middle_every=8)
    pacer.start()
    for _ in range(16):
        clock.t += 0.006
        pacer.after_step()
    assert fake.calls == [0, 0, 0, 1, 0, 0, 0, 1]
    assert pacer.passes == [6, 2, 0]
    pacer.stop()


def test_unbroken_load_gets_a_full_pass_every_max_interval():
    pacer, fake, clock = _pacer(young_every=2, middle_every=8, full_max_interval_s=1.0)
    pacer.start()
    for _ in range(400):  # 2.4 s of steps, never idle
        clock.t += 0.006
        pacer.after_step()
    assert fake.calls.count(2) == 2
    pacer.stop()


def test_an_idle_engine_gets_a_full_pass_once_it_has_been_idle_a_while():
    pacer, fake, clock = _pacer(full_after_idle_s=0.1, full_min_interval_s=60.0)
    pacer.start()
    clock.t += 100.0
    pacer.after_step()
    assert pacer.idle_timeout() == pytest.approx(0.1)
    clock.t += 0.05
    pacer.on_idle()
    assert 2 not in fake.calls  # idle for only 50 ms
    clock.t += 0.06
    pacer.on_idle()
    assert fake.calls[-1] == 2
    # nothing stepped or allocated since: the next idle wake-up collects nothing
    assert pacer.idle_timeout() == 1.0
    clock.t += 120.0
    pacer.on_idle()
    assert fake.calls.count(2) == 1
    fake.count = 5  # the front-end allocated meanwhile (health checks, refused calls)
    pacer.on_idle()
    assert fake.calls.count(2) == 2
    fake.count = 800  # within the minute after a full pass: young and middle only
    clock.t += 1.0
    pacer.on_idle()
    assert fake.calls[-1] == 1 and fake.calls.count(2) == 2
    clock.t += 1.0
    pacer.on_idle()  # nothing new since
    assert fake.calls == [2, 2, 1]
    pacer.stop()


def test_full_passes_are_at_least_min_interval_apart():
    pacer, fake, clock = _pacer(full_after_idle_s=0.1, full_min_interval_s=60.0)
    pacer.start()
    for _ in range(3):
        pacer.after_step()
        clock.t += 1.0  # idle for a second after each burst
        pacer.on_idle()
    assert fake.calls.count(2) == 0  # started 3 s ago: a full pass waits for the interval
    assert pacer.idle_timeout() == 1.0  # woken every second meanwhile
    pacer.stop()


def test_automatic_collection_is_off_while_any_pacer_runs_and_restored_after():
    fake = FakeGC()
    a, b = (CollectorPacer(collector=fake, clock=Clock()) for _ in range(2))
    a.start()
    b.start()
    a.stop()
    assert not fake.enabled
    b.stop()
    assert fake.enabled
    fake.enabled = False  # a process that had turned it off itself keeps it off
    a.start()
    a.stop()
    assert not fake.enabled


def test_stop_is_idempotent_and_leaves_other_pacers_alone():
    fake = FakeGC()
    a, b = (CollectorPacer(collector=fake, clock=Clock()) for _ in range(2))
    a.start()
    a.start()  # once only
    b.start()
    a.stop()
    a.stop()  # the engine thread's own stop after EngineLoop.stop gave up waiting for it
    assert not fake.enabled  # b still runs
    b.stop()
    assert fake.enabled


class Frames:
    def __init__(self):
        self.done = []

    def push_many(self, pushes):
        self.done += [p.gen_id for p in pushes if p.finish is not None]

    def drop(self, gen_id, finish=None):
        self.done.append(gen_id)


def _sim_engine(pacer, sleep=lambda s: None, **settings):
    from orpheus_svc.core.scheduler_settings import SchedulerSettings
    from orpheus_svc.engine.loop import EngineLoop
    from orpheus_svc.engine.sim.backend import SimBackend
    from orpheus_svc.engine.sim.profiles import get_profile

    sink = Frames()
    backend = SimBackend(get_profile("h100-fp8"), 4, 1024, sleep=sleep)
    engine = EngineLoop(backend, sink, lambda events: None, seed=1, collector=pacer,
                        settings=SchedulerSettings(**settings))
    return engine, backend, sink


def _request(frames=9, tokens=70):
    from orpheus_svc.core.request import GenerationRequest, SamplingParams
    return GenerationRequest("s", 0, tuple(range(20)), tokens, SamplingParams(seed=1),
                             expected_frames=frames)


def test_an_engine_stuck_in_a_step_at_stop_gives_collection_back():
    import threading
    fake, entered, release = FakeGC(), threading.Event(), threading.Event()

    def stuck(_seconds):  # the device never answers until released
        entered.set()
        release.wait(10)

    engine, _, _ = _sim_engine(CollectorPacer(collector=fake), sleep=stuck)
    engine.start()
    engine.submit(_request())
    assert entered.wait(10) and not fake.enabled
    engine.stop(timeout=0.2)
    assert fake.enabled  # not left off until the stuck thread ends
    release.set()
    engine._thread.join(10)
    assert not engine._thread.is_alive() and fake.enabled


def test_waiting_on_generations_that_cannot_run_is_idle_time_for_the_collector():
    class Spy(CollectorPacer):
        def __init__(self):
            super().__init__(collector=FakeGC())
            self.after, self.idle = 0, 0

        def after_step(self):
            self.after += 1

        def on_idle(self):
            self.idle += 1

    spy = Spy()
    # the sim runs far faster than real time: the generation soon has more than the
    # horizon buffered and is parked until its listener catches up
    engine, backend, sink = _sim_engine(spy, max_ahead_seconds=0.2)
    engine.start()
    try:
        gid = engine.submit(_request(frames=30, tokens=7 * 30))
        deadline = time.monotonic() + 20
        while gid not in sink.done and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gid in sink.done
    finally:
        engine.stop()
    assert spy.idle > 0  # it waited for the listener
    assert spy.after == backend.counters["steps"]  # one pass chance per real step, no more


def test_an_engine_with_a_pacer_turns_the_real_collector_off_only_while_it_runs():
    """In a fresh interpreter: in this one another test's server may hold automatic
    collection off for the whole run (tests/http's session-scoped servers do, and under
    pytest-xdist any of them may run before this test in the same worker)."""
    run = subprocess.run([sys.executable, "-c", "from tests.engine.test_collector import "
                          "_real_collector_check as check; check()"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]


def _real_collector_check() -> None:
    assert gc.isenabled()
    pacer = CollectorPacer()
    engine, backend, sink = _sim_engine(pacer)
    engine.start()
    try:
        gid = engine.submit(_request())
        deadline = time.monotonic() + 10
        while gid not in sink.done and time.monotonic() < deadline:
            assert not gc.isenabled()
            time.sleep(0.001)
        assert gid in sink.done
    finally:
        engine.stop()
    assert gc.isenabled()
    steps = backend.counters["steps"]
    assert steps > 20 and pacer.passes[0] + pacer.passes[1] >= steps // 2 - 1
