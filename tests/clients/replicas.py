"""In-process replicas for failover and retry tests: a fake TTS servicer with the real
grpc.health.v1 servicer (Check and Watch), so a test can switch a replica to NOT_SERVING the
way orpheus-svc does while it loads or drains, and servicers that refuse sessions."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_tts_client._target import TTS_SERVICE

from .fake_server import FakeTTSServicer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DRAINING = "the server is shutting down"


class RefusingServicer(FakeTTSServicer):
    """Refuses every session with UNAVAILABLE before sending anything (as orpheus-svc does
    while draining), after reading the config; counts the refusals."""

    refused = 0

    def _refuse(self, context):
        with self.lock:
            self.refused += 1
        context.abort(grpc.StatusCode.UNAVAILABLE, DRAINING)

    def Synthesize(self, request, context):
        self._refuse(context)

    def StreamingSynthesize(self, request_iterator, context):
        next(request_iterator)  # the config
        self._refuse(context)


class FlakyServicer(FakeTTSServicer):
    """Refuses its first ``refusals`` StreamingSynthesize calls with UNAVAILABLE after
    reading the config and the first text (recorded, so a test sees what each attempt got),
    then serves like the fake. ``mode`` says how far a refused call had got:

    - "refused": nothing sent back (a draining replica);
    - "accepted": the session header sent first, as orpheus-svc does on accepting a session;
    - "responded": one response message sent first.
    """

    def __init__(self, name: str = "flaky", refusals: int = 1, mode: str = "refused") -> None:
        super().__init__(name)
        self.refusals = refusals
        self.mode = mode
        self.refused = threading.Event()  # set at the first refusal

    def StreamingSynthesize(self, request_iterator, context):
        with self.lock:
            refuse = self.refusals > 0
            self.refusals -= refuse
        if not refuse:
            yield from super().StreamingSynthesize(request_iterator, context)
            return
        rec = self._record("StreamingSynthesize")
        for req in request_iterator:
            kind = req.WhichOneof("request")
            rec.items.append((kind, req.text if kind == "text" else None, 0.0))
            if kind == "text":
                break
        if self.mode == "accepted":
            context.send_initial_metadata((("orpheus-session-id", "s1"),))
        elif self.mode == "responded":
            yield pb.StreamingSynthesizeResponse(segment_start=pb.SegmentStart(text="x"))
        self.refused.set()
        context.abort(grpc.StatusCode.UNAVAILABLE, DRAINING)

    def streaming_calls(self):
        with self.lock:
            return [c for c in self.calls if c.method == "StreamingSynthesize"]


class Replica:
    def __init__(self, name: str, *, serving: bool = True, servicer_cls=FakeTTSServicer,
                 **servicer_kwargs) -> None:
        self.servicer = servicer_cls(name, **servicer_kwargs)
        self.health = health.HealthServicer()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        tts_pb2_grpc.add_TTSServiceServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{self.port}"
        self.set_serving(serving)
        self.server.start()

    def set_serving(self, serving: bool) -> None:
        for name in ("", TTS_SERVICE):
            self.health.set(name, SERVING if serving else NOT_SERVING)

    def sessions(self) -> int:
        with self.servicer.lock:
            return sum(c.method in ("Synthesize", "StreamingSynthesize")
                       for c in self.servicer.calls)

    def stop(self) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace=None)


class EndlessServicer(FakeTTSServicer):
    """Streams audio chunks until the client goes away; ``ended`` is set when the call ends
    (a cancel reaching the server)."""

    def __init__(self, name: str = "endless") -> None:
        super().__init__(name)
        self.ended = threading.Event()

    def StreamingSynthesize(self, request_iterator, context):
        context.add_callback(self.ended.set)
        next(request_iterator)  # the config
        seq = 0
        while context.is_active():
            yield pb.StreamingSynthesizeResponse(audio=pb.AudioChunk(
                audio=b"\0\0" * 480, sequence_number=seq, num_samples=480))
            seq += 1
            time.sleep(0.01)


class BreakingServicer(FakeTTSServicer):
    """Serves like the fake, but ends a session with UNAVAILABLE after it was accepted, as a
    replica whose engine died does: right after segment ``at_segment``'s first audio chunk
    (None: in place of the summary, once every segment has ended). ``breaks`` is a one-item
    list that replicas may share: the sessions still to break, over all of them. With
    ``then_refuse``, every session after those is refused before it is accepted (a replica
    that began draining)."""

    def __init__(self, name: str = "breaking", breaks: list[int] | None = None,
                 at_segment: int | None = 1, then_refuse: bool = False) -> None:
        super().__init__(name)
        self.breaks = [1] if breaks is None else breaks
        self.at_segment = at_segment
        self.then_refuse = then_refuse
        self.broke = threading.Event()  # set at each break

    def StreamingSynthesize(self, request_iterator, context):
        with self.lock:
            breaking = self.breaks[0] > 0
            self.breaks[0] -= breaking
        if not breaking and self.then_refuse:
            self._record("StreamingSynthesize")
            next(request_iterator)  # the config
            context.abort(grpc.StatusCode.UNAVAILABLE, DRAINING)
        # accepted, as orpheus-svc says it: before any audio (grpc.aio may lose the audio
        # of a call that ends while the client writes, never its headers)
        context.send_initial_metadata((("orpheus-session-id", f"{self.name}-session"),))
        for msg in super().StreamingSynthesize(request_iterator, context):
            kind = msg.WhichOneof("response")
            if breaking and kind == "summary" and self.at_segment is None:
                self._break(context)
            yield msg
            if breaking and kind == "audio" and msg.audio.segment_index == self.at_segment:
                self._break(context)

    def _break(self, context):
        self.broke.set()
        context.abort(grpc.StatusCode.UNAVAILABLE, "the engine is gone")

    def streaming_calls(self):
        with self.lock:
            return [c for c in self.calls if c.method == "StreamingSynthesize"]
