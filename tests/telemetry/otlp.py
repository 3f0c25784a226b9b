"""An OTLP/gRPC trace receiver for tests, on the `opentelemetry-proto` package's own
service definition: what an OpenTelemetry Collector's otlp receiver accepts, nothing more.
It keeps every span it is sent, flattened with its resource's attributes.

Run as a process (scripts/test.sh does, for its live server and the plugin tests' Pipecat
example), it appends each span as a JSON line to a file:

    python -m tests.telemetry.otlp --jsonl spans.jsonl --port-file port.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def _value(v) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    kind: int
    attributes: dict
    events: list  # [(name, time_ns, attributes)]
    resource: dict
    status_code: int
    status_message: str = ""
    links: list = field(default_factory=list)

    def event(self, name: str) -> int | None:
        return next((t for n, t, _ in self.events if n == name), None)


class _Service(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: "Receiver") -> None:
        self.sink = sink

    def Export(self, request, context):
        spans = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(Span(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        s.start_time_unix_nano, s.end_time_unix_nano, s.kind,
                        {a.key: _value(a.value) for a in s.attributes},
                        [(e.name, e.time_unix_nano, {a.key: _value(a.value) for a in e.attributes})
                         for e in s.events], resource, s.status.code, s.status.message))
        self.sink.add(spans)
        return trace_service_pb2.ExportTraceServiceResponse()


class Receiver:
    """Listens on 127.0.0.1 (a free port: `endpoint`) until `stop`."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._cond = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(self), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server.start()

    def add(self, spans: list[Span]) -> None:
        with self._cond:
            self.spans.extend(spans)
            self._cond.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0) -> list[Span]:
        """Wait until predicate(spans) is true; returns the spans (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"spans not received in {timeout} s; got "
                                         f"{[(s.name, s.trace_id[:8]) for s in self.spans]}")
                self._cond.wait(left)
            return list(self.spans)

    def trace(self, trace_id: str) -> list[Span]:
        with self._cond:
            return [s for s in self.spans if s.trace_id == trace_id]

    def stop(self) -> None:
        self.server.stop(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="an OTLP/gRPC receiver that writes spans as JSON lines")
    ap.add_argument("--jsonl", type=Path, required=True)
    ap.add_argument("--port-file", type=Path, required=True, help="its port, once listening")
    args = ap.parse_args(argv)
    out = open(args.jsonl, "a", buffering=1)
    lock = threading.Lock()

    class ToFile(Receiver):
        def add(self, spans):
            with lock:
                for s in spans:
                    out.write(json.dumps(dataclasses.asdict(s)) + "\n")

    receiver = ToFile()
    args.port_file.write_text(f"{receiver.port}\n")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    receiver.stop()
    out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
