"""TTSService over grpc.aio: proto <-> domain conversion happens here and only here."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import uuid
from typing import AsyncIterator

import grpc
import structlog
from orpheus_tts_client.proto.v1 import tts_pb2, tts_pb2_grpc

from orpheus_svc.core.errors import (CANCELLED, SessionError, classify, internal_message,
                                     new_error_id)
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import VoiceRegistry

from .calls import SessionCall, Settings
from .session import (AudioOut, FlushIn, Input, SegmentEnded, SegmentStarted, Summary, TextIn,
                      WordsOut)
from .settings import SamplingChoice, SessionSettings, session_settings
from .state import OpenCall, ServerState
from .traces import CallOrigin

log = structlog.get_logger("orpheus_svc.session")

# The gRPC edge's one mapping from the domain's status codes (the same names).
GRPC_STATUS = {status: getattr(grpc.StatusCode, status.name) for status in Status}

# The API package this server speaks (GetStatus.api_version): read from the stubs it serves,
# so it cannot drift from the contract (a breaking change is a new package: CHANGELOG.md).
API_VERSION = tts_pb2.DESCRIPTOR.package

_ENCODINGS = {
    tts_pb2.AUDIO_ENCODING_UNSPECIFIED: "pcm16",
    tts_pb2.AUDIO_ENCODING_PCM16: "pcm16",
    tts_pb2.AUDIO_ENCODING_MULAW: "mulaw",
    tts_pb2.AUDIO_ENCODING_WAV: "wav",
    tts_pb2.AUDIO_ENCODING_ALAW: "alaw",
    tts_pb2.AUDIO_ENCODING_OGG_OPUS: "ogg_opus",
    tts_pb2.AUDIO_ENCODING_MP3: "mp3",
    tts_pb2.AUDIO_ENCODING_FLAC: "flac",
}


def _settings(state: ServerState, msg, *, allow_wav: bool) -> SessionSettings:
    """A SynthesisConfig's or SynthesizeRequest's settings (voice, audio_format, sampling,
    normalize_text, word_timestamps) as plain values, validated by server/settings.py
    (shared with the HTTP edge); SessionError(INVALID_ARGUMENT) says what to change."""
    fmt, sampling = msg.audio_format, msg.sampling
    encoding = _ENCODINGS.get(fmt.encoding)
    if encoding is None:
        raise SessionError(Status.INVALID_ARGUMENT, f"unknown audio encoding {fmt.encoding}",
                           field="encoding")

    def given(name: str):  # proto3 optional: unset is None, an explicit 0 stays 0
        return getattr(sampling, name) if sampling.HasField(name) else None

    choice = SamplingChoice(given("temperature"), given("top_p"), given("repetition_penalty"),
                            given("seed"))
    return session_settings(state, msg.voice, encoding, fmt.sample_rate_hz, choice,
                            allow_wav=allow_wav, normalize=_normalize(msg),
                            word_timestamps=msg.word_timestamps)


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
    if isinstance(out, WordsOut):
        return response_cls(word_timings=tts_pb2.WordTimings(
            segment_index=out.segment_index, final=out.final,
            words=[tts_pb2.WordTiming(text=w.text, char_start=w.char_start, char_end=w.char_end,
                                      start_sample=w.start_sample, end_sample=w.end_sample,
                                      final=w.final) for w in out.words]))
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
                              emotion_tags=v.emotion_tags, adapter=v.adapter or "",
                              reference=v.reference)
                for v in voices.voices],
        emotion_tags=voices.emotion_tags)


class Unparseable:
    """What the tolerant deserializer hands the servicer for bytes that are no valid message
    (bad wire format, invalid UTF-8 in a string): the call then ends INVALID_ARGUMENT
    instead of grpc's UNKNOWN with an error-level traceback."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


UNPARSEABLE = "request could not be parsed"


def tolerant(cls):
    """A request deserializer for message class `cls` that never raises: bytes that are no
    valid message become an Unparseable (TTSService and AdminService use it)."""
    def parse(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError, or anything the runtime raises
            return Unparseable(f"{exc.__class__.__name__}: {exc}"[:200])
    return parse


def add_tts_servicer(servicer: "TTSServicer", server) -> None:
    """Register `servicer` like the generated add_TTSServiceServicer_to_server, but with
    requests parsed at this edge (tolerant deserializers, see Unparseable)."""
    handlers = {
        "StreamingSynthesize": grpc.stream_stream_rpc_method_handler(
            servicer.StreamingSynthesize,
            request_deserializer=tolerant(tts_pb2.StreamingSynthesizeRequest),
            response_serializer=tts_pb2.StreamingSynthesizeResponse.SerializeToString),
        "Synthesize": grpc.unary_stream_rpc_method_handler(
            servicer.Synthesize, request_deserializer=tolerant(tts_pb2.SynthesizeRequest),
            response_serializer=tts_pb2.SynthesizeResponse.SerializeToString),
        "ListVoices": grpc.unary_unary_rpc_method_handler(
            servicer.ListVoices, request_deserializer=tolerant(tts_pb2.ListVoicesRequest),
            response_serializer=tts_pb2.ListVoicesResponse.SerializeToString),
        "GetStatus": grpc.unary_unary_rpc_method_handler(
            servicer.GetStatus, request_deserializer=tolerant(tts_pb2.GetStatusRequest),
            response_serializer=tts_pb2.GetStatusResponse.SerializeToString),
    }
    name = tts_pb2.DESCRIPTOR.services_by_name["TTSService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))


# Seconds a call's final status may wait for a client that reads nothing (it is queued
# behind the unread audio); the handler ends either way, and grpc sends the status if the
# client ever reads or drops the connection.
_STATUS_GRACE_S = 1.0


class TTSServicer(tts_pb2_grpc.TTSServiceServicer):
    """Every call ends with a status; each refused, failed or cut call leaves one log line
    (session id, status, reason); every call counts against server.max_sessions."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def StreamingSynthesize(self, request_iterator, context):
        async def body(call: OpenCall):
            config = await self._first_message(request_iterator)
            await self._run(context, call,
                            functools.partial(_settings, self.state, config, allow_wav=False),
                            self._client_inputs(request_iterator),
                            tts_pb2.StreamingSynthesizeResponse)
        await self._serve(context, "StreamingSynthesize", body)

    async def Synthesize(self, request, context):
        async def inputs() -> AsyncIterator[Input]:
            yield TextIn(request.text)

        async def body(call: OpenCall):
            if isinstance(request, Unparseable):
                raise _Unparsed(request)
            if not request.text.strip():
                raise SessionError(Status.INVALID_ARGUMENT,
                                   "text is empty or only whitespace; nothing to speak")
            await self._run(context, call,
                            functools.partial(_settings, self.state, request, allow_wav=True),
                            inputs(), tts_pb2.SynthesizeResponse)
        await self._serve(context, "Synthesize", body)

    async def ListVoices(self, request, context):
        if isinstance(request, Unparseable):
            await self._refuse_unparsed(context, "ListVoices", request)
        runtime = self.state.runtime
        if runtime is None:
            await context.abort(GRPC_STATUS[Status.UNAVAILABLE],
                                "the model is still loading, so its voices are not known yet; "
                                "retry shortly (health reports SERVING when ready)")
        return voice_list(runtime.voices)

    async def GetStatus(self, request, context):
        if isinstance(request, Unparseable):
            await self._refuse_unparsed(context, "GetStatus", request)
        return tts_pb2.GetStatusResponse(**dataclasses.asdict(self.state.status()),
                                         api_version=API_VERSION)

    # -- shared ---------------------------------------------------------------------------

    async def _refuse_unparsed(self, context, rpc: str, bad: Unparseable) -> None:
        self.state.count_error(Status.INVALID_ARGUMENT)
        log.warning("call refused", rpc=rpc, status=Status.INVALID_ARGUMENT, reason=UNPARSEABLE,
                    detail=bad.error)
        await context.abort(GRPC_STATUS[Status.INVALID_ARGUMENT], UNPARSEABLE)

    async def _serve(self, context, rpc: str, body) -> None:
        """Open the call (or refuse it at the server.max_sessions cap), run `body`, and end
        it with exactly one status and, unless it ended OK, one log line."""
        call = OpenCall(uuid.uuid4().hex[:12], rpc, asyncio.current_task())
        structlog.contextvars.bind_contextvars(session_id=call.session_id)
        code = reason = None
        outcome = "ok"
        level = "info"
        try:
            refusal = self.state.open_call(call)
            if refusal is not None:
                self.state.count_error(Status.RESOURCE_EXHAUSTED)
                log.warning("call refused", rpc=rpc, status=Status.RESOURCE_EXHAUSTED,
                            reason=refusal)
                await context.abort(GRPC_STATUS[Status.RESOURCE_EXHAUSTED], refusal)
            await body(call)
        except _Unparsed as exc:
            code, reason, outcome, level = Status.INVALID_ARGUMENT, UNPARSEABLE, \
                Status.INVALID_ARGUMENT, "warning"
            detail = exc.bad.error
        except SessionError as exc:
            code, outcome, level = classify(exc)
            reason, detail = exc.message, None
        except asyncio.CancelledError:
            if call.cut_by is None:  # the client cancelled, its deadline passed, or it left
                outcome = CANCELLED.outcome
                log.info("call cancelled", rpc=rpc, status=Status.CANCELLED,
                         reason="cancelled by the client, its deadline or a disconnect")
                raise
            asyncio.current_task().uncancel()
            s = self.state.config.session
            if call.stalled:
                reason = call.stall_reason(s.stalled_consumer_timeout_seconds)
            else:
                reason = (f"no SynthesisConfig within {s.idle_timeout_seconds:g} s "
                          "(session.idle_timeout_seconds)")
            code, outcome, level = classify(None, cut_by=call.cut_by)
            detail = None
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must still end the call cleanly
            error_id = new_error_id()
            log.error("call failed", rpc=rpc, error_id=error_id, exc_info=exc)
            code, outcome, level = classify(exc)
            reason, detail = internal_message("internal error", error_id), None
        finally:
            self.state.close_call(call, outcome)
            structlog.contextvars.unbind_contextvars("session_id")
        if code is None:
            return
        fields = dict(rpc=rpc, status=code, reason=reason, session_id=call.session_id)
        if detail:
            fields["detail"] = detail
        if level != "error":
            getattr(log, level)("call ended" if call.session is not None else "call refused",
                                **fields)
        status = GRPC_STATUS[code]
        if call.stalled:
            try:  # queued behind audio the client does not read: do not wait for it
                await asyncio.wait_for(context.abort(status, reason), _STATUS_GRACE_S)
            except asyncio.TimeoutError:
                pass
            return
        await context.abort(status, reason)

    async def _first_message(self, request_iterator):
        try:
            first = await request_iterator.__anext__()
        except StopAsyncIteration:
            raise SessionError(Status.INVALID_ARGUMENT,
                               "empty stream: send a SynthesisConfig, then text") from None
        if isinstance(first, Unparseable):
            raise _Unparsed(first)
        if first.WhichOneof("request") != "config":
            raise SessionError(Status.FAILED_PRECONDITION,
                               "the first message must be a SynthesisConfig (voice, audio "
                               f"format); got {first.WhichOneof('request') or 'an empty message'}"
                               " first")
        return first.config

    async def _run(self, context, call: OpenCall, settings: Settings, inputs,
                   response_cls) -> None:
        """The call's session through the runner both edges share (server/calls.py), its
        outputs as proto messages."""
        origin = None
        if self.state.tracing is not None:  # the caller's trace context, its key's name
            origin = CallOrigin.of(context.invocation_metadata(),
                                   structlog.contextvars.get_contextvars().get("api_key"))
        run = SessionCall(self.state, call, settings, origin)
        await context.send_initial_metadata((("orpheus-session-id", call.session_id),))
        # aclosing: however the call ends (a stalled write cancelled, an abort), the session's
        # own cleanup runs now: its undelivered generations are cancelled, slots freed
        async with contextlib.aclosing(run.outputs(inputs)) as outs:
            async for out in outs:
                await context.write(_to_proto(out, response_cls))

    @staticmethod
    async def _client_inputs(request_iterator) -> AsyncIterator[Input]:
        async for req in request_iterator:
            if isinstance(req, Unparseable):
                raise _Unparsed(req)
            kind = req.WhichOneof("request")
            if kind == "text":
                yield TextIn(req.text)
            elif kind == "flush":
                yield FlushIn(req.flush.id)
            elif kind == "config":
                raise SessionError(Status.FAILED_PRECONDITION,
                                   "a SynthesisConfig may only be sent once, as the first message")
            else:
                raise SessionError(Status.INVALID_ARGUMENT, "empty request message: set text or flush")


class _Unparsed(SessionError):
    """An Unparseable request: INVALID_ARGUMENT, logged at warning with the parser's words."""

    def __init__(self, bad: Unparseable) -> None:
        super().__init__(Status.INVALID_ARGUMENT, UNPARSEABLE)
        self.bad = bad
