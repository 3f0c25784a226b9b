"""OpenAI-compatible routes: POST /v1/audio/speech, GET /v1/audio/voices, GET /v1/models.

    POST /v1/audio/speech {"model", "input", "voice", "response_format", "speed",
                           "stream_format": "audio" | "sse", "seed" (ours, optional),
                           "stream" (ours, optional, default true),
                           "word_timestamps" (ours, optional, default false; sse only)}

Audio streams as it is generated (chunked transfer encoding). With "stream": false it is
sent once complete, in one body with its Content-Length, and a WAV or FLAC then carries its
real length in its header (a stream's is open-ended: the length is not known when the
header goes out). The response starts when the first audio is ready, so a request refused before that (bad voice: 400, server full: 429,
loading or draining: 503) gets a proper status and OpenAI's JSON error body; an error after
the first bytes can only end the stream early (the SSE stream then sends an "error" event).
With "word_timestamps" the SSE stream also carries "speech.word_timings" events, an event
type of ours that OpenAI's stream does not define (docs/api.md); the audio body has no room
for them, so there the option is refused.
`speed` other than 1.0 is refused with 400: no time-stretching is done here.

The body must be sent as application/json (or a +json type): anything else is 415. It has
been read whole, within http.max_body_bytes and http.body_timeout_seconds, before the route
runs (limits.BoundedBody), and is decoded by jsonwire's bounded decoder.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from orpheus_svc.core.status import Status
from orpheus_svc.core.errors import SessionError
from orpheus_svc.server.session import AudioOut, Summary, TextIn, WordsOut

from . import jsonwire
from .auth import authorize
from .errors import ApiError
from .sessions import api_error, call_origin, require_runtime, run_session, session_settings

# response_format -> (our encoding, content type). OpenAI's pcm is 24 kHz s16le mono, as ours.
FORMATS = {
    "mp3": ("mp3", "audio/mpeg"),
    "opus": ("ogg_opus", "audio/ogg"),
    "flac": ("flac", "audio/flac"),
    "wav": ("wav", "audio/wav"),
    "pcm": ("pcm16", "audio/pcm"),
}
# Model ids accepted: ours, plus OpenAI's, so clients with a hard-coded model work unchanged.
MODEL_IDS = ("orpheus", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")


def _field(body: dict, name: str, kind: type, default=None, required: bool = False):
    value = body.get(name, default)
    if value is None:
        if required:
            raise ApiError(Status.INVALID_ARGUMENT, f"'{name}' is required", name)
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ApiError(Status.INVALID_ARGUMENT,
                       f"'{name}' must be a {kind.__name__}, got {type(value).__name__}", name)
    return value


def _is_json(content_type: str | None) -> bool:
    """application/json or a +json type, any parameters (charset) after it."""
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.startswith("application/") and kind.endswith("+json")


async def _json_body(request: Request) -> dict:
    """The body as a JSON object, decoded within jsonwire's limits (the size and time
    limits were applied before the route: limits.BoundedBody)."""
    content_type = request.headers.get("content-type")
    if not _is_json(content_type):
        raise ApiError(Status.INVALID_ARGUMENT, "the request body must be JSON, sent with "
                       f"Content-Type: application/json (got {(content_type or 'none')[:60]!r})",
                       http_status=415)
    return jsonwire.decode_object(await request.body())


async def speech(request: Request) -> Response:
    state = request.app.state.server_state
    try:
        await authorize(request)
        body = await _json_body(request)
        model = _field(body, "model", str, required=True)
        if model not in MODEL_IDS:
            raise ApiError(Status.NOT_FOUND, f"unknown model {model[:60]!r}; this server offers "
                           f"{', '.join(MODEL_IDS)} (all the same Orpheus model)", "model")
        text = _field(body, "input", str, required=True)
        if not text.strip():
            raise ApiError(Status.INVALID_ARGUMENT, "'input' is empty; nothing to speak", "input")
        limit = state.config.text.max_text_chars
        if len(text) > limit:
            raise ApiError(Status.INVALID_ARGUMENT, f"'input' is {len(text)} characters; this server's "
                           f"limit is {limit} (text.max_text_chars)", "input")
        response_format = _field(body, "response_format", str, "mp3")
        if response_format not in FORMATS:
            raise ApiError(Status.INVALID_ARGUMENT, f"response_format {response_format[:40]!r} "
                           f"is not offered; use one of {', '.join(FORMATS)}", "response_format")
        speed = _field(body, "speed", float, 1.0)
        if speed != 1.0:
            raise ApiError(Status.INVALID_ARGUMENT, "'speed' other than 1.0 is not supported by this "
                           "server (it does no time-stretching); omit it", "speed")
        stream_format = _field(body, "stream_format", str, "audio")
        if stream_format not in ("audio", "sse"):
            raise ApiError(Status.INVALID_ARGUMENT, "stream_format must be 'audio' or 'sse'",
                           "stream_format")
        stream = _field(body, "stream", bool, True)
        if not stream and stream_format == "sse":
            raise ApiError(Status.INVALID_ARGUMENT, "stream_format 'sse' is a stream: drop it "
                           "or 'stream': false", "stream")
        words = _field(body, "word_timestamps", bool, False)
        if words and stream_format != "sse":
            raise ApiError(Status.INVALID_ARGUMENT, "'word_timestamps' needs stream_format "
                           "'sse' (the audio body has no room for them)", "word_timestamps")
        seed = jsonwire.integer(body, "seed")  # its range: the shared validation
        voice = _field(body, "voice", str, "")
        encoding, media_type = FORMATS[response_format]
        # refused before the call opens (counted as errors, not as sessions), and the
        # runtime first: a loading server answers 503 whatever the request says
        require_runtime(state)
        settings = session_settings(state, voice, encoding, seed=seed, whole=not stream,
                                    word_timestamps=words)

        async def inputs():
            yield TextIn(text)

        outputs = run_session(state, settings, inputs(), rpc="http.speech",
                              origin=call_origin(request))
        first = await _first_audio(outputs)  # refusals before any audio get a status
        if not stream:  # the whole audio came as the first bytes (SessionSettings.whole)
            return Response(b"".join(await _bytes(first, outputs)), media_type=media_type)
    except ApiError as exc:
        return exc.response()
    if stream_format == "sse":
        return StreamingResponse(_sse(first, outputs), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    return StreamingResponse(_audio(first, outputs), media_type=media_type)


async def _first_audio(outputs: AsyncIterator) -> list:
    """Outputs up to and including the first audio bytes (or the summary)."""
    got = []
    try:
        async for out in outputs:
            got.append(out)
            if isinstance(out, AudioOut) and out.audio or isinstance(out, Summary):
                return got
    except SessionError as exc:
        raise api_error(exc) from exc
    except BaseException:
        await outputs.aclose()  # cancelled while waiting: free the slots now, not at GC
        raise
    return got


async def _chain(first: list, outputs: AsyncIterator) -> AsyncIterator:
    try:
        for out in first:
            yield out
        async for out in outputs:
            yield out
    finally:
        await outputs.aclose()  # the client went away: free the slots


async def _audio(first: list, outputs: AsyncIterator) -> AsyncIterator[bytes]:
    try:
        async for out in _chain(first, outputs):
            if isinstance(out, AudioOut) and out.audio:
                yield out.audio
    except SessionError:
        return  # headers are out: ending the body early is all that is left (logged)


async def _bytes(first: list, outputs: AsyncIterator) -> list[bytes]:
    """Every audio byte of a whole response (the session runs to its summary)."""
    try:
        return [out.audio async for out in _chain(first, outputs)
                if isinstance(out, AudioOut) and out.audio]
    except SessionError as exc:
        raise api_error(exc) from exc


async def _sse(first: list, outputs: AsyncIterator) -> AsyncIterator[str]:
    """OpenAI's speech SSE events: speech.audio.delta (base64 audio), speech.audio.done; and
    ours, speech.word_timings, when the request asked for word_timestamps."""
    try:
        async for out in _chain(first, outputs):
            if isinstance(out, AudioOut) and out.audio:
                event = {"type": "speech.audio.delta", "audio": base64.b64encode(out.audio).decode()}
            elif isinstance(out, Summary):
                event = {"type": "speech.audio.done", "usage": {
                    "input_tokens": 0, "output_tokens": out.num_tokens,
                    "total_tokens": out.num_tokens}}
            elif isinstance(out, WordsOut):
                event = {"type": "speech.word_timings", "segment_index": out.segment_index,
                         "final": out.final,
                         "words": [dataclasses.asdict(w) for w in out.words]}
            else:
                continue
            yield f"data: {json.dumps(event)}\n\n"
    except SessionError as exc:
        yield f"data: {json.dumps({'type': 'error', **api_error(exc).body()})}\n\n"


async def voices(request: Request) -> Response:
    state = request.app.state.server_state
    try:
        await authorize(request)
        registry = require_runtime(state).voices
    except ApiError as exc:
        return exc.response()
    return JSONResponse({
        "object": "list",
        "data": [{"id": v.name, "object": "voice", "name": v.name, "language": v.language,
                  "default": v.name == registry.default_voice.name,
                  "emotion_tags": list(v.emotion_tags), "adapter": v.adapter,
                  "reference": v.reference}
                 for v in registry.voices],
        "voices": registry.names, "default": registry.default_voice.name})


async def models(request: Request) -> Response:
    try:
        await authorize(request)
    except ApiError as exc:
        return exc.response()
    return JSONResponse({"object": "list", "data": [
        {"id": m, "object": "model", "created": 0, "owned_by": "orpheus-svc"} for m in MODEL_IDS]})
