"""Faults of our own processes, with real processes and real signals (issue 36): a slow or
paused engine is waited for, a dead front-end is restarted without touching the other's
calls, a crash loop and a dead engine stop the server non-zero, and nothing is left
behind (sim backend, stand-in codec: fast, no weights)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .faults import LONG, Call, alive, child_pids, metric, start_calls, wait_done, wait_for
from .rpc import check_stream_invariants
from .server_proc import ServerProcess, free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
SLOW_SEED, DEATH_SEED, STALL_SEED = 3101, 3202, 3303
SPLIT = ("engine.backend=sim", "engine.sim_codec=true", "server.topology=split",
         "server.frontends=2", "engine.max_sessions=32", "engine.max_batch_size=32",
         "server.drain_delay_seconds=0.2", "server.grace_seconds=5")


def _engine_pid(srv) -> int:
    wait_for(lambda: re.search(r"engine pid (\d+)", srv.logs()), 30, "the engine's pid")
    return int(re.search(r"engine pid (\d+)", srv.logs()).group(1))


def _frontend_pids(srv) -> list[int]:
    m = re.search(r"front-end pids \[([0-9, ]+)\]", srv.logs())
    return [int(p) for p in m.group(1).split(",")]


def _serving(srv, frontends=2) -> bool:
    return all(metric(srv.metrics_port + i, "orpheus_serving") == 1 and
               metric(srv.metrics_port + i, "orpheus_engine_stalled") == 0
               for i in range(frontends))


def _stalled_seen(srv, frontends=2) -> bool:
    return any(metric(srv.metrics_port + i, "orpheus_engine_stalled") == 1
               for i in range(frontends))


def _start_split(tmp_path, *settings, name):
    mport = free_port()
    srv = ServerProcess(tmp_path, *SPLIT, f"server.metrics_port={mport}", *settings, name=name)
    srv.metrics_port = mport
    try:
        srv.wait_serving()
        wait_for(lambda: _serving(srv), 60, "both front-ends serving")
    except BaseException:
        srv.stop()
        raise
    return srv


def _new_call_succeeds(srv) -> None:
    c = Call(srv.addr, text="One more, after the fault.")
    wait_done([c], 60)
    assert c.ok, c.error
    check_stream_invariants(c.responses)


def _no_orphans(srv) -> None:
    pids = child_pids(srv.logs())
    assert pids
    wait_for(lambda: not any(alive(p) for p in pids), 10, f"every child of {pids} to end")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    srv = _start_split(tmp_path_factory.mktemp("faults"),
                       f"engine.sim_faults=slow_step:{SLOW_SEED}@3,engine_death:{DEATH_SEED}",
                       name="split-faults")
    try:
        yield srv
    finally:
        srv.stop()


def test_an_engine_paused_longer_than_the_old_heartbeat_is_waited_for(split):
    """SIGSTOP the engine process for 4 s (the old 2 s heartbeat ended every call): every
    open call finishes OK, the front-ends saw the stall and serve again by themselves."""
    calls = start_calls(split.addr, 8)
    engine = _engine_pid(split)
    os.kill(engine, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        assert not any(c.done.is_set() for c in calls), "calls ended before the pause"
        wait_for(lambda: _stalled_seen(split), 10, "a front-end to see the stall")
        time.sleep(max(0.0, paused + 4.0 - time.monotonic()))
    finally:
        os.kill(engine, signal.SIGCONT)
    wait_done(calls)
    for c in calls:
        assert c.ok, (c.error, split.logs()[-3000:])
        check_stream_invariants(c.responses)
    wait_for(lambda: _serving(split), 15, "SERVING again")
    assert split.health() == SERVING
    _new_call_succeeds(split)


def test_a_slow_step_of_3_s_fails_no_call(split):
    """A generation whose every step takes 3 s more (sim slow_step) holds up its batch:
    the other calls wait through it and finish OK; health comes back by itself."""
    calls = start_calls(split.addr, 6, text=LONG * 2)
    slow = Call(split.addr, seed=SLOW_SEED)
    # the slow step is running with the other calls in it, past the 2 s a stall shows at
    wait_for(lambda: _stalled_seen(split), 15, "a front-end to see the slow step")
    assert not any(c.done.is_set() for c in calls), "calls ended before the slow step"
    slow.call.cancel()  # its generation ends after this step: no further 3 s step
    wait_done(calls + [slow])
    for c in calls:
        assert c.ok, (c.error, split.logs()[-3000:])
        check_stream_invariants(c.responses)
    assert slow.code() == grpc.StatusCode.CANCELLED
    wait_for(lambda: _serving(split), 15, "SERVING again")
    assert split.health() == SERVING
    _new_call_succeeds(split)


def test_an_engine_thread_death_ends_every_call_and_the_server_exits_4(split):
    """The engine thread dies (an exception past its loop's handlers): the engine process
    exits 4, every open call ends UNAVAILABLE at once, the parent exits 4, no orphan."""
    calls = start_calls(split.addr, 4)
    t0 = time.monotonic()
    bad = Call(split.addr, seed=DEATH_SEED)
    wait_done(calls + [bad], 30)
    assert all(c.code() == grpc.StatusCode.UNAVAILABLE for c in calls + [bad]), \
        [c.code() for c in calls + [bad]]
    # ended by the front-ends as soon as the parent saw the engine exit, not by their drain;
    # a call whose next segment reached the failed engine before it exited was refused by it
    # at once (EngineLoop.submit after a failure): the same status, the same advice
    details = [c.error.details() for c in calls + [bad]]
    assert all(d.startswith(("the engine process is unreachable;", "the engine failed; retry"))
               for d in details), details
    assert any(d.startswith("the engine process is unreachable;") for d in details), details
    assert split.wait_exit(30) == 4
    assert time.monotonic() - t0 < 30
    assert "engine thread died" in split.logs()
    _no_orphans(split)


def test_a_killed_front_end_is_restarted_and_a_crash_loop_stops_the_server(tmp_path):
    """SIGKILL front-end 1 under load: front-end 0's calls all finish OK, the engine frees
    the dead one's slots, the parent logs the death, counts it and restarts front-end 1,
    which serves again. Killed once more within the window (frontend_max_restarts=1): a
    crash loop, and the parent exits 5 leaving no process behind."""
    srv = _start_split(tmp_path, "server.frontend_max_restarts=1", name="split-restart")
    try:
        fe0, fe1 = _frontend_pids(srv)
        m0, m1 = srv.metrics_port, srv.metrics_port + 1
        before = [metric(m, "orpheus_sessions_total") for m in (m0, m1)]
        errors0 = metric(m0, "orpheus_errors_total", '{code="UNAVAILABLE"}') or 0
        calls = start_calls(srv.addr, 12, text=LONG * 2)
        served = [metric(m, "orpheus_sessions_total") - b for m, b in zip((m0, m1), before)]
        assert served[0] > 0 and served[1] > 0, served  # the kernel spread the connections
        assert not any(c.done.is_set() for c in calls), "calls ended before the kill"
        os.kill(fe1, signal.SIGKILL)
        wait_done(calls)
        ok = [c for c in calls if c.ok]
        assert len(ok) == served[0], ([c.code() for c in calls], served)  # front-end 0's: all
        assert all(c.code() == grpc.StatusCode.UNAVAILABLE for c in calls if not c.ok)
        for c in ok:
            check_stream_invariants(c.responses)
        assert (metric(m0, "orpheus_errors_total", '{code="UNAVAILABLE"}') or 0) == errors0
        logs = srv.logs()
        assert f"front-end 1 (pid {fe1}) died: signal SIGKILL" in logs
        # the dead process's generations were cancelled on the engine: every slot frees
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        wait_for(lambda: (lambda s: s.free_slots == s.total_slots and s.active_generations == 0)(
            stub.GetStatus(pb.GetStatusRequest())), 15, "every slot free")
        # restarted: serving again on the same port, its death counted by front-end 0
        wait_for(lambda: "front-end 1 restarted" in srv.logs(), 30, "the restart")
        wait_for(lambda: _serving(srv), 60, "the new front-end 1 serving")
        assert metric(m0, "orpheus_frontend_deaths_total", '{frontend="1"}') == 1
        assert metric(m0, "orpheus_frontend_deaths_total", '{frontend="0"}') == 0
        wait_for(lambda: _call_lands_on(srv, m1), 30, "a call served by the new front-end 1")
        assert srv.proc.poll() is None
        # a crash loop: the second death within the window stops everything
        new_fe1 = int(re.findall(r"front-end 1 restarted: pid (\d+)", srv.logs())[-1])
        os.kill(new_fe1, signal.SIGKILL)
        assert srv.wait_exit(60) == 5
        assert "crash loop" in srv.logs()
        _no_orphans(srv)
    finally:
        srv.stop()


def _call_lands_on(srv, metrics_port) -> bool:
    """Open a call on a new connection; True once the front-end of `metrics_port` served
    one (the kernel picks the front-end of each connection)."""
    c = Call(srv.addr, text="Which front-end are you?")
    wait_done([c], 30)
    assert c.ok, c.error
    return (metric(metrics_port, "orpheus_sessions_total") or 0) > 0


def test_single_topology_stall_past_the_timeout_then_engine_death(tmp_path):
    """One process (server.topology single), stall timeout 2 s: a step of 3 s ends the calls
    waiting on it UNAVAILABLE (saying why), health comes back by itself and a new call
    succeeds. Then the engine thread dies: every open call, an idle one too, ends with a
    status, health is NOT_SERVING, and the process exits 4 within a few seconds."""
    srv = ServerProcess(tmp_path, "engine.backend=sim", "engine.sim_codec=true",
                        "server.engine_stall_timeout_seconds=2", "server.drain_delay_seconds=0.2",
                        f"engine.sim_faults=slow_step:{STALL_SEED}@3,engine_death:{DEATH_SEED}",
                        name="single-faults")
    try:
        srv.wait_serving()
        calls = start_calls(srv.addr, 3, text=LONG * 2)
        slow = Call(srv.addr, seed=STALL_SEED)
        wait_done(calls + [slow], 30)
        for c in calls + [slow]:
            assert c.code() == grpc.StatusCode.UNAVAILABLE, (c.code(), srv.logs()[-3000:])
            assert "no progress" in c.error.details()
        wait_for(lambda: srv.health() == SERVING, 15, "SERVING again")
        _new_call_succeeds(srv)

        idle = Call(srv.addr, text="Just this.", idle=threading.Event())
        wait_for(lambda: any(r.WhichOneof("response") == "segment_end" for r in idle.responses),
                 30, "the idle call's segment to end")  # nothing left to generate for it
        running = start_calls(srv.addr, 2, text=LONG * 2)
        t0 = time.monotonic()
        bad = Call(srv.addr, seed=DEATH_SEED)
        wait_done(running + [bad], 15)
        assert all(c.code() == grpc.StatusCode.UNAVAILABLE for c in running + [bad])
        assert srv.wait_exit(15) == 4
        assert time.monotonic() - t0 < 10
        wait_done([idle], 5)
        assert idle.code() == grpc.StatusCode.UNAVAILABLE  # cut by the server's stop
        assert "engine thread died" in srv.logs()
    finally:
        srv.stop()

