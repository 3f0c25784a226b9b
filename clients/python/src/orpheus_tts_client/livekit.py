"""LiveKit Agents TTS for a self-hosted orpheus-svc server (``pip install
orpheus-tts-client[livekit]``).

    from orpheus_tts_client.livekit import OrpheusTTS

    session = AgentSession(stt=..., llm=..., tts=OrpheusTTS(target="localhost:50051", voice="tara"))

``synthesize(text)`` is one Synthesize call. ``stream()`` is one StreamingSynthesize call:
``push_text`` fragments go to the server as they come (it cuts sentences itself), each
``flush()`` is a server flush whose id comes back on the segment it closes, so LiveKit's
segments (one per flush) end exactly where the server's do; ``end_input()`` half-closes;
closing the stream cancels the call and frees the server's slots. Audio is PCM16 mono at
``sample_rate`` (8, 16, 24 or 48 kHz; the server resamples). Orpheus's emotion tags
(<laugh>, <sigh>, ...) are the model's markup and pass through unchanged.

Aligned transcripts: the plugin declares ``aligned_transcript`` and attaches the spoken text
to the audio as LiveKit ``TimedString``s (seconds from the LiveKit segment's first audio),
which LiveKit's transcript synchroniser follows, so an interrupted reply's transcript holds
what was played. With the server's word timings (``word_timestamps``, docs/api.md; asked for
by default) each word is one ``TimedString``, attached before its segment's audio at the
best time known then: the server's estimate, stretched by this voice's measured
real-to-expected segment length (``_word_clock.py``); LiveKit takes no later correction. A
server without word timings (or ``word_timestamps=False``) gives one ``TimedString`` per
segment, at the segment's first sample (exact), so the transcript is right to the segment.

Tracing: livekit-agents runs each request inside its ``tts_request`` span (made current), and
the client puts the current span's W3C context in the call's metadata, so orpheus-svc's span
for the call is its child (docs/observability.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    from livekit.agents import (
        DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectionError, APIConnectOptions,
        APIStatusError, tts, utils,
    )
    from livekit.agents.types import TimedString
except ImportError as e:  # pragma: no cover - depends on the extra
    raise ImportError("orpheus_tts_client.livekit needs livekit-agents: "
                      "pip install 'orpheus-tts-client[livekit]'") from e

import grpc

from ._aio_session import AsyncSession
from ._word_clock import LengthCalibration, TurnWords
from .aio import AsyncClient
from .types import (
    AudioChunk, Encoding, Sampling, SegmentEnd, SegmentStart, Summary, TTSError, WordTimings,
)

#: The English Orpheus checkpoints' emotion tags (the server's ListVoices reports the model's).
EMOTION_TAGS = ("<laugh>", "<chuckle>", "<sigh>", "<cough>", "<sniffle>", "<groan>", "<yawn>",
                "<gasp>")

# gRPC status -> an HTTP-like status for LiveKit's retry logic (4xx: not retried)
_HTTP = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 400,
         grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
         grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
         grpc.StatusCode.CANCELLED: 499, grpc.StatusCode.UNAVAILABLE: 503,
         grpc.StatusCode.DEADLINE_EXCEEDED: 504}


class OrpheusTTS(tts.TTS):
    """``livekit.agents.tts.TTS`` over orpheus-svc.

    Args:
        target: the server, ``host:port`` (or any target ``AsyncClient`` takes).
        voice: one of the server's voices; "" is the model's default.
        sample_rate: output rate in Hz (8000, 16000, 24000 or 48000).
        sampling: temperature / top_p / repetition_penalty / seed overrides.
        credentials: ``grpc.ssl_channel_credentials(...)`` for TLS; None is plaintext.
        api_key: sent as ``authorization: Bearer <key>``.
        client_options: further keyword arguments for ``AsyncClient``, e.g. ``resume``: a
            session whose replica dies mid-way is resumed on another one (on by default for
            a target that names replicas; docs/clients.md).
        word_timestamps: ask the server for word timings (the default); False, or a server
            without them, aligns the transcript per segment instead.
    """

    class Markup(tts.TTS.Markup):
        """Orpheus's markup: emotion tags written inline, spoken by the model as sounds."""

        def llm_instructions(self, *, speech_steering: Any = None) -> str | None:
            return ("You may add these sound tags inline where a speaker would make the "
                    "sound; write them exactly like this, nothing else in angle brackets: "
                    + " ".join(EMOTION_TAGS))

        def normalize(self, text: str) -> str:
            return text

        def convert(self, text: str) -> str:
            return text  # the tags are the model's own syntax

    def __init__(self, *, target: str = "localhost:50051", voice: str = "tara",
                 sample_rate: int = 24000, sampling: Sampling | None = None,
                 credentials: Any = None, api_key: str | None = None,
                 client_options: dict[str, Any] | None = None,
                 word_timestamps: bool = True) -> None:
        # aligned either way: per word with the server's timings, else per segment
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True,
                                                          aligned_transcript=True),
                         sample_rate=sample_rate, num_channels=1)
        self._word_timestamps = word_timestamps
        self._calibration = LengthCalibration()  # this voice, over its requests
        self._target = target
        self._voice = voice
        self._sampling = sampling
        self._options = dict(client_options or {})
        if credentials is not None:
            self._options["credentials"] = credentials
        if api_key:
            self._options["metadata"] = [("authorization", f"Bearer {api_key}")]
        self._clients: dict[asyncio.AbstractEventLoop, AsyncClient] = {}

    @property
    def model(self) -> str:
        return "orpheus"

    @property
    def provider(self) -> str:
        return "orpheus-svc"

    def _client(self) -> AsyncClient:
        # grpc.aio channels belong to one event loop
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = AsyncClient(self._target, **self._options)
        return client

    def _session(self) -> AsyncSession:
        return self._client().session(self._voice, encoding=Encoding.PCM16,
                                      sample_rate=self.sample_rate, sampling=self._sampling,
                                      word_timestamps=self._word_timestamps)

    def _words(self) -> TurnWords:
        return TurnWords(self.sample_rate, self._calibration)

    def synthesize(self, text: str, *,
                   conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
                   ) -> "ChunkedStream":
        return ChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
               ) -> "SynthesizeStream":
        return SynthesizeStream(tts=self, conn_options=conn_options)

    async def aclose(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()


class ChunkedStream(tts.ChunkedStream):
    """One Synthesize call for the whole text."""

    def __init__(self, *, tts: OrpheusTTS, input_text: str,
                 conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._orpheus = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=utils.shortuuid(), sample_rate=self._orpheus.sample_rate,
                                  num_channels=1, mime_type="audio/pcm")
        client = self._orpheus._client()
        words = self._orpheus._words()
        words.sent(self.input_text)
        try:
            async for ev in client.synthesize_events(
                    self.input_text, self._orpheus._voice, encoding=Encoding.PCM16,
                    sample_rate=self._orpheus.sample_rate, sampling=self._orpheus._sampling,
                    word_timestamps=self._orpheus._word_timestamps):
                _feed(words, ev)
                _push_transcript(output_emitter, words, 0.0)
                if isinstance(ev, AudioChunk) and ev.audio:
                    output_emitter.push(ev.audio)
        except TTSError as e:
            raise _api_error(e) from None
        output_emitter.flush()


class SynthesizeStream(tts.SynthesizeStream):
    """One StreamingSynthesize call; LiveKit segments (one per flush) map to server flush ids."""

    def __init__(self, *, tts: OrpheusTTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._orpheus = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=utils.shortuuid(), sample_rate=self._orpheus.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", stream=True)
        session = self._orpheus._session()
        words = self._orpheus._words()
        # ids of LiveKit segments whose flush went to the server, oldest first
        flushed: list[str] = []

        async def send() -> None:
            try:
                await send_all()
            except TTSError:
                pass  # the call has ended; the reading side raises its status

        async def send_all() -> None:
            segment_id = utils.shortuuid()
            has_text = False
            async for data in self._input_ch:
                if isinstance(data, self._FlushSentinel):
                    if has_text:
                        flushed.append(segment_id)
                        await session.flush(segment_id)
                        segment_id, has_text = utils.shortuuid(), False
                    continue
                if data:
                    self._mark_started()
                    has_text = True
                    await session.send(data)
                    words.sent(data)  # the server's offsets count it
            if has_text:  # end_input flushes first, so only if it was never called
                flushed.append(segment_id)
            await session.end()

        sender = asyncio.ensure_future(send())
        current: str | None = None
        base_s = 0.0  # where the current LiveKit segment's audio starts in the call
        try:
            async for ev in session:
                _feed(words, ev)
                if isinstance(ev, SegmentStart) and current is None:
                    current = flushed[0] if flushed else utils.shortuuid()
                    output_emitter.start_segment(segment_id=current)
                    base_s = ev.sample_offset / self._orpheus.sample_rate
                if current is not None:
                    _push_transcript(output_emitter, words, base_s)
                if isinstance(ev, AudioChunk) and ev.audio and current is not None:
                    output_emitter.push(ev.audio)
                elif isinstance(ev, SegmentEnd) and current is not None and (
                        ev.flush_id == current or ev.cause == "end_of_input"):
                    # the server segment that the LiveKit segment's flush closed
                    output_emitter.end_segment()
                    if flushed and flushed[0] == current:
                        flushed.pop(0)
                    current = None
                elif isinstance(ev, Summary):
                    break
            if current is not None:
                output_emitter.end_segment()
            if sender.done() and sender.exception() is not None:
                raise sender.exception()  # type: ignore[misc]
        except TTSError as e:
            raise _api_error(e) from None
        finally:
            if not sender.done():
                sender.cancel()
            session.cancel()  # a no-op after the summary; frees the slots if we stop early


def _feed(words: TurnWords, ev: object) -> None:
    """One event of the call into the request's words."""
    if isinstance(ev, SegmentStart):
        words.segment_start(ev)
    elif isinstance(ev, WordTimings):
        words.word_timings(ev)
    elif isinstance(ev, AudioChunk):
        words.audio(ev)
    elif isinstance(ev, SegmentEnd):
        words.segment_end(ev)


def _push_transcript(output_emitter: tts.AudioEmitter, words: TurnWords, base_s: float) -> None:
    """Attach every unit known so far (LiveKit takes them ahead of the audio; the emitter
    puts them on the next frame it sends) as a TimedString, in seconds from `base_s`."""
    for unit in words.due(float("inf"), 0.0):
        end = NOT_GIVEN if unit.end_s is None else max(0.0, unit.end_s - base_s)
        output_emitter.push_timed_transcript(TimedString(
            unit.text + " ", start_time=max(0.0, unit.start_s - base_s), end_time=end))


def _api_error(e: TTSError) -> Exception:
    if e.code == grpc.StatusCode.UNAVAILABLE:
        return APIConnectionError(f"orpheus-svc: {e}")
    return APIStatusError(f"orpheus-svc: {e}", status_code=_HTTP.get(e.code, 500))
