"""EngineLoop's own death (issue 36): a FatalBackendError or an exception past the loop's
handlers ends its thread and says why (EngineLoop.failure); an ordinary step error does
not; a watcher measures a long step without mistaking it for death."""

import threading
import time

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.status import Status
from orpheus_svc.core.step import FatalBackendError
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.codec import SimCodec
from orpheus_svc.engine.sim.faults import SimEngineDeath, SimFaults
from orpheus_svc.engine.sim.profiles import get_profile
from orpheus_svc.engine.watchdog import EngineWatch

from .test_faults import BAD_SEED, _Recorder, _request


def _engine(faults: SimFaults, sleep=lambda s: None):
    profile = get_profile("h100-fp8")
    backend = SimBackend(profile, num_slots=4, max_seq_len=1024, faults=faults, sleep=sleep)
    rec = _Recorder()
    flusher = Flusher(SimCodec(profile, sleep=lambda s: None), FlusherSettings(), rec)
    core = EngineLoop(backend, flusher, rec, settings=SchedulerSettings(max_batch_size=4), seed=1)
    flusher.start()
    core.start()
    return core, flusher, rec


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def _dies_of(faults: SimFaults, kind: type) -> None:
    core, flusher, rec = _engine(faults)
    try:
        core.submit(_request(0, 7))  # a healthy generation first: the engine runs
        assert _wait(lambda: rec.finished)
        core.submit(_request(1, BAD_SEED))
        assert _wait(lambda: core.failure is not None)
        assert isinstance(core.failure, kind)
        assert _wait(lambda: not core._thread.is_alive())
        assert core.beat.state[1] is False  # not "in a step" for a watcher: it is dead
        # a submit after the death is answered at once, not queued for nobody
        gid = core.submit(_request(2, 8))
        assert _wait(lambda: gid in rec.rejected)
        assert rec.rejected[gid].code == Status.UNAVAILABLE
    finally:
        core.stop()
        flusher.stop(timeout=10)


def test_a_fatal_backend_error_ends_the_engine_thread():
    _dies_of(SimFaults(fatal_error={BAD_SEED}), FatalBackendError)


def test_an_exception_past_the_loops_handlers_ends_the_engine_thread():
    _dies_of(SimFaults(engine_death={BAD_SEED}), SimEngineDeath)


def test_an_ordinary_step_error_fails_its_row_and_the_engine_lives_on():
    core, flusher, rec = _engine(SimFaults(step_error={BAD_SEED: 0}))
    try:
        bad = core.submit(_request(0, BAD_SEED))
        assert _wait(lambda: bad in rec.finished)
        assert rec.finished[bad].reason == "error"
        good = core.submit(_request(1, 7))
        assert _wait(lambda: good in rec.finished)
        assert rec.finished[good].reason == "stop" and core.failure is None
    finally:
        core.stop()
        flusher.stop(timeout=10)


def test_a_watcher_measures_a_long_step_and_resets_when_it_ends():
    release = threading.Event()
    core, flusher, rec = _engine(SimFaults(slow_step={BAD_SEED: 1.0}),
                                 sleep=lambda s: release.wait(30))
    watch = EngineWatch(core, max_gap=0.5)
    try:
        gid = core.submit(_request(0, BAD_SEED))
        assert _wait(lambda: core.beat.state[1])
        t0 = time.monotonic()
        for i in range(8):  # 8 ticks of 0.1 s inside one step
            watch.poll(t0 + 0.1 * i)
        assert abs(watch.stalled_s - 0.7) < 1e-9
        watch.poll(t0 + 60.7)  # the watcher itself was frozen: a gap counts max_gap at most
        assert abs(watch.stalled_s - 1.2) < 1e-9
        assert core.failure is None  # slow, not dead
        release.set()
        assert _wait(lambda: gid in rec.finished)
        assert _wait(lambda: watch.poll() == 0.0)  # between steps, or a new one just began
    finally:
        release.set()
        core.stop()
        flusher.stop(timeout=10)
