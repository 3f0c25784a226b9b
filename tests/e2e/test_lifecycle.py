"""Start-up health, reflection, graceful shutdown and admission limits, each on its own server."""

import signal
import threading
import time

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import check_stream_invariants, requests
from .server_proc import ServerProcess

NOT_SERVING, SERVING = health_pb2.HealthCheckResponse.NOT_SERVING, health_pb2.HealthCheckResponse.SERVING


def test_health_not_serving_then_serving_then_not_serving_on_shutdown(tmp_path):
    srv = ServerProcess(tmp_path, "server.drain_delay_seconds=2", name="health")
    try:
        seen = srv.wait_serving(check_timeout=30)
        assert NOT_SERVING in seen and seen[-1] == SERVING
        assert seen.index(NOT_SERVING) < seen.index(SERVING)
        assert srv.health("orpheus.tts.v1.TTSService") == SERVING
        srv.signal(signal.SIGTERM)
        deadline = time.monotonic() + 2
        statuses = []
        while time.monotonic() < deadline and srv.proc.poll() is None:
            statuses.append(srv.health())
            time.sleep(0.05)
        assert NOT_SERVING in statuses
        with grpc.insecure_channel(srv.addr) as ch:  # draining: new sessions are refused
            stub = tts_pb2_grpc.TTSServiceStub(ch)
            try:
                list(stub.Synthesize(pb.SynthesizeRequest(text="Hi."), timeout=5))
                refused = None
            except grpc.RpcError as exc:
                refused = exc.code()
        assert refused == grpc.StatusCode.UNAVAILABLE
        assert srv.wait_exit() == 0
    finally:
        srv.stop()


def test_reflection_lists_the_services(tmp_path):
    srv = ServerProcess(tmp_path, name="reflection")
    try:
        srv.wait_serving()
        stub = reflection_pb2_grpc.ServerReflectionStub(srv.channel)
        req = reflection_pb2.ServerReflectionRequest(list_services="")
        resp = next(stub.ServerReflectionInfo(iter([req])))
        names = {s.name for s in resp.list_services_response.service}
        assert {"orpheus.tts.v1.TTSService", "grpc.health.v1.Health"} <= names
    finally:
        srv.stop()


def test_graceful_shutdown_lets_a_running_stream_finish(tmp_path):
    srv = ServerProcess(tmp_path, "server.grace_seconds=60", "server.drain_delay_seconds=0.5",
                        name="graceful")
    try:
        srv.wait_serving()
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        responses, started = [], threading.Event()

        def run():
            for r in stub.StreamingSynthesize(requests(["This sentence is still being spoken. And this one too."])):
                responses.append(r)
                started.set()

        t = threading.Thread(target=run)
        t.start()
        assert started.wait(60)
        srv.signal(signal.SIGTERM)
        t.join(120)
        segments = check_stream_invariants(responses)
        assert len(segments) == 2
        assert srv.wait_exit() == 0
        assert '"stopped"' in srv.logs()
    finally:
        srv.stop()


def test_full_server_refuses_with_resource_exhausted_and_recovers(tmp_path):
    srv = ServerProcess(tmp_path, "engine.max_sessions=1", "engine.max_waiting=0",
                        "engine.max_batch_size=1", name="full")
    try:
        srv.wait_serving()
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        # seeded: the demo model samples its stop id, so an unseeded segment can end early
        # and free the slot; seed 3 runs every segment of this text to its length budget
        busy = stub.StreamingSynthesize(requests(["A long sentence to hold the only slot for a while. " * 4],
                                                 sampling=pb.SamplingOptions(seed=3)))
        next(iter(busy))  # holds the slot now
        try:
            list(stub.Synthesize(pb.SynthesizeRequest(text="Me too.")))
            code = None
        except grpc.RpcError as exc:
            code, msg = exc.code(), exc.details()
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "capacity" in msg
        busy.cancel()
        deadline = time.monotonic() + 10
        while stub.GetStatus(pb.GetStatusRequest()).free_slots != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert list(stub.Synthesize(pb.SynthesizeRequest(text="Now."))) [-1].WhichOneof("response") == "summary"
        assert stub.GetStatus(pb.GetStatusRequest()).rejected_total == 1
    finally:
        srv.stop()


def test_the_shared_server_runs_uvloop(server):
    """server.event_loop=auto picks uvloop where it is installed (the server extra), so the
    e2e suite runs on it; the listening line says which loop runs."""
    assert '"event_loop": "uvloop"' in server.logs()


def test_asyncio_loop_serves_a_stream_and_drains(tmp_path):
    srv = ServerProcess(tmp_path, "server.event_loop=asyncio", "engine.backend=sim",
                        "engine.sim_codec=true", "server.drain_delay_seconds=0.2",
                        name="asyncio-loop")
    try:
        srv.wait_serving()
        assert '"event_loop": "asyncio"' in srv.logs()
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        msgs = list(stub.StreamingSynthesize(requests(["Hello there. ", "How are you?"]),
                                             timeout=60))
        check_stream_invariants(msgs)
        srv.signal(signal.SIGTERM)
        assert srv.wait_exit() == 0
    finally:
        srv.stop()
