"""The single topology's engine guard (server/engine_guard.py) and the split parent's view
of a wedged engine process (app/topology.py), driven with fakes and short bounds: what a
stall and a death do, in order (issue 36)."""

import asyncio

from orpheus_svc.app import topology
from orpheus_svc.app.supervision import EXIT_ENGINE_FAILED
from orpheus_svc.config import load_config
from orpheus_svc.core.events import Rejected
from orpheus_svc.core.status import Status
from orpheus_svc.engine.handle import EventRouter
from orpheus_svc.engine.watchdog import StallPolicy, StepBeat
from orpheus_svc.server.engine_guard import EngineGuard


class FakeEngine:
    def __init__(self):
        self.beat = StepBeat()
        self.failure = None
        self.cancelled = []

    def cancel(self, gen_id):
        self.cancelled.append(gen_id)


def _guarded(policy, script):
    """Run an EngineGuard over a FakeEngine with generations 1 and 2 routed; `script`
    (a coroutine function of engine, router) drives it. Returns what the guard did."""
    engine, router = FakeEngine(), EventRouter()
    got, health, fatal = [], [], []
    for gen_id in (1, 2):
        router.register(gen_id, got.append)

    async def set_health(ok):
        health.append(ok)

    async def main():
        guard = EngineGuard(engine, router, policy, set_health=set_health,
                            on_fatal=fatal.append, tick=0.02)
        task = asyncio.create_task(guard.run())
        await script(engine, router)
        task.cancel()
    asyncio.run(main())
    return engine, got, health, fatal


def test_a_stall_turns_health_then_ends_the_calls_and_a_step_turns_it_back():
    async def script(engine, router):
        engine.beat.begin()  # one step that runs 0.5 s
        await asyncio.sleep(0.5)
        engine.beat.end()
        await asyncio.sleep(0.1)

    engine, got, health, fatal = _guarded(StallPolicy(0.3, not_serving_after_s=0.1), script)
    assert health == [False, True] and not fatal
    assert [type(e) for e in got] == [Rejected, Rejected]
    assert all(e.code == Status.UNAVAILABLE and "no progress" in e.reason for e in got)
    assert sorted(engine.cancelled) == [1, 2]  # freed on the engine once it steps again


def test_a_short_step_is_waited_for():
    async def script(engine, router):
        engine.beat.begin()
        await asyncio.sleep(0.15)
        engine.beat.end()
        await asyncio.sleep(0.1)

    engine, got, health, fatal = _guarded(StallPolicy(0.5, not_serving_after_s=0.3), script)
    assert health == [] and got == [] and not fatal and not engine.cancelled


def test_a_dead_engine_thread_ends_every_call_and_is_fatal():
    async def script(engine, router):
        await asyncio.sleep(0.05)
        engine.failure = RuntimeError("boom")
        await asyncio.sleep(0.1)

    engine, got, health, fatal = _guarded(StallPolicy(10.0), script)
    assert len(fatal) == 1 and "engine thread died: RuntimeError: boom" in fatal[0]
    assert [e.code for e in got] == [Status.UNAVAILABLE] * 2


def test_a_step_that_never_ends_is_fatal_at_the_exit_bound():
    async def script(engine, router):
        engine.beat.begin()
        await asyncio.sleep(0.6)

    engine, got, health, fatal = _guarded(StallPolicy(0.1, 0.4), script)
    assert len(fatal) == 1 and "engine_stall_exit_seconds" in fatal[0]


class FakeProcess:
    pid = 12345
    exitcode = None

    def __init__(self):
        self.killed = False

    def kill(self):
        self.killed = True
        self.exitcode = -9

    def join(self, timeout=None):
        pass


def _supervisor(monkeypatch, tmp_path, stopped):
    config = load_config(overrides={"engine.backend": "sim", "server.topology": "split",
                                    "server.engine_stall_timeout_seconds": 1,
                                    "server.engine_stall_exit_seconds": 2})
    import multiprocessing
    sup = topology._Supervisor(config, multiprocessing.get_context("spawn"),
                               f"ipc://{tmp_path}/c", f"ipc://{tmp_path}/e", None)
    sup.engine = FakeProcess()
    sup.fronts = [None, None]
    monkeypatch.setattr(topology, "_stopped", lambda pid: stopped[0])
    return sup


def test_the_parent_kills_an_engine_process_that_stopped_beating(monkeypatch, tmp_path):
    """No heartbeat for server.engine_stall_exit_seconds (the process cannot even run its
    own watchdog: a wedge that holds the GIL): killed, and the server exits 4. Time it
    spent stopped by a signal (SIGSTOP) does not count."""
    stopped = [False]
    sup = _supervisor(monkeypatch, tmp_path, stopped)
    assert sup.tick(0.0) is None  # not serving yet: no heartbeat, no judgement
    sup.shared.engine_beat.value = 100.0
    t = 0.0
    for _ in range(15):  # 1.5 s silent
        t += 0.1
        assert sup.tick(t) is None
    stopped[0] = True  # SIGSTOP: paused on purpose
    for _ in range(30):
        t += 0.1
        assert sup.tick(t) is None
    stopped[0] = False
    for _ in range(15):
        t += 0.1
        assert sup.tick(t) is None
    sup.shared.engine_beat.value = 101.0  # a beat: silence starts again from 0
    ticks, code = 0, None
    while code is None and ticks < 50:
        t += 0.1
        ticks += 1
        code = sup.tick(t)
    assert code == EXIT_ENGINE_FAILED and 20 <= ticks <= 23  # 2 s after the last beat
    assert sup.engine.killed and sup.shared.engine_gone.is_set()
