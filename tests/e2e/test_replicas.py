"""Two real demo-model servers on loopback behind the Python client's round_robin: sessions
spread over both, and when one drains (SIGTERM: NOT_SERVING, then gone) every further
session is served by the other, with no error reaching the caller.
"""

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from grpc_health.v1 import health_pb2
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_tts_client import Client

from .server_proc import ServerProcess

NOT_SERVING, SERVING = health_pb2.HealthCheckResponse.NOT_SERVING, health_pb2.HealthCheckResponse.SERVING


def sessions_total(srv: ServerProcess) -> int:
    stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
    return stub.GetStatus(pb.GetStatusRequest(), timeout=5).sessions_total


def start_both(tmp_path, *settings_a: str) -> tuple[ServerProcess, ServerProcess]:
    a = ServerProcess(tmp_path, *settings_a, name="replica-a")
    b = ServerProcess(tmp_path, name="replica-b")
    # both load at once; wait_serving raises with the log if one fails
    errors = []

    def wait(srv):
        try:
            srv.wait_serving()
        except Exception as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=wait, args=(s,)) for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        a.stop()
        b.stop()
        raise errors[0]
    return a, b


@pytest.mark.timeout(180)
def test_sessions_spread_over_two_replicas_and_fail_over_when_one_drains(tmp_path):
    # A long drain on A, so sessions can run while it is NOT_SERVING but still listening.
    a, b = start_both(tmp_path, "server.drain_delay_seconds=20", "server.grace_seconds=5")
    try:
        with Client(f"{a.addr},{b.addr}", timeout=60) as tts:
            assert tts.lb_policy == "round_robin" and tts.health_check
            tts.wait_ready(30)

            # 1. spread: 8 sessions (4 at a time) land on both replicas
            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda _: tts.synthesize("Hi."), range(8)))
            assert all(r.num_samples > 0 for r in results)
            spread = (sessions_total(a), sessions_total(b))
            assert sum(spread) == 8 and min(spread) >= 2, spread

            # 2. A drains: NOT_SERVING while its port stays open for drain_delay_seconds.
            a.signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while a.health() != NOT_SERVING and time.monotonic() < deadline:
                time.sleep(0.02)
            assert a.health() == NOT_SERVING
            # A client connecting now never picks A: its health watch says NOT_SERVING from
            # the start, and with retries off a session sent to A would fail.
            with Client(f"{a.addr},{b.addr}", retries=0, timeout=60) as fresh:
                res = fresh.synthesize_stream(["Hel", "lo."])
                assert [s.text for s in res.segments] == ["Hello."]
            # The client that was already connected goes on without an error.
            assert tts.synthesize("Hi.").num_samples > 0
            # Without health checks a client still sends sessions to A, which refuses them
            # (UNAVAILABLE, before accepting); the client's own retry carries every fragment
            # to B, in order (_retry; gRPC's replay could drop one).
            with Client(f"{a.addr},{b.addr}", health_check=False, timeout=60) as blind:
                for _ in range(2):
                    res = blind.synthesize_stream(["Hel", "lo ", "the", "re."])
                    assert [s.text for s in res.segments] == ["Hello there."]
            refused = [line for line in a.logs().splitlines()
                       if "call refused" in line and "UNAVAILABLE" in line]
            assert refused, "no session reached the draining replica"
            assert a.health() == NOT_SERVING, "A's port closed before the drain sessions ended"
            assert sessions_total(a) == spread[0] + len(refused)  # refused calls count too
            assert sessions_total(b) == spread[1] + 4

            # 3. A is gone: sessions keep succeeding on B.
            assert a.wait_exit(60) == 0
            assert '"stopped"' in a.logs()
            for _ in range(2):
                assert tts.synthesize_stream(["Hi."]).num_samples > 0
            assert sessions_total(b) == spread[1] + 6
            assert b.health() == SERVING
    finally:
        a.stop()
        b.stop()
