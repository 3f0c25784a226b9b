"""One synthesis session (a StreamingSynthesize or Synthesize call), in domain terms.

    client text --> reader task --> SentenceBuffer --> segments [0, 1, 2, ...]
                                                         |  submitted while fewer than
                                                         v  max_segments_in_flight are undelivered
    EngineLoop / Flusher events --> inbox --> writer: delivers segment d's audio, in order

Each segment is one generation opened with Runtime.open (engine/handle.py); every handle
delivers into one asyncio queue (the inbox), on the loop, one wake-up per batch, beside the
reader's notices. A generation's events are one ordered stream whose final AudioEvent
carries its Finish. The writer keeps events of later segments until their turn, so audio
is strictly in segment order while several segments generate at once.

The offline `orpheus-svc synth` (synth.py) runs this same class with a list as its input.

No grpc here: inputs and outputs are plain dataclasses; errors are SessionError with a
grpc status code name, mapped at the servicer edge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Union

import numpy as np
import structlog

from orpheus_svc.audio.pcm import Encoder, SessionEncoder
from orpheus_svc.config import TextConfig
from orpheus_svc.core.adapters import AdapterRefusal
from orpheus_svc.core.errors import SessionError, internal_message, new_error_id
from orpheus_svc.core.events import AudioEvent, EngineEvent, Finish, Rejected
from orpheus_svc.core.normalize import normalize_text
from orpheus_svc.core.reference_catalog import ReferenceRefusal
from orpheus_svc.core.status import Status
from orpheus_svc.core.tokens import SAMPLE_RATE
from orpheus_svc.engine.handle import GenerationHandle
from orpheus_svc.runtime import Runtime

from .segmenter import END_OF_INPUT, FLUSH, Cut, SentenceBuffer
from .settings import SessionSettings
from .word_times import SegmentWords, WordTime

_log = structlog.get_logger("orpheus_svc.session")


@dataclass(frozen=True)
class TextIn:
    text: str


@dataclass(frozen=True)
class FlushIn:
    id: str = ""  # Flush.id, echoed as flush_id on the segment it closes


Input = Union[TextIn, FlushIn]


@dataclass(frozen=True)
class SegmentStarted:
    segment_index: int
    text: str
    sample_offset: int
    cut: Cut | None = None  # cause and range in the session's text
    flush_id: str = ""


@dataclass(frozen=True)
class AudioOut:
    audio: bytes
    segment_index: int
    sequence_number: int
    sample_offset: int
    num_samples: int


@dataclass(frozen=True)
class SegmentEnded:
    segment_index: int
    text: str
    num_samples: int
    num_tokens: int
    finish_reason: str
    cut: Cut | None = None
    flush_id: str = ""


@dataclass(frozen=True)
class WordsOut:
    """A segment's word timings (only when the session asked for word_timestamps): its
    estimates before its first AudioOut, its final times (if they moved) before its
    SegmentEnded (server/word_times.py)."""

    segment_index: int
    words: tuple[WordTime, ...]
    final: bool


@dataclass(frozen=True)
class Summary:
    session_id: str
    time_to_first_audio_ms: float
    audio_ms: float
    num_tokens: int
    num_segments: int
    num_samples: int
    wall_ms: float


Output = Union[SegmentStarted, AudioOut, SegmentEnded, WordsOut, Summary]


@dataclass
class _Segment:
    index: int
    text: str
    cut: Cut | None = None
    flush_id: str = ""
    handle: GenerationHandle | None = None
    events: deque = field(default_factory=deque)
    encoder: Encoder | None = None
    num_samples: int = 0
    num_tokens: int = 0
    finish_reason: str = ""
    started: bool = False
    words: SegmentWords | None = None  # with word_timestamps: its words, from its start
    # When things happened to it (time.monotonic, once each): its text was cut, it was
    # submitted, its first audio and its end reached the session; with its Finish, what the
    # call's spans and histograms are built from (server/calls.py), after it ended.
    t_cut: float = 0.0
    t_open: float | None = None
    t_first_audio: float | None = None
    t_final: float | None = None
    finish: Finish | None = None
    span: object = None  # its open span while tracing (server/traces.py)


# One AudioChunk carries at most this much of the model's audio (2 s: 96 KB of PCM16 at
# 24 kHz, 192 KB resampled to 48 kHz; gRPC's default receive limit is 4 MB) unless a single
# flusher chunk is longer: queued chunks of a segment are merged up to it (_coalesce).
MAX_CHUNK_SAMPLES = 2 * SAMPLE_RATE


def _coalesce(pcm, final: bool, queued: deque) -> tuple:
    """`pcm` and the audio events of the same segment queued behind it, as one piece, while
    it stays within MAX_CHUNK_SAMPLES and up to the segment's final event: one gRPC message
    where the loop fell behind, and exactly the same samples (offsets stay contiguous)."""
    parts, total = [pcm], len(pcm)
    while queued and not final and total + len(queued[0].pcm) <= MAX_CHUNK_SAMPLES:
        ev = queued.popleft()
        parts.append(ev.pcm)
        total += len(ev.pcm)
        final = ev.final
    return (np.concatenate(parts) if len(parts) > 1 else pcm), final


_WAKE = object()
_IDLE = object()  # the watchdog saw the session idle for session.idle_timeout_seconds


class StreamSession:
    """One call's text in, its audio and segment events out (`run`); the settings were
    validated at the edge and are used as they are."""

    def __init__(self, runtime: Runtime, settings: SessionSettings, text: TextConfig,
                 session_id: str | None = None) -> None:
        self.runtime = runtime
        self.settings = settings
        self.text_config = text
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self._buffer = SentenceBuffer(max_chars=text.max_segment_chars,
                                      first_clause_min_chars=text.first_clause_min_chars,
                                      language=settings.language)
        self._segments: list[_Segment] = []
        self._by_gen: dict[int, _Segment] = {}
        self._adapter = -1  # the LoRA pool slot run() leased for the voice (-1: base model)
        self._reference = None  # the reference voice run() leased (None: not one)
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._input_done = False
        self._error: SessionError | None = None
        self._chars = 0
        self._delivered = 0
        self._seq = 0
        self._offset = 0
        self.t_first_text: float | None = None
        self.t_first_audio: float | None = None
        self.num_tokens = 0
        self._last_input = time.monotonic()  # the last client message (the idle clock)
        # Tracing (server/traces.py): called with each segment as it is submitted, returns
        # the traceparent its generation carries; None: not traced.
        self.on_open: Callable[[_Segment], str] | None = None
        self._idle_cut: float | None = None  # idle timeout that ended the input, if one did
        # one output stream across segments (WAV header once, one Opus/MP3/FLAC stream)
        self._audio = SessionEncoder(settings.encoding, settings.sample_rate, whole=settings.whole)

    async def run(self, inputs: AsyncIterator[Input]) -> AsyncIterator[Output]:
        # The session's voice holds its LoRA adapter (if one speaks it) or its reference
        # voice from here to the session's end, so an adapter unloaded meanwhile keeps its
        # slot, and every segment its weights (a reference voice: its clip), until this
        # session has all its audio (core/adapters.py, core/reference_catalog.py).
        try:
            lease = self.runtime.lease_voice(self.settings.voice)
        except (AdapterRefusal, ReferenceRefusal) as exc:  # being unloaded: no new session
            raise SessionError(exc.code, exc.message, field="voice") from None
        self._adapter = -1 if lease is None else lease.slot
        self._reference = None if lease is None else lease.reference
        loop = asyncio.get_running_loop()
        reader = asyncio.create_task(self._read(inputs))
        try:
            while True:
                self._submit_ready(loop)
                outs = self._deliverable()
                for out in outs:
                    yield out
                if self._input_done and self._delivered == len(self._segments):
                    break
                if outs:
                    continue  # delivering may have made room for more segments in flight
                # Everything that came in meanwhile, then one delivery pass: audio that
                # queued while the client's writes were in flight goes out together.
                item = await self._inbox.get()
                while True:
                    if self._error is not None:
                        raise self._error
                    if item is _IDLE:
                        self._end_idle(reader)
                    elif item is not _WAKE:
                        self._on_engine_event(item)
                    if self._inbox.empty():
                        break
                    item = self._inbox.get_nowait()
            tail = self._audio.finish()  # a compressed stream's last frames and trailer
            if tail:
                yield AudioOut(tail, len(self._segments) - 1, self._seq, self._offset, 0)
            yield self._summary()
            if self._idle_cut is not None:
                raise self._idle_error()
        finally:
            self._audio.close()
            reader.cancel()
            for seg in self._segments:
                if seg.handle is not None:
                    seg.handle.close()  # cancels the ones that have not ended
            if lease is not None:  # after the cancels: they reach the engine first
                lease.release()

    # -- reader -----------------------------------------------------------------------------

    async def _read(self, inputs: AsyncIterator[Input]) -> None:
        try:
            async for item in inputs:
                self._last_input = time.monotonic()
                if isinstance(item, TextIn):
                    if not item.text:
                        continue
                    if self.t_first_text is None:
                        self.t_first_text = time.monotonic()
                    self._chars += len(item.text)
                    limit = self.text_config.max_text_chars
                    if self._chars > limit:
                        raise SessionError(Status.INVALID_ARGUMENT, (
                            f"text exceeds this server's limit of {limit} characters per session "
                            f"(text.max_text_chars); split it over several calls"))
                    self._add(self._buffer.push_cuts(item.text))
                else:
                    self._add(self._buffer.flush_cuts(FLUSH), item.id)
            self._add(self._buffer.flush_cuts(END_OF_INPUT))
            if not self._segments:
                raise SessionError(Status.INVALID_ARGUMENT,
                                   "no text to speak: the text was empty or only whitespace")
            self._input_done = True
        except SessionError as exc:
            self._error = exc
        except Exception as exc:  # noqa: BLE001 - any failure reading must end the call
            error_id = new_error_id()
            _log.error("reading the request stream failed", session_id=self.session_id,
                       error_id=error_id, exc_info=exc)
            self._error = SessionError(Status.INTERNAL, internal_message(
                "the request stream failed", error_id))
        self._inbox.put_nowait(_WAKE)

    # -- idle -------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing left to speak and the input still open: waiting for the client."""
        return not self._input_done and self._delivered == len(self._segments)

    def check_idle(self, now: float, timeout: float) -> None:
        """Called by the watchdog: end the input once idle for `timeout` seconds."""
        if self.idle and self._idle_cut is None and now - self._last_input >= timeout:
            self._idle_cut = timeout
            self._inbox.put_nowait(_IDLE)

    def _end_idle(self, reader: asyncio.Task) -> None:
        """The idle timeout: what was buffered is spoken, then the call ends."""
        if self._input_done or self._error is not None:
            self._idle_cut = None  # the client half-closed meanwhile: an ordinary end
            return
        reader.cancel()
        self._add(self._buffer.flush_cuts(END_OF_INPUT))
        self._input_done = True
        if not self._segments:
            raise self._idle_error()

    def _idle_error(self) -> SessionError:
        return SessionError(Status.DEADLINE_EXCEEDED, (
            f"no message for {self._idle_cut:g} s with nothing left to speak "
            f"(session.idle_timeout_seconds); the text sent before was spoken; "
            f"open a new call to speak more"), cause="idle")

    def _add(self, cuts: list[Cut], flush_id: str = "") -> None:
        now = time.monotonic() if cuts else 0.0
        for cut in cuts:
            self._segments.append(_Segment(len(self._segments), cut.text, cut, t_cut=now))
        if flush_id and self._segments:
            # an empty flush closes no segment: its id goes to the last one cut, unless that
            # one's SegmentEnd is already out (proto: Flush.id)
            last = self._segments[-1]
            if cuts or last.index >= self._delivered:
                last.flush_id = flush_id
        if cuts:
            self._inbox.put_nowait(_WAKE)

    # -- writer -----------------------------------------------------------------------------

    def _submit_ready(self, loop: asyncio.AbstractEventLoop) -> None:
        limit = self._delivered + self.text_config.max_segments_in_flight
        for seg in self._segments[self._delivered:limit]:
            if seg.handle is not None:
                continue
            try:
                req = self.runtime.request(self.session_id, seg.index, self.settings.voice,
                                           self._spoken(seg),
                                           self.settings.segment_sampling(seg.index),
                                           adapter=self._adapter, reference=self._reference)
            except ValueError as exc:  # e.g. control tokens spelled in the text
                raise SessionError(Status.INVALID_ARGUMENT, f"segment {seg.index}: {exc}") from exc
            seg.t_open = time.monotonic()
            if self.on_open is not None:
                req = dataclasses.replace(req, trace=self.on_open(seg))
            seg.handle = self.runtime.open(req, self._inbox.put_nowait, loop)
            self._by_gen[seg.handle.gen_id] = seg

    def _spoken(self, seg: _Segment) -> str:
        """The text the model gets for `seg`: normalised when the session asked for it.
        Clients keep seeing seg.text (segment events); the spoken form is logged at debug."""
        if not self.settings.normalize_text:
            return seg.text
        spoken = normalize_text(seg.text, self.settings.language)
        if spoken != seg.text:
            _log.debug("segment normalised", session_id=self.session_id, segment=seg.index,
                       spoken=spoken)
        return spoken

    def _on_engine_event(self, ev: EngineEvent) -> None:
        seg = self._by_gen.get(ev.gen_id)
        if seg is None:
            return
        if isinstance(ev, Rejected):
            raise SessionError(ev.code, ev.reason)
        if not isinstance(ev, AudioEvent):
            return
        if seg.t_first_audio is None and ev.pcm.shape[0]:
            seg.t_first_audio = time.monotonic()
        fin = ev.finish
        if fin is not None:  # the final event: how the generation ended
            seg.t_final, seg.finish = time.monotonic(), fin
            if fin.reason == "error":
                raise SessionError(Status.INTERNAL, f"segment {seg.index} failed: {fin.error}")
            if fin.reason == "cancelled":  # not by us: a handle closes before it cancels
                raise SessionError(Status.UNAVAILABLE, f"segment {seg.index} was cancelled by the "
                                   "server (shutting down?); retry")
            seg.num_tokens, seg.finish_reason = fin.num_generated, fin.reason
            self.num_tokens += fin.num_generated
        seg.events.append(ev)

    def _deliverable(self) -> list[Output]:
        outs: list[Output] = []
        while self._delivered < len(self._segments):
            seg = self._segments[self._delivered]
            if not seg.events:
                break
            ev: AudioEvent = seg.events.popleft()
            pcm, final = ev.pcm, ev.final
            if not seg.started:
                seg.started = True
                seg.encoder = self._audio.segment()
                outs.append(SegmentStarted(seg.index, seg.text, self._offset, seg.cut,
                                           seg.flush_id))
                if self.settings.word_timestamps:
                    self._estimate_words(seg, outs)
            if seg.num_samples and seg.events:  # its first audio went alone, at once
                pcm, final = _coalesce(pcm, final, seg.events)
            data, n = seg.encoder.encode(pcm, last=final)
            if data or n:  # compressed: samples may go in before their bytes come out
                if self.t_first_audio is None and data:
                    self.t_first_audio = time.monotonic()
                outs.append(AudioOut(data, seg.index, self._seq, self._offset, n))
                self._seq += 1
                self._offset += n
                seg.num_samples += n
            if final:
                if seg.words is not None:
                    self._final_words(seg, outs)
                outs.append(SegmentEnded(seg.index, seg.text, seg.num_samples, seg.num_tokens,
                                         seg.finish_reason, seg.cut, seg.flush_id))
                seg.handle.close()
                self._delivered += 1
        return outs

    def _estimate_words(self, seg: _Segment, outs: list[Output]) -> None:
        """Its words' first times, before its audio (the segment's raw client text and its
        place in the session's text: the estimator weighs a word's normalised form itself)."""
        start = seg.cut.start if seg.cut is not None else 0
        spoken = (normalize_text(seg.text, self.settings.language)
                  if self.settings.normalize_text else seg.text)
        seg.words = SegmentWords(seg.text, start, spoken, self.settings.language,
                                 self.settings.sample_rate)
        words = seg.words.estimate(self._offset)
        if words:
            outs.append(WordsOut(seg.index, tuple(words), final=False))

    def _final_words(self, seg: _Segment, outs: list[Output]) -> None:
        """Its words' times on its real length, once its audio has ended, if they moved."""
        words = seg.words.final(seg.num_samples)
        if words:
            outs.append(WordsOut(seg.index, tuple(words), final=True))

    def segment(self, index: int) -> _Segment:
        """Segment `index` as the session keeps it (its timestamps and Finish: read-only)."""
        return self._segments[index]

    def segments(self) -> list[_Segment]:
        """The segments cut so far, in order (read-only)."""
        return list(self._segments)

    def _summary(self) -> Summary:
        now = time.monotonic()
        start = self.t_first_text or now
        ttfa = (self.t_first_audio - start) * 1000 if self.t_first_audio else 0.0
        return Summary(self.session_id, ttfa, self._offset / self.settings.sample_rate * 1000,
                       self.num_tokens, len(self._segments), self._offset, (now - start) * 1000)
