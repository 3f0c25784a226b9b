"""server.topology=split end to end: `orpheus-svc serve` with one engine process and two
gRPC front-ends on one port (sim backend with its stand-in codec: fast, no weights)."""

import re
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import check_stream_invariants, requests, wait_status
from .server_proc import ServerProcess, free_port

SPLIT = ("engine.backend=sim", "engine.sim_codec=true", "server.topology=split",
         "server.frontends=2", "engine.max_sessions=32", "engine.max_batch_size=32",
         "server.drain_delay_seconds=0.2")


def _engine_pid(srv):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"engine pid (\d+)", srv.logs())
        if m:
            return int(m.group(1))
        time.sleep(0.1)
    raise AssertionError(srv.logs())


def _metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def _sessions(port):
    return _metric(port, "orpheus_sessions_total")


def _wait_all_serving(srv, frontends=2, timeout=60.0):
    """Health on one connection speaks for one front-end: ask each one's metrics."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(_metric(srv.metrics_port + i, "orpheus_serving") == 1 for i in range(frontends)):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(srv.logs())


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    mport = free_port()
    srv = ServerProcess(tmp_path_factory.mktemp("split"), *SPLIT, f"server.metrics_port={mport}",
                        name="split")
    srv.metrics_port = mport
    try:
        seen = srv.wait_serving()
        assert seen[-1] == health_pb2.HealthCheckResponse.SERVING
        _wait_all_serving(srv)
        yield srv
    finally:
        srv.stop()


def test_status_reports_the_engine_process(split):
    stub = tts_pb2_grpc.TTSServiceStub(split.channel)
    st = stub.GetStatus(pb.GetStatusRequest())
    assert st.serving and st.backend == "sim" and st.model == "sim:h100-fp8"
    assert st.total_slots == 32 and st.max_batch_size == 32
    assert st.steps_total > 0  # the engine's warm-up, through its published stats
    assert [v.name for v in stub.ListVoices(pb.ListVoicesRequest()).voices][0] == "tara"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_ps_and_top_name_the_processes_and_the_engines_threads(split):
    engine = _engine_pid(split)
    m = re.search(r"front-end pids \[([0-9, ]+)\]", split.logs())
    fronts = [int(p) for p in m.group(1).split(",")]

    def comm(pid, tid):
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    assert comm(engine, engine) == "orpheus-engine"
    assert [comm(p, p) for p in fronts] == ["orpheus-fe-0", "orpheus-fe-1"]
    threads = {comm(engine, t.name) for t in Path(f"/proc/{engine}/task").iterdir()}
    assert {"engine-core", "snac-flusher", "ipc-commands"} <= threads


def test_concurrent_streams_on_both_front_ends(split):
    # one connection each (channels to one target share connections unless told not to)
    channels = [grpc.insecure_channel(split.addr, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(16)]
    results, errors = [], []

    def one(i):
        try:
            stub = tts_pb2_grpc.TTSServiceStub(channels[i % len(channels)])
            responses = list(stub.StreamingSynthesize(requests([f"Stream {i}. How", " are you?"])))
            results.append(check_stream_invariants(responses))
        except Exception as exc:  # collected: asserted below
            errors.append(exc)

    before = [_sessions(split.metrics_port + i) for i in range(2)]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for ch in channels:
        ch.close()
    assert not errors and len(results) == 32
    for segs in results:
        assert [s["text"] for s in segs][1:] == ["How are you?"]
        assert all(s["samples"] > 0 and s["samples"] % 2048 == 0 for s in segs)
    # each front-end serves its own metrics (metrics_port + index); the kernel spread the
    # 16 connections over both
    after = [_sessions(split.metrics_port + i) for i in range(2)]
    served = [a - b for a, b in zip(after, before)]
    assert sum(served) == 32 and all(n > 0 for n in served), served


def _scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_front_end_0_serves_the_engine_processes_step_histograms(split):
    """Observed in the engine process, sent with its snapshots: front-end 0 serves them
    (they count the steps the engine made for both front-ends), front-end 1 does not."""
    def steps_seen():
        text = _scrape(split.metrics_port)
        found = re.search(r"^orpheus_engine_batch_size_count (\S+)$", text, re.M)
        return (float(found.group(1)) if found else 0.0), text

    before, _ = steps_seen()
    stub = tts_pb2_grpc.TTSServiceStub(split.channel)
    list(stub.StreamingSynthesize(requests(["Count my steps, please."])))
    deadline = time.monotonic() + 10
    while True:  # a later snapshot (about 4 a second) carries this call's steps
        count, text = steps_seen()
        if count > before or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert count > before, text
    # read back with prometheus_client's own exposition parser: well-formed histograms
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("orpheus_engine_batch_size", "orpheus_codec_batch_windows"):
        fam = families[name]
        assert fam.type == "histogram"
        buckets = [s for s in fam.samples if s.name == f"{name}_bucket"]
        values = [s.value for s in buckets]
        assert values == sorted(values) and buckets[-1].labels["le"] == "+Inf"
        total = next(s.value for s in fam.samples if s.name == f"{name}_count")
        assert buckets[-1].value == total > 0
    assert "orpheus_engine_batch_size" not in _scrape(split.metrics_port + 1)


def test_cancel_mid_stream_frees_the_engine_slot(split):
    stub = tts_pb2_grpc.TTSServiceStub(split.channel)
    total = stub.GetStatus(pb.GetStatusRequest()).total_slots
    wait_status(stub, lambda s: s.free_slots == total)
    call = stub.StreamingSynthesize(requests(["A rather long sentence that keeps the model busy. " * 12]))
    for r in call:
        if r.WhichOneof("response") == "audio":
            break
    wait_status(stub, lambda s: s.free_slots < total and s.active_sessions >= 1)
    call.cancel()
    st = wait_status(stub, lambda s: s.free_slots == total and s.active_generations == 0)
    assert st.active_sessions == 0


def test_sigterm_drains_and_exits_zero(split):
    stub = tts_pb2_grpc.TTSServiceStub(split.channel)
    call = stub.StreamingSynthesize(requests(["One sentence in flight while we stop."]))
    first = next(call)  # the call is open on a front-end
    split.signal(signal.SIGTERM)
    rest = list(call)  # it finishes within the grace
    check_stream_invariants([first] + rest)
    assert split.wait_exit(60) == 0


def test_engine_death_fails_calls_unavailable_and_exits_nonzero(tmp_path):
    srv = ServerProcess(tmp_path, *SPLIT, name="split-crash")
    try:
        srv.wait_serving()
        pid = _engine_pid(srv)
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        call = stub.StreamingSynthesize(requests(["A rather long sentence that keeps the model busy. " * 12]))
        for r in call:
            if r.WhichOneof("response") == "audio":
                break
        import os
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(grpc.RpcError) as err:
            list(call)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert srv.health() in (health_pb2.HealthCheckResponse.NOT_SERVING, None)
        assert srv.wait_exit(60) != 0
    finally:
        srv.stop()
