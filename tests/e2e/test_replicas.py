"""Two real demo-model servers on loopback behind the Python client's round_robin: sessions
spread over both, and when one drains (SIGTERM: NOT_SERVING, then gone) every further
session is served by the other, with no error reaching the caller.
"""

import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_tts_client import Client

from .server_proc import ServerProcess

GO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "go"
NOT_SERVING, SERVING = health_pb2.HealthCheckResponse.NOT_SERVING, health_pb2.HealthCheckResponse.SERVING


def sessions_total(srv: ServerProcess) -> int:
    stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
    return stub.GetStatus(pb.GetStatusRequest(), timeout=5).sessions_total


def build_go_live_tests(out: Path) -> subprocess.Popen | None:
    """Compile the Go client's tests in the background (the draining window is short);
    None without a Go toolchain (CI has one)."""
    go = shutil.which("go")
    if go is None:
        return None
    return subprocess.Popen([go, "test", "-c", "-o", str(out), "./orpheus"], cwd=GO_CLIENT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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


def refused_calls(server) -> list[str]:
    """The server's log lines for calls it refused as UNAVAILABLE (draining)."""
    return [line for line in server.logs().splitlines()
            if "call refused" in line and "UNAVAILABLE" in line]


@pytest.mark.timeout(300)
def test_sessions_spread_over_two_replicas_and_fail_over_when_one_drains(tmp_path):
    go_tests = tmp_path / "orpheus.test"
    build = build_go_live_tests(go_tests)
    # A long drain on A, so sessions can run while it is NOT_SERVING but still listening.
    a, b = start_both(tmp_path, "server.drain_delay_seconds=40", "server.grace_seconds=5")
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
            if build is not None:  # built before A drains: the drain window is for sessions
                output, _ = build.communicate(timeout=180)
                assert build.returncode == 0, output

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
            # round_robin picks only among READY subchannels, and on a loaded machine A's may
            # come up after B's: sessions go on until one has reached A (two did not, once,
            # on a clean-clone CI run), each carried whole to B.
            blind_sessions = 0
            with Client(f"{a.addr},{b.addr}", health_check=False, timeout=60) as blind:
                while blind_sessions < 12 and (blind_sessions < 2 or not refused_calls(a)):
                    res = blind.synthesize_stream(["Hel", "lo ", "the", "re."])
                    assert [s.text for s in res.segments] == ["Hello there."]
                    blind_sessions += 1
            python_refused = len(refused_calls(a))
            assert python_refused >= 1, (
                f"none of {blind_sessions} Python sessions reached the draining replica")
            go_sessions = 0
            if build is not None:  # the Go client, likewise: four sessions, some sent to A
                run = subprocess.run(
                    [str(go_tests), "-test.run", "^TestLiveDrainingReplicaRefusalIsRetried$",
                     "-test.v", "-test.count=1"], cwd=GO_CLIENT / "orpheus",
                    env={**os.environ, "ORPHEUS_DRAINING_REPLICAS": f"{a.addr},{b.addr}"},
                    capture_output=True, text=True, timeout=120)
                assert run.returncode == 0 and "--- PASS" in run.stdout, run.stdout + run.stderr
                go_sessions = 4
            refused = refused_calls(a)
            assert a.health() == NOT_SERVING, "A's port closed before the drain sessions ended"
            assert sessions_total(a) == spread[0] + len(refused)  # refused calls count too
            # round_robin alternates among the subchannels that are READY when a call is
            # picked: on a loaded machine A's may come up after the first sessions, so only
            # "at least one" is certain of each client (the retry path ran for it); 2 of
            # Go's 4 (exact alternation) failed once on a clean-clone CI run.
            if go_sessions:
                assert len(refused) - python_refused >= 1, "no Go session reached A"
            assert sessions_total(b) == spread[1] + 2 + blind_sessions + go_sessions

            # 3. A is gone: sessions keep succeeding on B.
            assert a.wait_exit(60) == 0
            assert '"stopped"' in a.logs()
            for _ in range(2):
                assert tts.synthesize_stream(["Hi."]).num_samples > 0
            assert sessions_total(b) == spread[1] + 4 + blind_sessions + go_sessions
            assert b.health() == SERVING
    finally:
        if build is not None and build.poll() is None:
            build.kill()
        a.stop()
        b.stop()
