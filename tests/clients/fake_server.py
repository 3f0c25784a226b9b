"""FakeTTSServicer: an in-process stand-in for orpheus-svc, for client tests only.

It implements the generated TTSServiceServicer with no model: text is cut at line breaks,
sentence ends followed by whitespace, Flush and half-close, and every segment becomes
SegmentStart, CHUNKS_PER_SEGMENT deterministic PCM16 chunks, SegmentEnd (with the segment's
code point range in the session's text, as the server's); a summary ends the call. Errors follow the API contract: INVALID_ARGUMENT for an unknown voice (voice "nobody"),
an empty text or a bad sample rate; FAILED_PRECONDITION when text comes before the config.
It records what it received so tests can check what the client sent, and when.

Word timings: a fake made with ``word_timings=True`` honours ``word_timestamps`` as the
server does (one WordTimings message of estimates before a segment's audio; the fake's
estimates are its real times, so no final message), and one made with ``chunks_per_word``
gives each segment that many chunks per word (a segment as long as its text, as speech
is). The default fake sends no timings: a server older than the option.
"""

from __future__ import annotations

import re
import struct
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
TAGS = ("<laugh>", "<chuckle>", "<sigh>", "<cough>", "<sniffle>", "<groan>", "<yawn>", "<gasp>")
CHUNKS_PER_SEGMENT = 2
SAMPLES_AT_24K = 2048  # one Orpheus frame per chunk
TOKENS_PER_SEGMENT = 14
PCM16_RATES = (24000, 48000, 16000, 8000)
_CUT = re.compile(r"\n|[.!?]+(?=\s)")


def chunk_samples(rate: int) -> int:
    return SAMPLES_AT_24K * rate // 24000


def chunk_pcm(sequence_number: int, n: int) -> bytes:
    """The deterministic audio of chunk `sequence_number` (n PCM16 samples)."""
    return struct.pack(f"<{n}h", *(((sequence_number * 7 + j) % 200 - 100) * 100
                                   for j in range(n)))


@dataclass
class Received:
    """One call as the fake saw it: request kinds/values in order, with arrival times."""

    method: str
    items: list[tuple[str, object, float]] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)  # the call's invocation metadata

    @property
    def texts(self) -> list[str]:
        return [v for k, v, _ in self.items if k == "text"]

    @property
    def kinds(self) -> list[str]:
        return [k for k, _, _ in self.items]


class FakeTTSServicer(tts_pb2_grpc.TTSServiceServicer):
    def __init__(self, name: str = "fake", word_timings: bool = False,
                 chunks_per_word: int = 0) -> None:
        self.name = name
        self.word_timings = word_timings
        self.chunks_per_word = chunks_per_word
        self.calls: list[Received] = []
        self.lock = threading.Lock()
        # set each time a segment's SegmentEnd has been handed to gRPC
        self.segment_sent = threading.Condition()
        self.segments_sent = 0

    @property
    def num_calls(self) -> int:
        with self.lock:
            return len(self.calls)

    def _record(self, method: str, context=None) -> Received:
        rec = Received(method)
        if context is not None:
            rec.metadata = dict(context.invocation_metadata())
        with self.lock:
            self.calls.append(rec)
        return rec

    # -- RPCs ------------------------------------------------------------------------------

    def StreamingSynthesize(self, request_iterator, context):
        rec = self._record("StreamingSynthesize", context)
        session = None
        buf = ""
        at = 0  # code point of the session's text where buf starts
        for req in request_iterator:
            kind = req.WhichOneof("request")
            value = getattr(req, kind) if kind == "text" else None
            if kind == "flush":
                value = req.flush.id
            rec.items.append((kind, value, time.monotonic()))
            if kind == "config":
                if session is not None:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                  "config may only be the first message")
                session = _Session(self, context, req.config.voice, req.config.audio_format,
                                   self.word_timings and req.config.word_timestamps)
            elif session is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "the first message must be a config, got " + kind)
            elif kind == "text":
                buf += req.text
                while (m := _CUT.search(buf)) is not None:
                    segment, buf = buf[:m.end()], buf[m.end():]
                    yield from session.segment(segment, at)
                    at += len(segment)
            elif kind == "flush":
                yield from session.segment(buf, at, req.flush.id)
                at += len(buf)
                buf = ""
        if session is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no config received")
        yield from session.segment(buf, at)
        yield session.summary()

    def Synthesize(self, request, context):
        rec = self._record("Synthesize", context)
        rec.items.append(("text", request.text, time.monotonic()))
        if not request.text.strip():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "text is empty")
        session = _Session(self, context, request.voice, request.audio_format,
                           self.word_timings and request.word_timestamps)
        text, at = request.text, 0
        while (m := _CUT.search(text)) is not None:
            yield from session.segment(text[:m.end()], at)
            text, at = text[m.end():], at + m.end()
        yield from session.segment(text, at)
        yield session.summary()

    def ListVoices(self, request, context):
        self._record("ListVoices")
        return pb.ListVoicesResponse(
            voices=[pb.Voice(name=v, language="en", is_default=(v == "tara"),
                             adapter="zoe-lora" if v == "zoe" else "") for v in VOICES],
            emotion_tags=list(TAGS))

    def GetStatus(self, request, context):
        self._record("GetStatus")
        return pb.GetStatusResponse(serving=True, backend="fake", model=self.name,
                                    free_slots=4, total_slots=4, max_batch_size=4)


class _Session:
    """Per-call output state: sequence numbers and sample offsets run over the whole call."""

    def __init__(self, servicer: FakeTTSServicer, context, voice: str, fmt,
                 timings: bool = False) -> None:
        voice = voice or "tara"
        if voice not in VOICES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"unknown voice {voice!r}; known voices: {', '.join(VOICES)}")
        rate = fmt.sample_rate_hz or 24000
        if fmt.encoding not in (pb.AUDIO_ENCODING_UNSPECIFIED, pb.AUDIO_ENCODING_PCM16) \
                or rate not in PCM16_RATES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the fake serves PCM16 at {PCM16_RATES} Hz only")
        self.servicer = servicer
        self.rate = rate
        self.seq = 0
        self.offset = 0
        self.index = 0
        self.started = time.monotonic()
        self.first_audio_ms = 0.0
        self.timings = timings

    def segment(self, text: str, at: int = 0, flush_id: str = ""):
        """The messages of one segment: ``text`` starts at code point ``at`` of the
        session's text; ``flush_id`` is the flush that closed it, if one did."""
        start = at + len(text) - len(text.lstrip())
        text = text.strip()
        if not text:
            return
        where = {"text_start": start, "text_end": start + len(text), "flush_id": flush_id}
        n = chunk_samples(self.rate)
        spans = [(m.group(), start + m.start()) for m in re.finditer(r"\S+", text)]
        chunks = (self.servicer.chunks_per_word * len(spans) if self.servicer.chunks_per_word
                  else CHUNKS_PER_SEGMENT)
        yield pb.StreamingSynthesizeResponse(segment_start=pb.SegmentStart(
            segment_index=self.index, text=text, sample_offset=self.offset, **where))
        if self.timings:
            # the words share the segment's audio evenly, the last ending at its end
            share = chunks * n // len(spans)
            yield pb.StreamingSynthesizeResponse(word_timings=pb.WordTimings(
                segment_index=self.index, final=False, words=[pb.WordTiming(
                    text=w, char_start=c, char_end=c + len(w),
                    start_sample=self.offset + i * share,
                    end_sample=self.offset + (chunks * n if i == len(spans) - 1
                                              else (i + 1) * share))
                    for i, (w, c) in enumerate(spans)]))
        for _ in range(chunks):
            if self.seq == 0:
                self.first_audio_ms = (time.monotonic() - self.started) * 1000
            yield pb.StreamingSynthesizeResponse(audio=pb.AudioChunk(
                audio=chunk_pcm(self.seq, n), segment_index=self.index,
                sequence_number=self.seq, sample_offset=self.offset, num_samples=n))
            self.seq += 1
            self.offset += n
        yield pb.StreamingSynthesizeResponse(segment_end=pb.SegmentEnd(
            segment_index=self.index, text=text, num_samples=chunks * n,
            num_tokens=TOKENS_PER_SEGMENT, finish_reason="stop", **where))
        self.index += 1
        with self.servicer.segment_sent:
            self.servicer.segments_sent += 1
            self.servicer.segment_sent.notify_all()

    def summary(self) -> pb.StreamingSynthesizeResponse:
        return pb.StreamingSynthesizeResponse(summary=pb.SynthesisSummary(
            session_id="fake-session", time_to_first_audio_ms=self.first_audio_ms,
            audio_ms=self.offset * 1000 / self.rate, num_tokens=TOKENS_PER_SEGMENT * self.index,
            num_segments=self.index, num_samples=self.offset,
            wall_ms=(time.monotonic() - self.started) * 1000))


def _health_check(request: bytes, context) -> bytes:
    # grpc.health.v1.HealthCheckResponse{status: SERVING}, hand-encoded (field 1, varint 1).
    return b"\x08\x01"


class FakeServer:
    """A FakeTTSServicer on a real localhost port (sync grpc.server)."""

    def __init__(self, name: str = "fake", **options) -> None:
        self.servicer = FakeTTSServicer(name, **options)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        tts_pb2_grpc.add_TTSServiceServicer_to_server(self.servicer, self.server)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health",
            {"Check": grpc.unary_unary_rpc_method_handler(_health_check)}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{self.port}"

    def start(self) -> "FakeServer":
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(grace=None)

    def wait_segments_sent(self, count: int, timeout: float) -> bool:
        with self.servicer.segment_sent:
            return self.servicer.segment_sent.wait_for(
                lambda: self.servicer.segments_sent >= count, timeout)
