"""Retried StreamingSynthesize calls: how many lose a text fragment, gRPC's retry vs the client's.

    python bench/stream_retry_loss.py --calls 3000 [--output out.json]

Two in-process replicas on localhost behind one round_robin channel: "draining" reads the
config and refuses with UNAVAILABLE (as orpheus-svc does while draining); "ready" records the
text fragments it receives and answers with one summary. Each call streams the config,
"Hello " and "there.". Three ways in the same run, the first two alternated call by call:

- grpc: the generated stub on a channel whose service config retries StreamingSynthesize on
  UNAVAILABLE (gRPC core replays the streaming call; what the client did before);
- client: orpheus_tts_client.Client with retries=2 (the client replays the input itself);
- async_client: orpheus_tts_client.AsyncClient with retries=2, the same calls after those.

A call counts as lost when the replica that served it got other fragments than
["Hello ", "there."]. Prints one JSON object (calls, refusals and losses per way).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import threading
from concurrent import futures

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_tts_client import AsyncClient, Client
from orpheus_tts_client._target import TTS_SERVICE

FRAGMENTS = ["Hello ", "there."]


class Replica(tts_pb2_grpc.TTSServiceServicer):
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.lock = threading.Lock()
        self.refused = 0
        self.served: list[list[str]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        tts_pb2_grpc.add_TTSServiceServicer_to_server(self, self.server)
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def StreamingSynthesize(self, request_iterator, context):
        next(request_iterator)  # the config
        if self.refuse:
            with self.lock:
                self.refused += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        texts = [r.text for r in request_iterator if r.WhichOneof("request") == "text"]
        with self.lock:
            self.served.append(texts)
        yield pb.StreamingSynthesizeResponse(summary=pb.SynthesisSummary(num_segments=1))


def grpc_retry_channel(target: str) -> grpc.Channel:
    config = {"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [{
        "name": [{"service": TTS_SERVICE}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "1s",
                        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}
    return grpc.insecure_channel(target, options=[("grpc.service_config", json.dumps(config))])


async def async_calls(target: str, calls: int) -> int:
    errors = 0
    async with AsyncClient(target, retries=2, health_check=False, timeout=10) as client:
        for _ in range(calls):
            try:
                await client.synthesize_stream(list(FRAGMENTS))
            except Exception:  # noqa: BLE001 - counted
                errors += 1
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=1000, help="calls per way")
    ap.add_argument("--output", help="also write the JSON here")
    args = ap.parse_args()

    ways = {name: (Replica(refuse=True), Replica(refuse=False))
            for name in ("grpc", "client", "async_client")}
    targets = {name: f"ipv4:{d.target},{r.target}" for name, (d, r) in ways.items()}
    channel = grpc_retry_channel(targets["grpc"])
    stub = tts_pb2_grpc.TTSServiceStub(channel)
    client = Client(targets["client"], retries=2, health_check=False, timeout=10)
    config = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig())
    errors = {"grpc": 0, "client": 0, "async_client": 0}
    for _ in range(args.calls):
        try:
            requests = [config] + [pb.StreamingSynthesizeRequest(text=t) for t in FRAGMENTS]
            list(stub.StreamingSynthesize(iter(requests), timeout=10))
        except grpc.RpcError:
            errors["grpc"] += 1
        try:
            client.synthesize_stream(list(FRAGMENTS))
        except Exception:  # noqa: BLE001 - counted
            errors["client"] += 1
    channel.close()
    client.close()
    errors["async_client"] = asyncio.run(async_calls(targets["async_client"], args.calls))
    result = {"python": platform.python_version(), "grpcio": grpc.__version__,
              "calls_per_way": args.calls}
    for name, (draining, ready) in ways.items():
        result[name] = {"refusals": draining.refused, "served": len(ready.served),
                        "lost_fragment": sum(t != FRAGMENTS for t in ready.served),
                        "errors": errors[name]}
        draining.server.stop(None)
        ready.server.stop(None)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
