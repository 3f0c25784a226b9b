"""The Prometheus endpoint exposes the named series and they move during a synthesis."""

import re
import urllib.request

from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import requests
from .server_proc import ServerProcess, free_port

SERIES = [
    "orpheus_sessions_active", "orpheus_generations_active", "orpheus_generations_waiting",
    "orpheus_slots_used", "orpheus_slots_free", "orpheus_underrun_risk_sessions",
    "orpheus_row_budget_generations",
    "orpheus_sessions_total", "orpheus_engine_steps_total", "orpheus_tokens_total",
    "orpheus_audio_seconds_total", "orpheus_engine_batch_size_bucket",
    "orpheus_codec_batch_windows_bucket", "orpheus_time_to_first_audio_seconds_bucket",
    "orpheus_errors_total", "orpheus_rejected_total",
]


def _scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+)$", line)
        if m:
            values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return text, values


def test_metrics_exist_and_move_during_synthesis(tmp_path):
    mport = free_port()
    srv = ServerProcess(tmp_path, f"server.metrics_port={mport}", "engine.max_sessions=4",
                        name="metrics")
    try:
        srv.wait_serving()
        text, before = _scrape(mport)
        for name in SERIES:
            if name != "orpheus_errors_total":  # labelled: appears with the first error
                assert name in text, name
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        call = stub.StreamingSynthesize(requests(["A sentence long enough to be busy for a while. " * 3]))
        for r in call:
            if r.WhichOneof("response") == "audio":
                break
        _, during = _scrape(mport)
        assert during["orpheus_sessions_active"] == 1 and during["orpheus_slots_used"] >= 1
        for _ in call:
            pass
        try:
            list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="nobody")))
        except Exception:
            pass
        text, after = _scrape(mport)
        assert after["orpheus_sessions_active"] == 0 and after["orpheus_slots_used"] == 0
        for name in ("orpheus_tokens_total", "orpheus_engine_steps_total",
                     "orpheus_audio_seconds_total", "orpheus_sessions_total",
                     "orpheus_engine_batch_size_count", "orpheus_codec_batch_windows_count",
                     "orpheus_time_to_first_audio_seconds_count"):
            assert after[name] > before.get(name, 0), name
        assert after['orpheus_errors_total{code="INVALID_ARGUMENT"}'] == 1
    finally:
        srv.stop()
