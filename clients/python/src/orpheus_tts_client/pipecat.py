"""Pipecat TTS service for a self-hosted orpheus-svc server (``pip install
orpheus-tts-client[pipecat]``).

    from orpheus_tts_client.pipecat import OrpheusTTSService

    tts = OrpheusTTSService(target="localhost:50051", voice="tara")
    pipeline = Pipeline([transport.input(), stt, user_agg, llm, tts, transport.output(), ...])
    worker = PipelineWorker(pipeline, params=PipelineParams(audio_out_sample_rate=24000))
    runner = WorkerRunner()             # pipecat.workers.runner (Pipecat 1.3+)
    await runner.add_workers(worker)    # PipelineTask / PipelineRunner / run(worker): deprecated
    await runner.run()

One StreamingSynthesize call per LLM turn: the LLM's text frames go in as they come
(Pipecat's TOKEN aggregation by default; the server cuts sentences itself, so nothing waits
for a sentence end on this side), the turn's end half-closes the call, and the audio comes
back as ``TTSAudioRawFrame`` at the pipeline's output sample rate (the server resamples;
it offers 8, 16, 24 and 48 kHz), between ``TTSStartedFrame`` and ``TTSStoppedFrame``. An
interruption cancels the call at once, which frees the server's slots at its next engine
step. Errors become Pipecat error frames.

What the user heard: the service pushes no text itself (``push_text_frames=False``); it
hands Pipecat each word with its time from the turn's first audio
(``add_word_timestamps``), and Pipecat's output transport holds each word's
``TTSTextFrame`` until that time, so after an interruption the assistant aggregator keeps
only the words played before it. The times are the server's word timings
(``word_timestamps``, docs/api.md; asked for by default, ``word_timestamps=False`` turns
them off): Pipecat takes no later correction, so each word is handed over just before it
plays (``word_lead_s``) at the best time known then: the server's final times where its
segment's audio has ended (usually the case past the first segment), else its estimate
stretched by this voice's measured real-to-expected length ratio and to the audio received
so far (``_word_clock.py``). A server without word timings (older than the option, or the
option off) gives whole segments instead: each segment's text is handed over at its own
first sample, exact, so the context is right to the segment. Pipecat's transport releases
words on its clock: the service models playback from when the audio arrived, so a stall
(audio slower than real time) delays the words handed over after it, but one after a word
was handed over lets that word run ahead (docs/clients.md, "What the agent heard").

Tracing: with Pipecat's tracing on (``PipelineWorker(..., enable_tracing=True)``, which needs
``pipecat-ai[tracing]``), ``run_tts`` is traced as Pipecat traces its own TTS services
(``traced_tts``: a ``tts`` span per audio context, in the turn's trace), and the turn's call
carries that span's W3C context, so orpheus-svc's span for the call is its child: one trace
from the user's turn to the server's engine (docs/observability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Iterator

try:
    from pipecat.frames.frames import (
        CancelFrame, EndFrame, ErrorFrame, Frame, StartFrame, TTSAudioRawFrame, TTSStoppedFrame,
    )
    from pipecat.services.settings import TTSSettings
    from pipecat.services.tts_service import TextAggregationMode, TTSService
except ImportError as e:  # pragma: no cover - depends on the extra
    raise ImportError("orpheus_tts_client.pipecat needs pipecat-ai: "
                      "pip install 'orpheus-tts-client[pipecat]'") from e
try:  # Pipecat's own TTS tracing decorator (a no-op where OpenTelemetry is not installed)
    from pipecat.utils.tracing.service_decorators import traced_tts
except ImportError:  # pragma: no cover - a Pipecat without tracing
    def traced_tts(f):
        return f

from ._aio_session import AsyncSession
from ._word_clock import LengthCalibration, Playout, TurnWords
from .aio import AsyncClient
from .types import (
    AudioChunk, Encoding, Sampling, SegmentEnd, SegmentStart, Summary, TTSError, WordTimings,
)


class OrpheusTTSService(TTSService):
    """Pipecat ``TTSService`` over orpheus-svc's StreamingSynthesize.

    Args:
        target: the server, ``host:port`` (or any target ``AsyncClient`` takes).
        voice: one of the server's voices (ListVoices); "" is the model's default.
        sampling: temperature / top_p / repetition_penalty / seed overrides.
        credentials: ``grpc.ssl_channel_credentials(...)`` for TLS; None is plaintext.
        api_key: sent as ``authorization: Bearer <key>`` on every call.
        metadata: extra call metadata.
        sample_rate: output rate; None follows the pipeline (``audio_out_sample_rate``).
        word_timestamps: ask the server for word timings (the default); False, or a server
            without them, times the context per segment instead (the module docstring).
        word_lead_s: how long before a word's estimated start it is handed to Pipecat
            (the path to the output transport takes milliseconds; a word's time cannot
            be corrected once handed over, so the later, the better informed).
        client_options: further keyword arguments for ``AsyncClient``, e.g. ``resume``: a
            session whose replica dies mid-way is resumed on another one (on by default for
            a target that names replicas; docs/clients.md).
        **kwargs: passed to Pipecat's ``TTSService`` (e.g. ``text_aggregation_mode``).
    """

    def __init__(self, *, target: str = "localhost:50051", voice: str = "tara",
                 sampling: Sampling | None = None, credentials: Any = None,
                 api_key: str | None = None, metadata: list[tuple[str, str]] | None = None,
                 sample_rate: int | None = None, client_options: dict[str, Any] | None = None,
                 settings: TTSSettings | None = None, word_timestamps: bool = True,
                 word_lead_s: float = 0.25, **kwargs: Any) -> None:
        default_settings = TTSSettings(model=None, voice=voice, language=None)
        if settings is not None:
            default_settings.apply_update(settings)
        kwargs.setdefault("text_aggregation_mode", TextAggregationMode.TOKEN)
        # Pipecat ends an audio context that gets no audio for this long. A turn's later
        # segments can wait for earlier ones (and a CPU demo server is slow), so allow more
        # than Pipecat's 3 s; a context that does time out still gets its TTSStoppedFrame.
        kwargs.setdefault("stop_frame_timeout_s", 10.0)
        # the words reach the context from add_word_timestamps, timed to the audio
        kwargs["push_text_frames"] = False
        super().__init__(sample_rate=sample_rate, push_start_frame=True, push_stop_frames=True,
                         settings=default_settings, **kwargs)
        self._word_timestamps = word_timestamps
        self._word_lead_s = word_lead_s
        self._calibration = LengthCalibration()  # this service's voice, over its turns
        self._target = target
        self._sampling = sampling
        self._metadata = list(metadata or [])
        if api_key:
            self._metadata.append(("authorization", f"Bearer {api_key}"))
        self._client_options = dict(client_options or {})
        if credentials is not None:
            self._client_options["credentials"] = credentials
        self._client: AsyncClient | None = None
        # one gRPC session per audio context (= per LLM turn), and the task reading it
        self._sessions: dict[str, AsyncSession] = {}
        self._readers: dict[str, asyncio.Task] = {}
        # per audio context: its words, its playback, what wakes its pacer, the pacer task
        self._turns: dict[str, _Turn] = {}

    def can_generate_metrics(self) -> bool:
        return True

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        # grpc.aio channels belong to the loop that makes them: the pipeline's
        self._client = AsyncClient(self._target, metadata=self._metadata or None,
                                   **self._client_options)

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._close()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._close()

    async def _close(self) -> None:
        for context_id in list(self._sessions):
            await self._drop(context_id)
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # -- synthesis ---------------------------------------------------------------------------

    @traced_tts
    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send ``text`` into the turn's session (opened on the turn's first text); the audio
        arrives through the session's reader task."""
        try:
            session = self._sessions.get(context_id)
            if session is None:
                session = self._open(context_id)
            await session.send(text)
            if text and context_id in self._turns:
                self._turns[context_id].words.sent(text)  # the server's offsets count it
            await self.start_tts_usage_metrics(text)
        except TTSError as e:
            yield ErrorFrame(error=f"orpheus-svc: {e}")
            return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is complete: half-close its session so the server speaks the rest
        and ends the call."""
        context_id = context_id or self.get_active_audio_context_id()
        session = self._sessions.get(context_id) if context_id else None
        if session is not None:
            try:
                await session.end()
            except TTSError:
                pass  # the call already ended; its reader reports the status

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Interruption: cancel the call now (the server frees its slots at the next step)."""
        await self.stop_all_metrics()
        await self._drop(context_id)
        await super().on_audio_context_interrupted(context_id)

    def _open(self, context_id: str) -> AsyncSession:
        if self._client is None:
            raise TTSError(_unavailable(), "the service has not been started")
        with _pipecat_trace(self, context_id):  # the call's metadata carries Pipecat's span
            session = self._client.session(
                self._settings.voice or "", encoding=Encoding.PCM16,
                sample_rate=self.sample_rate, sampling=self._sampling,
                word_timestamps=self._word_timestamps)
        self._sessions[context_id] = session
        turn = self._turns[context_id] = _Turn(TurnWords(session.sample_rate,
                                                         self._calibration))
        turn.pacer = self.create_task(self._pace(context_id, turn),
                                      f"orpheus-words-{context_id}")
        self._readers[context_id] = self.create_task(self._read(context_id, session),
                                                     f"orpheus-read-{context_id}")
        return session

    async def _read(self, context_id: str, session: AsyncSession) -> None:
        turn = self._turns.get(context_id)
        first = True
        ended = False
        try:
            async for ev in session:
                if isinstance(ev, AudioChunk) and ev.audio:
                    if first:
                        first = False
                        await self.stop_ttfb_metrics()
                    if turn is not None:
                        turn.words.audio(ev)
                        turn.playout.arrive(self._now(), ev.num_samples / session.sample_rate)
                    await self.append_to_audio_context(context_id, TTSAudioRawFrame(
                        audio=ev.audio, sample_rate=session.sample_rate, num_channels=1,
                        context_id=context_id))
                elif turn is not None and isinstance(ev, SegmentStart):
                    turn.words.segment_start(ev)
                elif turn is not None and isinstance(ev, WordTimings):
                    turn.words.word_timings(ev)
                elif turn is not None and isinstance(ev, SegmentEnd):
                    turn.words.segment_end(ev)
                elif isinstance(ev, Summary):
                    ended = True
                    break
                if turn is not None:
                    turn.wake.set()
        except TTSError as e:
            await self.push_error(error_msg=f"orpheus-svc: {e}")
        finally:
            self._sessions.pop(context_id, None)
            self._readers.pop(context_id, None)
        if turn is not None and self._turns.get(context_id) is turn:
            # the call ended: its pacer hands over every word left (their times are all
            # final now), before the stop frame ends the context; after an error the
            # words not spoken stay out
            await self._end_turn(context_id, turn, hand_over_rest=ended)
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    # -- words -------------------------------------------------------------------------------

    async def _pace(self, context_id: str, turn: "_Turn") -> None:
        """Hand the turn's words to Pipecat, each as playback nears it (``TurnWords.due``),
        and every word left once the call has ended. The only caller of
        ``add_word_timestamps`` for its context, so the words go in order."""
        lead = self._word_lead_s
        while True:
            turn.wake.clear()
            now = self._now()
            played = turn.playout.played(now)
            units = turn.words.rest() if turn.ended else turn.words.due(played, lead)
            # Pipecat times a word on its clock from the turn's first audio: playback that
            # stalled for want of audio is that much behind it
            lag = turn.playout.lag(now)
            for unit in units:
                await self.add_word_timestamps([(unit.text, unit.start_s + lag)], context_id)
            if turn.ended:
                return
            due_at = turn.words.next_due_s(lead)
            # (a stall only makes the wait end early: the loop then looks again)
            timeout = None if due_at is None else max(0.01, due_at - played)
            try:
                await asyncio.wait_for(turn.wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def _now(self) -> float:
        """Pipecat's clock, in seconds: what its transport times the words' frames on."""
        return self.get_clock().get_time() / 1e9

    async def _end_turn(self, context_id: str, turn: "_Turn", hand_over_rest: bool) -> None:
        self._turns.pop(context_id, None)
        pacer = turn.pacer
        if pacer is None or pacer is asyncio.current_task():
            return
        if hand_over_rest:
            turn.ended = True
            turn.wake.set()
            await pacer
        else:
            await self.cancel_task(pacer)

    async def _drop(self, context_id: str) -> None:
        session = self._sessions.pop(context_id, None)
        if session is not None:
            session.cancel()
        turn = self._turns.get(context_id)
        if turn is not None:
            await self._end_turn(context_id, turn, hand_over_rest=False)
        reader = self._readers.pop(context_id, None)
        if reader is not None and reader is not asyncio.current_task():
            await self.cancel_task(reader)


@dataclass
class _Turn:
    """One audio context's words (``TurnWords``), where its playback is (``Playout``, from
    when its audio was appended: Pipecat starts its word times at the first of it, or a
    little later, so words go a little early, never late), the event that wakes its pacer,
    and the pacer task."""

    words: TurnWords
    playout: Playout = field(default_factory=Playout)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pacer: asyncio.Task | None = None
    ended: bool = False


@contextlib.contextmanager
def _pipecat_trace(service: TTSService, context_id: str) -> Iterator[None]:
    """Make Pipecat's span of this audio context (its ``tts`` span; else the turn's) the
    current OpenTelemetry context while the call opens: the client puts the current context
    in the call's metadata (orpheus_tts_client/_trace.py). Pipecat opens that span before
    ``run_tts`` but does not make it current; it keeps it on the service, where
    ``traced_tts`` put it. Nothing happens without tracing."""
    spans = getattr(service, "_tts_spans", None) or {}
    entry = spans.get(context_id)
    tracing = getattr(service, "_tracing_context", None)
    if entry is None and tracing is None:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    ctx = trace.set_span_in_context(entry["span"]) if entry else tracing.get_turn_context()
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def _unavailable():
    import grpc

    return grpc.StatusCode.UNAVAILABLE
