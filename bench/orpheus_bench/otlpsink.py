"""An OTLP/gRPC trace sink for benchmarks: accepts and counts spans, keeps none.

    PYTHONPATH=bench python -m orpheus_bench.otlpsink --port 4317 [--count-file F]

scripts/tracing-ab.sh points the traced server's exporter at it (on the load generator's
core), so tracing on is measured with a real export over gRPC, not an exporter that fails
and drops. Needs the opentelemetry-proto package (the dev extra)."""

from __future__ import annotations

import argparse
import signal
import threading
from concurrent import futures
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()

    def Export(self, request, context):
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self._lock:
            self.spans += n
        return trace_service_pb2.ExportTraceServiceResponse()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count-file", type=Path, help="write the span count here on exit")
    args = ap.parse_args(argv)
    sink = Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(1)
    if args.count_file:
        args.count_file.write_text(f"{sink.spans}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
