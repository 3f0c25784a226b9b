"""TTSService over grpc.aio: proto <-> domain conversion happens here and only here."""

from __future__ import annotations

import dataclasses
import time
from typing import AsyncIterator

import grpc
import structlog
from orpheus_tts_client.proto.v1 import tts_pb2, tts_pb2_grpc

from orpheus_svc.audio.pcm import MULAW_RATES, PCM16_RATES
from orpheus_svc.core.generation import SamplingParams
from orpheus_svc.core.normalize import has_normalizer
from orpheus_svc.core.voices import VoiceRegistry, english_registry

from .session import (
    AudioOut,
    FlushIn,
    Input,
    SegmentEnded,
    SegmentStarted,
    SessionError,
    SessionOptions,
    StreamSession,
    Summary,
    TextIn,
)
from .state import ServerState

log = structlog.get_logger("orpheus_svc.session")

_ENCODINGS = {
    tts_pb2.AUDIO_ENCODING_UNSPECIFIED: "pcm16",
    tts_pb2.AUDIO_ENCODING_PCM16: "pcm16",
    tts_pb2.AUDIO_ENCODING_MULAW: "mulaw",
    tts_pb2.AUDIO_ENCODING_WAV: "wav",
}


def _options(state: ServerState, voice: str, fmt: tts_pb2.AudioFormat,
             sampling: tts_pb2.SamplingOptions, *, allow_wav: bool,
             normalize: bool | None = None) -> SessionOptions:
    """Validate a request's settings; SessionError(INVALID_ARGUMENT) says what to change."""
    voices = state.runtime.voices if state.runtime is not None else english_registry()
    entry = voices.resolve(voice)  # any case; empty = the model's default voice
    if entry is None:
        raise SessionError("INVALID_ARGUMENT", voices.unknown_message(voice))
    voice = entry.name  # the model's own spelling goes into the prompt
    encoding = _ENCODINGS.get(fmt.encoding)
    if encoding is None:
        raise SessionError("INVALID_ARGUMENT", f"unknown audio encoding {fmt.encoding}")
    if encoding == "wav" and not allow_wav:
        raise SessionError("INVALID_ARGUMENT",
                           "WAV is only offered by Synthesize; stream PCM16 or MULAW here")
    rate = fmt.sample_rate_hz or (8000 if encoding == "mulaw" else 24000)
    allowed = MULAW_RATES if encoding == "mulaw" else PCM16_RATES
    if rate not in allowed:
        raise SessionError("INVALID_ARGUMENT", (
            f"sample_rate_hz {rate} is not supported for {encoding.upper()}; "
            f"use one of {', '.join(map(str, allowed))}"))
    d = state.config.sampling
    params = SamplingParams(
        temperature=sampling.temperature if sampling.HasField("temperature") else d.temperature,
        top_p=sampling.top_p if sampling.HasField("top_p") else d.top_p,
        repetition_penalty=(sampling.repetition_penalty if sampling.HasField("repetition_penalty")
                            else d.repetition_penalty),
        seed=sampling.seed if sampling.HasField("seed") else None)
    try:
        params.validate()
    except ValueError as exc:
        raise SessionError("INVALID_ARGUMENT", f"sampling: {exc}") from exc
    # normalize_text unset: the server's default; never for a language without a normaliser
    wanted = state.config.text.normalize if normalize is None else normalize
    return SessionOptions(voice, encoding, rate, params,
                          normalize_text=wanted and has_normalizer(entry.language),
                          language=entry.language)


_CAUSES = {
    "sentence": tts_pb2.SEGMENT_END_CAUSE_SENTENCE, "clause": tts_pb2.SEGMENT_END_CAUSE_CLAUSE,
    "max_length": tts_pb2.SEGMENT_END_CAUSE_MAX_LENGTH, "flush": tts_pb2.SEGMENT_END_CAUSE_FLUSH,
    "end_of_input": tts_pb2.SEGMENT_END_CAUSE_END_OF_INPUT,
}


def _cut_fields(cut) -> dict:
    """SegmentStart/SegmentEnd fields of a segmenter Cut (cause, range in the session's text)."""
    if cut is None:
        return {}
    return {"cause": _CAUSES[cut.cause], "text_start": cut.start, "text_end": cut.end}


def _to_proto(out, response_cls):
    if isinstance(out, AudioOut):
        return response_cls(audio=tts_pb2.AudioChunk(
            audio=out.audio, segment_index=out.segment_index, sequence_number=out.sequence_number,
            sample_offset=out.sample_offset, num_samples=out.num_samples))
    if isinstance(out, SegmentStarted):
        return response_cls(segment_start=tts_pb2.SegmentStart(
            segment_index=out.segment_index, text=out.text, sample_offset=out.sample_offset,
            flush_id=out.flush_id, **_cut_fields(out.cut)))
    if isinstance(out, SegmentEnded):
        return response_cls(segment_end=tts_pb2.SegmentEnd(
            segment_index=out.segment_index, text=out.text, num_samples=out.num_samples,
            num_tokens=out.num_tokens, finish_reason=out.finish_reason,
            flush_id=out.flush_id, **_cut_fields(out.cut)))
    assert isinstance(out, Summary)
    return response_cls(summary=tts_pb2.SynthesisSummary(
        session_id=out.session_id, time_to_first_audio_ms=out.time_to_first_audio_ms,
        audio_ms=out.audio_ms, num_tokens=out.num_tokens, num_segments=out.num_segments,
        num_samples=out.num_samples, wall_ms=out.wall_ms))


def _normalize(msg) -> bool | None:
    """SynthesisConfig / SynthesizeRequest normalize_text; None when the client left it unset."""
    return msg.normalize_text if msg.HasField("normalize_text") else None


def voice_list(voices: VoiceRegistry) -> tts_pb2.ListVoicesResponse:
    """ListVoices' answer: the served model's voices, its default, every emotion tag."""
    return tts_pb2.ListVoicesResponse(
        voices=[tts_pb2.Voice(name=v.name, language=v.language, is_default=v.name == voices.default,
                              emotion_tags=v.emotion_tags) for v in voices.voices],
        emotion_tags=voices.emotion_tags)


class TTSServicer(tts_pb2_grpc.TTSServiceServicer):
    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def StreamingSynthesize(self, request_iterator, context):
        first = await self._first_message(request_iterator, context)
        async for resp in self._run(context, first, request_iterator,
                                    tts_pb2.StreamingSynthesizeResponse):
            yield resp

    async def Synthesize(self, request, context):
        async def inputs() -> AsyncIterator[Input]:
            yield TextIn(request.text)

        if not request.text.strip():
            self.state.count_error("INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "text is empty or only whitespace; nothing to speak")
        async for resp in self._run(context, (request.voice, request.audio_format,
                                              request.sampling, True, _normalize(request)),
                                    inputs(),
                                    tts_pb2.SynthesizeResponse, whole=True):
            yield resp

    async def ListVoices(self, request, context):
        runtime = self.state.runtime
        if runtime is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "the model is still loading, so its voices are not known yet; "
                                "retry shortly (health reports SERVING when ready)")
        return voice_list(runtime.voices)

    async def GetStatus(self, request, context):
        return tts_pb2.GetStatusResponse(**dataclasses.asdict(self.state.status()))

    # -- shared ---------------------------------------------------------------------------

    async def _first_message(self, request_iterator, context):
        try:
            first = await request_iterator.__anext__()
        except StopAsyncIteration:
            self.state.count_error("INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "empty stream: send a SynthesisConfig, then text")
        if first.WhichOneof("request") != "config":
            self.state.count_error("FAILED_PRECONDITION")
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "the first message must be a SynthesisConfig (voice, audio format); "
                                f"got {first.WhichOneof('request') or 'an empty message'} first")
        c = first.config
        return (c.voice, c.audio_format, c.sampling, False, _normalize(c))

    async def _run(self, context, settings, inputs, response_cls, whole: bool = False):
        voice, fmt, sampling, allow_wav, normalize = settings
        runtime = self.state.runtime_or_none()
        if runtime is None:
            self.state.count_error("UNAVAILABLE")
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "the model is still loading or the server is shutting down; "
                                "retry shortly (health reports SERVING when ready)")
        try:
            options = _options(self.state, voice, fmt, sampling, allow_wav=allow_wav,
                               normalize=normalize)
        except SessionError as exc:
            self.state.count_error(exc.code)
            await context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        session = StreamSession(runtime, options, self.state.config.text)
        await context.send_initial_metadata((("orpheus-session-id", session.session_id),))
        structlog.contextvars.bind_contextvars(session_id=session.session_id)
        source = inputs if whole else self._client_inputs(inputs)
        self.state.session_started()
        t0 = time.monotonic()
        outcome = "ok"
        try:
            log.info("session started", rpc=response_cls.__name__.removesuffix("Response"),
                     voice=options.voice, encoding=options.encoding, rate=options.sample_rate,
                     normalize=options.normalize_text)
            async for out in session.run(source):
                if isinstance(out, Summary):
                    self.state.add_audio_seconds(out.num_samples / options.sample_rate)
                    if out.time_to_first_audio_ms > 0:
                        self.state.observe_ttfa(out.time_to_first_audio_ms / 1000)
                    log.info("session finished", ttfa_ms=round(out.time_to_first_audio_ms, 1),
                             audio_ms=round(out.audio_ms), tokens=out.num_tokens,
                             segments=out.num_segments)
                yield _to_proto(out, response_cls)
        except SessionError as exc:
            outcome = exc.code
            log.info("session refused", code=exc.code, reason=exc.message)
            await context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        except BaseException:
            outcome = "cancelled"
            raise
        finally:
            self.state.session_ended(outcome)
            log.debug("session closed", outcome=outcome, wall_s=round(time.monotonic() - t0, 3))
            structlog.contextvars.unbind_contextvars("session_id")

    @staticmethod
    async def _client_inputs(request_iterator) -> AsyncIterator[Input]:
        async for req in request_iterator:
            kind = req.WhichOneof("request")
            if kind == "text":
                yield TextIn(req.text)
            elif kind == "flush":
                yield FlushIn(req.flush.id)
            elif kind == "config":
                raise SessionError("FAILED_PRECONDITION",
                                   "a SynthesisConfig may only be sent once, as the first message")
            else:
                raise SessionError("INVALID_ARGUMENT", "empty request message: set text or flush")
