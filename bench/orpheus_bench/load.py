"""Load generation: closed-loop asyncio gRPC sessions in one worker process.

A worker owns some of the level's concurrency slots (slot j belongs to worker j % procs).
A slot is one listener: it runs sessions one after another until the worker's share of
requests is used up (or the duration is over), and with pace="playout" (the default) it
starts the next session only when its player would have finished the previous one
(first audio + jitter + audio length + stalls): C slots are C people listening in real
time, which is what "C real-time sessions" means. pace="none" starts the next session as
soon as the previous call ends (C concurrent generations: a heavier, unrealistic load
when generation is faster than real time). Slot j starts its first session at
start + ramp * j / concurrency, so arrivals are spread as in steady state.

Input styles:
  whole      Synthesize(text): the whole text in one request.
  streaming  StreamingSynthesize: config, then the text in word-sized fragments (each word
             with its trailing space) at `input_rate` words/s on an absolute schedule, like
             an LLM streaming its reply; then half-close.

Everything is timed with time.monotonic (system-wide on Linux, so traces of several
worker processes share one clock). The worker measures its own CPU (time.process_time,
all its threads, grpc's included) and the lag of its event loop: if either is high, the
client, not the server, may be what limits the level.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2, tts_pb2_grpc

from .metrics import SessionTrace, playout, summarize
from .texts import make_texts, word_fragments

ENCODINGS = {"pcm16": tts_pb2.AUDIO_ENCODING_PCM16, "mulaw": tts_pb2.AUDIO_ENCODING_MULAW}
LAG_INTERVAL_S = 0.02


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    procs: int
    target: str
    concurrency: int            # of the whole level, all workers together
    requests: int | None        # of the whole level; None: until duration_s
    duration_s: float | None
    ramp_s: float
    text_set: str
    text_count: int
    text_seed: int
    input: str                  # "whole" | "streaming"
    input_rate: float           # words per second (streaming)
    voice: str = "tara"
    encoding: str = "pcm16"
    sample_rate: int = 0        # 0: the encoding's default
    seed: int | None = 1        # sampling seed of request k = seed + 1000 k; None: server's
    timeout_s: float = 600.0
    pace: str = "playout"       # "playout" | "none" (see the module docstring)
    jitter_s: float = 0.1
    channels: int = 1
    start_at: float = 0.0       # time.monotonic() at which slot 0 starts
    word_timestamps: bool = False  # ask for word timings (the server's cost of them)

    def share(self) -> int | None:
        if self.requests is None:
            return None
        return self.requests // self.procs + (1 if self.worker < self.requests % self.procs else 0)

    def slots(self) -> list[int]:
        return [j for j in range(self.concurrency) if j % self.procs == self.worker]


def output_rate(encoding: str, rate: int) -> int:
    return rate or (8000 if encoding == "mulaw" else 24000)


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.texts = make_texts(spec.text_set, spec.text_count, spec.text_seed)
        self.rate = output_rate(spec.encoding, spec.sample_rate)
        self.traces: list[SessionTrace] = []
        self._issued = 0
        self._lags: list[float] = []

    def _format(self) -> tts_pb2.AudioFormat:
        return tts_pb2.AudioFormat(encoding=ENCODINGS[self.spec.encoding],
                                   sample_rate_hz=self.spec.sample_rate)

    def _sampling(self, k: int) -> tts_pb2.SamplingOptions:
        if self.spec.seed is None:
            return tts_pb2.SamplingOptions()
        return tts_pb2.SamplingOptions(seed=self.spec.seed + 1000 * k)

    async def run(self) -> dict:
        s = self.spec
        opts = [("grpc.use_local_subchannel_pool", 1),  # one TCP connection per channel
                ("grpc.max_receive_message_length", 64 << 20)]
        channels = [grpc.aio.insecure_channel(s.target, options=opts) for _ in range(s.channels)]
        try:
            await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
            stubs = [tts_pb2_grpc.TTSServiceStub(c) for c in channels]
            stop = asyncio.Event()
            lag = asyncio.create_task(self._lag_monitor(stop))
            cpu0, t0 = time.process_time(), time.monotonic()
            deadline = None if s.duration_s is None else s.start_at + s.ramp_s + s.duration_s
            await asyncio.gather(*(self._slot(j, stubs[i % len(stubs)], deadline)
                                   for i, j in enumerate(s.slots())))
            cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
            stop.set()
            await lag
        finally:
            for c in channels:
                await c.close()
        lag_ms = summarize([x * 1000 for x in self._lags])
        return {"worker": s.worker, "traces": [t.to_dict() for t in self.traces],
                "cpu_s": cpu, "wall_s": wall, "loop_lag_ms": lag_ms}

    async def _lag_monitor(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(LAG_INTERVAL_S)
            self._lags.append(max(0.0, time.monotonic() - t - LAG_INTERVAL_S))

    async def _slot(self, j: int, stub, deadline: float | None) -> None:
        s = self.spec
        first = s.start_at + s.ramp_s * j / max(s.concurrency, 1)
        await asyncio.sleep(max(0.0, first - time.monotonic()))
        share = s.share()
        next_at = 0.0  # the listener is still hearing the previous session until then
        while True:
            if share is not None and self._issued >= share:
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            if next_at > time.monotonic():
                await asyncio.sleep(next_at - time.monotonic())
                if share is not None and self._issued >= share:
                    return
            k = self._issued * s.procs + s.worker  # global request number
            self._issued += 1
            text = self.texts[k % len(self.texts)]
            trace = SessionTrace(index=k, t_start=time.monotonic(), sample_rate=self.rate,
                                 text_chars=len(text), worker=s.worker)
            self.traces.append(trace)
            if s.input == "streaming":
                await self._streaming(stub, trace, text, k)
            else:
                await self._whole(stub, trace, text, k)
            if s.pace == "playout" and trace.arrivals:
                p = playout(trace.arrivals, trace.sample_rate, s.jitter_s)
                if p.play_start is not None:
                    next_at = p.play_start + p.audio_s + p.stall_s

    async def _consume(self, call, trace: SessionTrace) -> str | None:
        """Read a response stream into the trace; returns segment 0's text."""
        seg0 = None
        now = time.monotonic
        arrivals = trace.arrivals
        async for resp in call:
            kind = resp.WhichOneof("response")
            if kind == "audio":
                arrivals.append((now(), resp.audio.num_samples))
            elif kind == "segment_start":
                if resp.segment_start.segment_index == 0:
                    seg0 = resp.segment_start.text
            elif kind == "summary":
                sm = resp.summary
                trace.tokens, trace.segments = sm.num_tokens, sm.num_segments
                trace.server_ttfa_ms = sm.time_to_first_audio_ms
        return seg0

    async def _whole(self, stub, trace: SessionTrace, text: str, k: int) -> None:
        req = tts_pb2.SynthesizeRequest(text=text, voice=self.spec.voice,
                                        audio_format=self._format(), sampling=self._sampling(k),
                                        word_timestamps=self.spec.word_timestamps)
        trace.t_start = trace.t_text_ready = time.monotonic()
        try:
            await self._consume(stub.Synthesize(req, timeout=self.spec.timeout_s), trace)
        except grpc.aio.AioRpcError as exc:
            trace.code, trace.error = exc.code().name, exc.details() or ""
        except Exception as exc:  # noqa: BLE001 - recorded, the level goes on
            trace.code, trace.error = "CLIENT_ERROR", f"{exc.__class__.__name__}: {exc}"
        trace.t_end = time.monotonic()

    async def _streaming(self, stub, trace: SessionTrace, text: str, k: int) -> None:
        frags = word_fragments(text)
        sent: list[float] = []
        closed: list[float] = []
        interval = 1.0 / self.spec.input_rate
        config = tts_pb2.SynthesisConfig(voice=self.spec.voice, audio_format=self._format(),
                                         sampling=self._sampling(k),
                                         word_timestamps=self.spec.word_timestamps)

        async def requests():
            yield tts_pb2.StreamingSynthesizeRequest(config=config)
            t0 = time.monotonic()
            trace.t_start = t0
            for i, frag in enumerate(frags):
                if i:
                    wait = t0 + i * interval - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                sent.append(time.monotonic())
                yield tts_pb2.StreamingSynthesizeRequest(text=frag)
            closed.append(time.monotonic())

        try:
            seg0 = await self._consume(
                stub.StreamingSynthesize(requests(), timeout=self.spec.timeout_s), trace)
        except grpc.aio.AioRpcError as exc:
            trace.code, trace.error = exc.code().name, exc.details() or ""
            seg0 = None
        except Exception as exc:  # noqa: BLE001
            trace.code, trace.error = "CLIENT_ERROR", f"{exc.__class__.__name__}: {exc}"
            seg0 = None
        trace.t_end = time.monotonic()
        trace.t_text_ready = text_ready_time(text, frags, sent, closed[0] if closed else None, seg0)


def text_ready_time(text: str, frags: list[str], sent: list[float], closed: float | None,
                    seg0: str | None) -> float | None:
    """When the server could first cut segment 0: the send time of the fragment that
    completes its text (fragments carry their trailing space, which the segmenter needs to
    see a sentence end), or the half-close when segment 0 runs to the end of the text."""
    if seg0 is None or not sent:
        return None
    pos = text.find(seg0)
    end = (pos if pos >= 0 else 0) + len(seg0)
    if end >= len(text.rstrip()):
        return closed
    cum = 0
    for frag, t in zip(frags, sent):
        cum += len(frag)
        if cum >= end:
            return t
    return closed


def run_worker(spec: WorkerSpec) -> dict:
    return asyncio.run(Worker(spec).run())


def worker_process(spec_dict: dict, conn) -> None:
    """Entry of a spawned worker: wait for the go (start_at), run, send the result back."""
    try:
        conn.send({"ready": True})
        start_at = conn.recv()
        spec = WorkerSpec(**{**spec_dict, "start_at": start_at})
        conn.send(run_worker(spec))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{exc.__class__.__name__}: {exc}"})
    finally:
        conn.close()


def spec_dict(spec: WorkerSpec) -> dict:
    return asdict(spec)
