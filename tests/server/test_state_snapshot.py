"""ServerState for other threads (metrics read a snapshot the loop computes), GetStatus's
effective batch size, and the status enum's one mapping per edge."""

import asyncio
import threading
from types import SimpleNamespace

import grpc

from orpheus_svc.config import load_config
from orpheus_svc.core.output import SchedulerStats
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.status import Status
from orpheus_svc.http.errors import STATUS, ApiError
from orpheus_svc.server.servicer import GRPC_STATUS
from orpheus_svc.core.errors import SessionError
from orpheus_svc.server.state import MetricsSnapshot, OpenCall, ServerState


def _runtime(max_batch_size):
    stats = SchedulerStats(active=1, waiting=0, free_slots=3, used_slots=1, total_slots=4,
                           submitted=5, finished=4, cancelled=0, rejected=0, steps=9, tokens=70,
                           grammar_violations=0, underrun_risk=1, row_budget=37)
    engine = SimpleNamespace(stats=lambda: stats, failed_rows=0,
                             settings=SchedulerSettings(max_batch_size=max_batch_size))
    return SimpleNamespace(engine=engine, router=SimpleNamespace(failed_audio=0),
                           model_name="fake")


class _LoopThread:
    def __enter__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        return self

    def run(self, fn):
        return asyncio.run_coroutine_threadsafe(_call(fn), self.loop).result(5)

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def _call(fn):
    return fn()


def test_a_scrape_reads_a_snapshot_the_loop_computed():
    with _LoopThread() as lt:
        state = lt.run(lambda: ServerState(load_config(environ={}, overrides={
            "session.idle_timeout_seconds": 0, "session.stalled_consumer_timeout_seconds": 0})))
        assert state.loop is lt.loop  # built on its loop: that loop owns it
        state.runtime = _runtime(8)
        lt.run(lambda: state.open_call(OpenCall("a", "Synthesize", None)))
        lt.run(lambda: state.count_error("INVALID_ARGUMENT"))
        lt.run(lambda: state.count_error(Status.INVALID_ARGUMENT))
        computed_on = []
        real_status = state.status
        state.status = lambda: computed_on.append(threading.current_thread()) or real_status()
        snap = state.snapshot()  # from this (the scrape's) thread
        assert computed_on == [lt.thread]
        assert isinstance(snap, MetricsSnapshot)
        assert snap.status.active_sessions == 1 and snap.underrun_risk == 1
        assert snap.row_budget == 37
        assert snap.errors == (("INVALID_ARGUMENT", 2),)
        lt.run(lambda: state.count_error(Status.INTERNAL))
        assert snap.errors == (("INVALID_ARGUMENT", 2),)  # frozen: later changes not in it
    # the loop is gone (shutdown): the last published snapshot, not the live state
    assert state.snapshot(timeout=0.1) is state._published


def test_a_snapshot_before_the_loop_ever_answered_is_the_empty_state():
    state = ServerState(load_config(environ={}))
    state.loop = asyncio.new_event_loop()
    state.loop.close()
    snap = state.snapshot(timeout=0.1)
    assert snap.status.active_sessions == 0 and snap.errors == () and not snap.status.serving


def test_get_status_reports_the_engine_s_effective_batch_size_and_slots():
    state = ServerState(load_config(environ={}, overrides={"engine.max_batch_size": 8}))
    assert state.status().max_batch_size == 8  # not loaded yet: the configured one
    state.runtime = _runtime(32)  # e.g. trtllm raises the cap to the slot count
    assert state.status().max_batch_size == 32
    assert state.status().total_slots == 4  # the engine's slot pool, too


def test_each_edge_maps_every_status_once():
    for status in Status:
        assert GRPC_STATUS[status] is getattr(grpc.StatusCode, status.name)
    assert all(isinstance(code, Status) for code in STATUS)
    assert ApiError("RESOURCE_EXHAUSTED", "full").status == 429
    assert ApiError(Status.INTERNAL, "bug").status == 500
    err = SessionError("INVALID_ARGUMENT", "bad")
    assert err.code is Status.INVALID_ARGUMENT and err.code == "INVALID_ARGUMENT"
