"""Opt-in (ORPHEUS_JAEGER_CHECK=1; scripts/jaeger-check.sh builds Jaeger and runs this): a
real Jaeger (v1.76, built from the Go module proxy, in-memory storage, every port on
127.0.0.1) receives the server's spans over OTLP/gRPC, and its own query API returns the
call's trace whole: the caller's trace id, the call span under the caller's span, a
segment span per segment under the call, the service name. The in-process receiver
(otlp.py, test_traces.py) checks the details in the test command; this checks that a
tracing backend operators use accepts what we export."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from tests.e2e.server_proc import ServerProcess, free_port

from .conftest import OTEL_ENV, SIM

REPO = Path(__file__).resolve().parents[2]
JAEGER = os.environ.get("JAEGER_BIN") or shutil.which("jaeger") or str(REPO / ".tools/bin/jaeger")
CALL = "orpheus.tts.v1.TTSService/StreamingSynthesize"

pytestmark = pytest.mark.skipif(
    os.environ.get("ORPHEUS_JAEGER_CHECK") != "1",
    reason="opt-in: ORPHEUS_JAEGER_CHECK=1 (scripts/jaeger-check.sh builds Jaeger and runs it)")

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 1000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    if not Path(JAEGER).exists():
        pytest.fail(f"no Jaeger binary at {JAEGER}: run scripts/jaeger-check.sh, which builds it")
    d = tmp_path_factory.mktemp("jaeger")
    ports = {"query": free_port(), "query_grpc": free_port(), "otlp": free_port()}
    (d / "config.yaml").write_text(CONFIG.format(**ports))
    log = open(d / "jaeger.log", "wb")
    proc = subprocess.Popen([JAEGER, "--config", str(d / "config.yaml")], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (_listening(ports["otlp"]) and _listening(ports["query"])):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Jaeger did not start: {(d / 'jaeger.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield ports
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, jaeger):
    srv = ServerProcess(tmp_path_factory.mktemp("traced"), *SIM, name="traced-jaeger",
                        env={**OTEL_ENV, "OTEL_SERVICE_NAME": "orpheus-svc-jaeger",
                             "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{jaeger['otlp']}"})
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def _trace(query_port: int, trace_id: str, segments: int) -> dict:
    """Jaeger's JSON for the trace, once its call span and every segment span are stored."""
    url = f"http://127.0.0.1:{query_port}/api/traces/{trace_id}"
    deadline, last = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                last = json.load(r)
        except urllib.error.HTTPError as e:  # 404 until the first span is stored
            last = {"status": e.code}
        data = last.get("data") or []
        if data:
            names = [s["operationName"] for s in data[0]["spans"]]
            if CALL in names and names.count("orpheus.segment") >= segments:
                return data[0]
        time.sleep(0.3)
    pytest.fail(f"Jaeger has no whole trace {trace_id} after 30 s: {str(last)[:2000]}")


def test_jaeger_stores_the_calls_trace_under_the_callers_span(server, jaeger):
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)

    def reqs():
        yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
        yield pb.StreamingSynthesizeRequest(text="Jaeger gets this trace. ")
        yield pb.StreamingSynthesizeRequest(text="And a second sentence.")
    stub = tts_pb2_grpc.TTSServiceStub(server.channel)
    out = list(stub.StreamingSynthesize(
        reqs(), metadata=[("traceparent", f"00-{trace_id}-{caller_span}-01")], timeout=120))
    summary = out[-1].summary
    assert summary.num_segments == 2

    trace = _trace(jaeger["query"], trace_id, summary.num_segments)
    spans = {s["spanID"]: s for s in trace["spans"]}
    assert all(s["traceID"] == trace_id for s in spans.values())
    (call,) = [s for s in spans.values() if s["operationName"] == CALL]
    parents = {s["spanID"]: [r["spanID"] for r in s["references"] if r["refType"] == "CHILD_OF"]
               for s in spans.values()}
    assert parents[call["spanID"]] == [caller_span]  # the caller's span is not in Jaeger
    segments = [s for s in spans.values() if s["operationName"] == "orpheus.segment"]
    assert len(segments) == summary.num_segments
    assert all(parents[s["spanID"]] == [call["spanID"]] for s in segments)
    assert trace["processes"][call["processID"]]["serviceName"] == "orpheus-svc-jaeger"
    tags = {t["key"]: t["value"] for t in call["tags"]}
    assert tags["orpheus.session_id"] == summary.session_id
    assert not any(t["key"] == "orpheus.text" for s in spans.values() for t in s["tags"])
